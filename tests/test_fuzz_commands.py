"""The fuzz suite's other commands: the mutated library files of `test_fuzz.py` through `explain`, `trace`,
`draw` (SVG and HTML) and `check --no-jax`.

Each case must end in exit 0 with a whole output (a trace that is JSON, a drawing that is well-formed XML or
an HTML page, `check` agreeing with the spec) or exit 2 with one `meshsim: error:` line: never a traceback,
exit 3 or a hang. `check` exiting 1 is a disagreement between the simulator and the spec: a wrong answer.
Case counts scale with the Hypothesis profile, as the rest of the fuzz suite's do.
"""

from __future__ import annotations

import contextlib
import io
import json
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from hypothesis import Phase, event, given, settings
from hypothesis import strategies as st
from test_fuzz import _FUZZ, TEXTS, Outcome, _rotated, mutated_file, scaled, time_limit

import collectives._all_gather
from scenarios.cli import main

COMMANDS = st.sampled_from(["explain", "trace", "draw-svg", "draw-html", "check"])
COUNT = 400  # cases under the default profile


def run_command(command: str, path: Path, out: Path, jax: bool = False) -> Outcome:
    """`meshsim COMMAND path` in this process under the fuzz time limit, writing any file to `out`."""
    argv = {"explain": ["explain"], "trace": ["trace", "-o", f"{out}.json"], "draw-svg": ["draw", "-o", f"{out}.svg"],
            "draw-html": ["draw", "-o", f"{out}.html"], "check": ["check"] + ([] if jax else ["--no-jax"])}[command]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), time_limit():
        code = main([*argv, str(path)])
    return Outcome(code, stdout.getvalue(), stderr.getvalue())


def check_command(command: str, outcome: Outcome, out: Path) -> None:
    """Exit 0 with a whole output, or exit 2 with one `meshsim: error:` line; never a traceback or exit 3."""
    event(f"{command}: exit {outcome.code}")
    assert "Traceback" not in outcome.err, outcome.err
    if outcome.code == 2:
        first = outcome.err.splitlines()[0] if outcome.err else ""
        assert first.startswith("meshsim: error: ") and len(first) > len("meshsim: error: ") + 5, outcome.err
        return
    assert outcome.code == 0, f"{command}: exit {outcome.code}\n{outcome.out[-2000:]}\n{outcome.err}"
    if command == "trace":
        json.loads(Path(f"{out}.json").read_text(encoding="utf-8"))
    elif command == "draw-svg":
        ElementTree.fromstring(Path(f"{out}.svg").read_text(encoding="utf-8"))
    elif command == "draw-html":
        assert "<svg" in Path(f"{out}.html").read_text(encoding="utf-8")


def command_case(folder: Path, name: str, command: str, data, jax: bool = False) -> None:
    """One case: library file `name` mutated by up to three draws, then `command` on it, checked."""
    path, _ = mutated_file(folder, name, data)
    out = folder / "out"
    check_command(command, run_command(command, path, out, jax), out)


def _property(folder: Path, chosen: settings | None = None):
    @(chosen or settings(max_examples=scaled(COUNT), **_FUZZ))
    @given(name=st.sampled_from(sorted(TEXTS)), command=COMMANDS, data=st.data())
    def mutated_on_every_command(name, command, data):
        command_case(folder, name, command, data)
    return mutated_on_every_command


def test_mutated_scenario_files_on_every_other_command(tmp_path):
    """Library files with keys deleted, retyped or added through explain, trace, draw and check: a whole
    output or one clear error; no traceback, no hang."""
    _property(tmp_path)()


def test_planted_protocol_bug_is_found_by_check(monkeypatch, tmp_path):
    """With all_gather's protocol placing chunks at the wrong place, `check` disagrees, and the property fails."""
    monkeypatch.setattr(collectives._all_gather, "_protocol", _rotated(collectives._all_gather._protocol,
                                                                       lambda a: a.axis))
    chosen = settings(max_examples=200, database=None, deadline=None, derandomize=True,
                      phases=[p for p in Phase if p != Phase.explain],  # meant to fail: nothing to explain
                      suppress_health_check=list(_FUZZ["suppress_health_check"]))

    @chosen
    @given(name=st.sampled_from(sorted(n for n in TEXTS if "all_gather" in n)), data=st.data())
    def check_only(name, data):
        command_case(tmp_path, name, "check", data)

    with pytest.raises(AssertionError, match="check: exit 1"):
        check_only()
