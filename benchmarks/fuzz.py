"""The long fuzz run: >= 10,000 random cases across every kind of the fuzz suite, tabulated by outcome.

    nice -n 10 taskset -c 0 .venv/bin/python benchmarks/fuzz.py            # 11,900 cases, new ones each run
    .venv/bin/python benchmarks/fuzz.py --scale 0.1 --seed 7                # 1,190 cases, the same each run

Each kind draws its cases with Hypothesis (random unless `--seed` is given) and runs them through the same
functions as `tests/test_fuzz.py` and `tests/test_fuzz_files.py`, but a failing case does not stop the run:
it is counted and the run goes on. The table gives, per kind, the cases run, and how many ended in a
traceback (an exception escaping `main`, a traceback printed, or exit 3), a hang (still running after 20 s),
or a wrong answer (any other broken rule: a result unequal to the spec's, an exit code or a report that
does not add up). The first case of each failing kind is printed below the table. The exit status is 1
when any case failed.

Kinds: `scenario data` (library scenario files with keys deleted, retyped, added, nested), `scenario
bytes` (bytes inserted or cut, other encodings), `api` (random collective arguments through
`sim.shard_map`), `other commands` (the mutated files through `explain`, `trace`, `draw` and `check`, with
and without JAX), `sweep files`, `results files` (a finished sweep's and campaign's results, edited, then
`--resume`d) and `campaign flags` (random `meshsim campaign` command lines). Sweeps and campaigns run in
this process (`fuzz_files.stand_in`): the inputs are what is fuzzed, not the cluster.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import sys
import tempfile
import time
import tomllib
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import fuzz_files as running  # noqa: E402
import pytest  # noqa: E402
import test_fuzz as fuzz  # noqa: E402
import test_fuzz_commands as commands  # noqa: E402
import test_fuzz_files as files  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as seeded  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

COUNTS = {"scenario data": 2000, "scenario bytes": 1500, "api": 2500, "other commands": 1500, "sweep files": 2000,
          "results files": 1200, "campaign flags": 1200}


def _kinds(folder: Path) -> dict[str, tuple[Any, Callable[..., None]]]:
    """Each kind's strategy (of keyword arguments) and the function that runs and checks one case."""
    bytes_test = fuzz.test_scenario_files_with_bad_bytes_exit_0_or_2.hypothesis.inner_test
    (folder / "finished").mkdir()
    (folder / "campaigns").mkdir()
    with contextlib.redirect_stdout(io.StringIO()):
        finished = files.finish(folder / "finished")

    class Factory:
        def mktemp(self, name: str) -> Path:
            return Path(tempfile.mkdtemp(prefix=name, dir=folder))

    def scenario_data(name: str, flags: tuple[str, ...], data: Any) -> None:
        program = "program" in tomllib.loads(fuzz.TEXTS[name])
        path, tree = fuzz.mutated_file(folder, name, data)
        program = program and isinstance(tree.get("program"), dict) and isinstance(tree["program"].get("source"),
                                                                                  str)
        fuzz.check_outcome(fuzz.run_cli(path, *flags), flags, program)

    def other_command(name: str, command: str, data: Any) -> None:
        jax = command == "check with jax"
        commands.command_case(folder, name, "check" if jax else command, data, jax=jax)

    names = st.sampled_from(sorted(fuzz.TEXTS))
    return {
        "scenario data": (dict(name=names, flags=fuzz.FLAGS, data=st.data()), scenario_data),
        "scenario bytes": (dict(name=names, edit=fuzz.BYTE_EDITS, data=st.data()),
                           lambda **kw: bytes_test(Factory(), **kw)),
        "api": (dict(case=fuzz.api_cases()), fuzz.check_api_case),
        "other commands": (dict(name=names, command=commands.COMMANDS | st.just("check with jax"), data=st.data()),
                           other_command),
        "sweep files": (dict(data=files.sweep_files()), lambda data: files.sweep_case(folder, data)),
        "results files": (dict(kind=st.sampled_from(["sweep", "campaign"]), data=st.data()),
                          lambda kind, data: files.results_case(kind, finished, folder / "resumed", data.draw)),
        "campaign flags": (dict(argv=files.campaign_lines(folder / "campaigns")),
                           lambda argv: running.check_campaign(running.run(argv))),
    }


def classify(error: BaseException) -> str:
    """"hang", "traceback" or "wrong answer" for what a failing case raised."""
    if isinstance(error, fuzz.Hang):
        return "hang"
    text = str(error)
    if not isinstance(error, (AssertionError, pytest.fail.Exception)) or "Traceback" in text or "exit 3" in text:
        return "traceback"
    return "wrong answer"


def run_kind(kind: str, count: int, strategies: dict[str, Any], check: Callable[..., None],
             seed: int | None) -> tuple[collections.Counter, str]:
    """Run `count` cases of `kind`, counting outcomes; return the counts and the first failure's text."""
    counts: collections.Counter = collections.Counter()
    first: list[str] = []

    def case(**kwargs: Any) -> None:
        try:
            check(**kwargs)
            counts["cases"] += 1
        except BaseException as error:
            if isinstance(error, KeyboardInterrupt) or type(error).__module__.startswith("hypothesis"):
                raise  # Hypothesis's own control flow (a draw that overran its buffer ends the example)
            counts["cases"] += 1
            counts[classify(error)] += 1
            if not first:
                first.append(f"{kind}: {kwargs!r:.2000}\n{''.join(traceback.format_exception(error))[-3000:]}")

    chosen = settings(max_examples=count, deadline=None, database=None, derandomize=False,
                      phases=(Phase.generate,), suppress_health_check=list(HealthCheck))
    test = chosen(given(**strategies)(case))
    (seeded(seed)(test) if seed is not None else test)()
    return counts, first[0] if first else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every kind's count (default 1)")
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis's seed (default: a new one each run)")
    parser.add_argument("--kinds", nargs="+", choices=sorted(COUNTS), default=list(COUNTS))
    options = parser.parse_args()
    monkeypatch = pytest.MonkeyPatch()
    running.stand_in(monkeypatch)
    rows, failures = [], []
    with tempfile.TemporaryDirectory() as name:
        kinds = _kinds(Path(name))
        for kind in options.kinds:
            start = time.perf_counter()
            counts, failure = run_kind(kind, max(1, round(COUNTS[kind] * options.scale)), *kinds[kind],
                                       options.seed)
            rows.append((kind, counts, time.perf_counter() - start))
            failures += [failure] if failure else []
            print(f"{kind}: {dict(counts)} in {rows[-1][2]:.0f} s", file=sys.stderr, flush=True)
    monkeypatch.undo()
    columns = ("cases", "traceback", "hang", "wrong answer")
    print(f"| kind | {' | '.join(columns)} | seconds |\n|---|{'---:|' * (len(columns) + 1)}")
    for kind, counts, seconds in rows:
        print(f"| {kind} | {' | '.join(str(counts[c]) for c in columns)} | {seconds:.0f} |")
    total = sum((counts for _, counts, _ in rows), collections.Counter())
    print(f"| total | {' | '.join(str(total[c]) for c in columns)} | {sum(r[2] for r in rows):.0f} |")
    for failure in failures:
        print(f"\nfirst failure of {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
