"""`meshsim explain`: the docs' ragged walkthrough, every collective explained, violations named, `--step`."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest
import strategies
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario_text import scenario_text

import collectives
import scenarios
import sim
from scenarios.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = "scenarios/library/ragged_docs_example.toml"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_IOTA = st.just(strategies.Fill("iota", 0).array)


def _library_ops() -> dict[str, list[str]]:
    """Each collective's `[collective]` scenario files in scenarios/library/."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "scenarios" / "library").glob("*.toml")):
        op = tomllib.loads(path.read_text()).get("collective", {}).get("op")
        if op:
            found.setdefault(op, []).append(str(path.relative_to(ROOT)))
    return found


LIBRARY = _library_ops()
WITH_FILES = [op for op in collectives.REGISTRY if op in LIBRARY]


@pytest.fixture(autouse=True)
def wide_plain_output(monkeypatch):
    """Run from the repository root, 200 columns wide (no wrapping inside the checked lines), no forced colour."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "200")
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)


def explain(capsys, *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout without colour codes, and stderr of `meshsim explain ARGV`."""
    code = main(["explain", *argv])
    captured = capsys.readouterr()
    return code, _ANSI.sub("", captured.out), captured.err


def words(text: str) -> str:
    """`text` with every run of whitespace as one space, so wrapped sentences read whole."""
    return " ".join(text.split())


def test_the_docs_ragged_example_walks_through_rows_and_numbers(capsys):
    """The docs' example: the offsets table, the exchanged output_offsets, each send with its rows and values,
    the documented results and kept rows, every undefined case avoided, and the timeline's end time."""
    code, out, err = explain(capsys, DOCS)
    assert code == 0 and err == ""
    assert re.search(r"output_offsets\s+│\s+1 │\s+2", out)  # device 1's row of the offsets table
    said = words(out)
    assert "the all_to_all of the senders' output_offsets" in said
    assert re.search(r"1 │\s+0 │\s+0 │\s+\[1\] = 0 │\s+2 │\s+0:2", out)  # device 1 writes device 0's slice 1
    assert "SEND device 0 slice 1: operand rows 1:3 = [2, 2] -> RECEIVE device 1 at output rows 0:2" in said
    assert "SEND device 1 slice 0: operand rows 0:1 = [3] -> RECEIVE device 0 at output rows 1:2" in said
    assert "device 0: result [1, 3, 0, 0]; rows kept from output: 2:4" in said
    assert "device 1: result [2, 2, 4, 0]; rows kept from output: 3:4" in said
    assert out.count("  ok  ") == 6 and "BROKEN" not in out
    assert "simulated end time: 1.00008 us" in out
    titles = re.findall(r"step (\d+) of (\d+): ", out)
    assert [int(n) for n, _ in titles] == list(range(1, len(titles) + 1)) and titles[-1][0] == titles[-1][1]


def test_the_ragged_protocol_is_told_as_ragged_slices_not_an_all_reduce(capsys):
    """Under "The protocol", ragged_all_to_all's own text: its slices, where they come from and land, and its
    'direct' algorithm as one message per slice (not the all-reduce's whole operand folded in group order)."""
    code, out, _ = explain(capsys, DOCS)
    told = words(out.split("The protocol")[1].split("step 4 of")[0])
    assert code == 0 and "folds the arrivals in group order" not in told and "whole operand" not in told
    assert "input_offsets[j] : input_offsets[j] + send_sizes[j]" in told and "output_offsets[j]" in told
    assert "Algorithm direct: every member sends each of its non-empty slices" in told


@pytest.mark.parametrize("op", sorted(collectives.REGISTRY))
def test_every_algorithm_is_told_in_its_own_collectives_words(op):
    """`Definition.explain` for each algorithm a collective offers: non-empty paragraphs, and an algorithm
    other than 'direct' and 'auto' named in them; a fold of the arrivals in group order only for a reduction."""
    definition = collectives.definition(op)
    for algorithm in definition.algorithms:
        told = " ".join(definition.explain({"algorithm": algorithm.name}, 4))
        assert told, (op, algorithm.name)
        assert algorithm.name in ("direct", "auto") or algorithm.text in told, (op, algorithm.name)
        folds = "folds the arrivals in group order" in told
        assert folds <= (definition.reduction is not None and algorithm.name == "direct"), (op, algorithm.name)


def test_every_collective_has_a_library_scenario():
    """Every registered collective has a scenario in `scenarios/library/` for learners to run, explain and
    draw (CONTRIBUTING.md, "Adding a collective")."""
    assert set(collectives.REGISTRY) <= set(LIBRARY), sorted(set(collectives.REGISTRY) - set(LIBRARY))


@pytest.mark.parametrize("op", WITH_FILES)
def test_each_collectives_library_scenario_is_explained(op, capsys):
    """Every library scenario of a registered collective explains with exit 0: the call, its definition's
    summary, a step per group of messages (when it sends any) and the simulated end time."""
    summary = " ".join(collectives.definition(op).function.__doc__.split("\n\n")[0].split())
    for path in LIBRARY[op]:
        code, out, err = explain(capsys, path)
        assert code == 0 and err == "", path
        assert f"{op}: {summary}" in words(out) and "simulated end time: " in out, path
        assert op == "ragged_all_to_all" or "Messages: " in out or "No message is sent" in out, path


# precv's drawn calls are its partner psend's (`Definition.partner`); its library scenario is explained above
@pytest.mark.parametrize("op", [op for op in collectives.REGISTRY if collectives.definition(op).partner is None])
@settings(max_examples=3, suppress_health_check=[HealthCheck.function_scoped_fixture])  # capsys is read per case
@given(data=st.data())
def test_a_drawn_scenario_of_each_collective_is_explained(op, data, tmp_path_factory, capsys):
    """Any call of any collective, not only the library's, is explained from its definition and trace alone:
    a scenario written from a drawn call explains with exit 0, its summary and result."""
    case = data.draw(strategies.cases(op, fillers=_IOTA), label="case")
    path = tmp_path_factory.mktemp("explain") / f"{op}.toml"
    path.write_text(scenario_text(case))
    code, out, err = explain(capsys, str(path))
    assert code == 0 and err == "", path.read_text() + err
    assert f"{op}: " in out and "The result" in out and "simulated end time: " in out


def test_a_ring_psum_is_explained_step_by_step(capsys):
    """The ring algorithm's walkthrough names it and shows each of its 2(n - 1) steps with its chunks."""
    code, out, _ = explain(capsys, "scenarios/library/psum_ring.toml")
    assert code == 0 and "Algorithm ring: " in out
    steps = re.findall(r"Messages: (reduce-scatter|all-gather), step (\d)", out)
    assert steps == [(phase, str(s)) for phase in ("reduce-scatter", "all-gather") for s in range(3)]
    assert "chunk 3" in out and "[   6,   60,  600, 6000]" in out


def test_a_program_scenario_is_explained(capsys):
    """A `[program]` scenario: its source, its typed listing, each collective call's messages, the transposes."""
    code, out, _ = explain(capsys, "--allow-code", "scenarios/library/transpose_4_all_gather_invariant.toml")
    assert code == 0
    assert "all_gather_invariant[axis=0, axis_name='i', tiled=True]" in out
    assert "Call 1 of 1: all_gather_invariant" in out and "-> rows 6:8 of axis 0" in out
    assert "pscatter[axis=0, axis_name='i', tiled=True]" in out and "adjoint identity" in out


def _edited(tmp_path: Path, edits: dict[str, str]) -> str:
    """The docs' example with each `old` text replaced by `new`, written to a file."""
    text = (ROOT / DOCS).read_text()
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "edited.toml"
    path.write_text(text)
    return str(path)


def test_a_violating_ragged_scenario_is_explained_and_exits_2(tmp_path, capsys):
    """A ragged call that breaks three rules (a send past the operand, a size disagreement, an overlap) is
    explained, not refused bare: the planned sends, each broken rule with the simulator's words, the rules
    it keeps; then exit 2 with one line on stderr."""
    path = _edited(tmp_path, {"input_offsets = [0, 1]\nsend_sizes = [1, 2]": "input_offsets = [0, 2]\n"
                              "send_sizes = [1, 2]", "output_offsets = [1, 2]": "output_offsets = [0, 3]",
                              "recv_sizes = [1, 1]": "recv_sizes = [1, 2]"})
    code, out, err = explain(capsys, path)
    assert code == 2
    said = words(out)
    assert "The simulator refused the call: 3 broken rule(s)" in said
    assert "BROKEN sends in bounds" in said and "input_offsets[1]=2 plus send_sizes[1]=2 runs outside operand" in said
    assert "BROKEN sizes agree" in said and "recv_sizes[1]=2 but device 1 sends send_sizes[0]=1" in said
    assert "BROKEN no overlaps" in said and "overlap in rows [0, 1)" in said
    assert "ok receives in bounds" in said and "<- sizes disagree" in said
    assert err.count("\n") == 1 and err.startswith("meshsim: error: ") and "explained above" in err


def test_a_refused_call_of_another_collective_is_explained(tmp_path, capsys):
    """A psum whose algorithm does not fit its group (recursive doubling over 3 devices) is explained with the
    simulator's reason, and exits 2."""
    path = tmp_path / "psum3.toml"
    path.write_text('[mesh]\naxes = {i = 3}\n\n[collective]\nop = "psum"\naxis_name = "i"\n'
                    'algorithm = "recursive_doubling"\n\n[inputs]\nshape = [2]\nseed = 0\n')
    code, out, err = explain(capsys, str(path))
    assert code == 2 and "The simulator refused the call" in out and "power of two" in words(out)
    assert "meshsim: error: " in err


def test_step_without_a_terminal_is_ignored_and_said(capsys):
    """`--step` with stdin not a terminal prints every step without waiting, and says so on stderr."""
    code, out, err = explain(capsys, "--step", DOCS)
    assert code == 0 and "--step ignored: stdin is not a terminal" in err
    assert "step 1 of" in out and "The timeline" in out


def _read_until(fd: int, pattern: str, seen: bytearray, deadline: float) -> str:
    """Read from `fd` into `seen` until its text (colour codes removed) matches `pattern`; fail at `deadline`."""
    while not re.search(pattern, text := _ANSI.sub("", seen.decode(errors="replace"))):
        left = deadline - time.monotonic()
        assert left > 0, f"no {pattern!r} in time; got:\n{text[-2000:]}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                chunk = b""
            assert chunk, f"output ended before {pattern!r}; got:\n{text[-2000:]}"
            seen += chunk
    return text


_TITLE = r"step %d of \d+: "  # a step's rule, not the prompt "-- Enter for step 2 of 10 --"


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_step_waits_for_enter_in_a_terminal():
    """In a pseudo-terminal, `--step` shows step 1, prompts, and shows step 2 only after Enter."""
    import pty

    parent, child = pty.openpty()
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    process = subprocess.Popen([sys.executable, "-m", "scenarios.cli", "explain", "--step", DOCS], cwd=ROOT,
                               stdin=child, stdout=child, stderr=child, env=env, close_fds=True)
    os.close(child)
    try:
        seen, deadline = bytearray(), time.monotonic() + 60
        text = _read_until(parent, "Enter for step 2", seen, deadline)
        assert re.search(_TITLE % 1, text) and not re.search(_TITLE % 2, text)
        time.sleep(0.5)  # a waiting prompt prints nothing more
        while select.select([parent], [], [], 0)[0]:
            seen += os.read(parent, 4096)
        assert not re.search(_TITLE % 2, _ANSI.sub("", seen.decode(errors="replace")))
        os.write(parent, b"\n")
        _read_until(parent, _TITLE % 2, seen, deadline)
        _read_until(parent, "Enter for step 3", seen, deadline)
    finally:
        process.kill()
        process.wait(timeout=30)
        os.close(parent)


def test_python_scenarios_are_refused_with_a_reason(capsys):
    """A `.py` scenario is not explained: exit 2 and a message saying how to run it instead."""
    code, _, err = explain(capsys, "scenarios/library/layout_guide.py")
    assert code == 2 and "explain takes TOML scenario files" in err


def test_help_lists_explain(capsys):
    """`meshsim --help` lists the explain command with its one-line help."""
    with pytest.raises(SystemExit):
        main(["--help"])
    assert re.search(r"explain\s+walk through a scenario step by step", capsys.readouterr().out)


def _big_ragged(n: int) -> str:
    """A ragged exchange over n devices: device d sends one row to every device e != d, none to itself."""
    lines = ['title = "big ragged"', "[mesh]", f"axes = {{x = {n}}}", "[collective]", 'op = "ragged_all_to_all"',
             'axis_name = "x"', "[inputs]", 'dtype = "float32"']
    for d in range(n):
        sizes = [int(e != d) for e in range(n)]
        starts = [sum(sizes[:e]) for e in range(n)]
        lines += ["[[device]]", f"operand = {{fill = {d}, shape = [{n}, 2]}}",
                  f"output = {{fill = -1, shape = [{n}, 2]}}", f"input_offsets = {starts}", f"send_sizes = {sizes}",
                  f"output_offsets = {[d - (d > e) for e in range(n)]}", f"recv_sizes = {sizes}"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("op", ["ragged_all_to_all", "all_gather"])
def test_a_big_mesh_is_explained_in_bounded_text_and_in_full_on_request(op, tmp_path, capsys):
    """Past 16 devices (or 40 messages) explain shows the first and last few, saying how many are left out, so
    its length does not grow with the mesh; `--full` shows every device and message."""
    lengths, full = {}, {}
    for n in (24, 48):
        path = tmp_path / f"{op}{n}.toml"
        path.write_text(_big_ragged(n) if op == "ragged_all_to_all" else
                        f'title = "big"\n[mesh]\naxes = {{x = {n}}}\n[collective]\nop = "all_gather"\n'
                        f'axis_name = "x"\n[inputs]\nseed = 0\nshape = [1, 2]\n')
        assert main(["explain", str(path)]) == 0
        lengths[n] = capsys.readouterr().out
        assert main(["explain", "--full", str(path)]) == 0
        full[n] = capsys.readouterr().out
    assert f"... {48 - 16} more devices (--full shows every one)" in lengths[48]
    assert "--full shows" not in full[48]
    assert len(lengths[48].splitlines()) < 1.1 * len(lengths[24].splitlines())
    assert len(full[48].splitlines()) > 1.5 * len(full[24].splitlines())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 12), st.integers(1, 5))
                .map(lambda p: (p[0], p[1], p[1] + p[2])), max_size=12))
def test_overlapping_send_slices_are_found_in_one_pass_as_by_comparing_every_pair(spans):
    """The walkthrough's 'send slices may overlap' list: the one-pass sweep over every sender's spans equals the
    definition (a span that overlaps another span of the same sender), duplicates included."""
    from scenarios.cli.render._slices import overlapping

    want = [any(j != i and t[0] == s[0] and t[1] < s[2] and s[1] < t[2] for j, t in enumerate(spans))
            for i, s in enumerate(spans)]
    src, start, stop = (np.array([span[k] for span in spans], np.int64) for k in range(3))
    assert overlapping(src, start, stop).tolist() == want


_INDEX = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")


def _slices_by_pseudocode(scenario: scenarios.Scenario) -> list[tuple]:
    """Every slice as the docs' pseudocode reads it, one at a time: (src, i, dst, j, send rows, receive rows,
    the receiver's recv_sizes[j] or None)."""
    found = []
    axis_name, groups = scenario.params["axis_name"], scenario.params.get("axis_index_groups")
    for src in scenario.mesh.devices:
        a = {name: scenario.inputs[src][name].tolist() for name in _INDEX}
        members = scenario.mesh.group(src, axis_name, groups).members
        per = max(1, len(a["send_sizes"]) // len(members))
        for i, (offset, size) in enumerate(zip(a["input_offsets"], a["send_sizes"])):
            dst = members[min(i // per, len(members) - 1)]
            j = members.index(src) * per + i % per
            recv = scenario.inputs[dst]["recv_sizes"].tolist()
            at = a["output_offsets"][i] if i < len(a["output_offsets"]) else 0
            found.append((src, i, dst, j, (offset, offset + size), (at, at + size), recv[j] if j < len(recv) else None))
    return found


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_slice_table_is_the_docs_pseudocode_slice_by_slice(data, tmp_path_factory):
    """The slices explain reads as arrays, sender by sender, equal the pseudocode's loop over every slice, on
    drawn calls (groups among them) whose index arrays are then bent (entries changed, ends cut off), as a
    refused call's are."""
    from scenarios.cli.render._slices import slices_of

    case = data.draw(strategies.cases("ragged_all_to_all", fillers=_IOTA), label="case")
    path = tmp_path_factory.mktemp("slices") / "ragged.toml"
    path.write_text(scenario_text(case))
    scenario = scenarios.load(str(path))
    for arrays in scenario.inputs:
        for name in _INDEX:
            values = arrays[name].copy()
            if len(values) and data.draw(st.booleans(), label=f"bend {name}"):
                values[data.draw(st.integers(0, len(values) - 1))] += data.draw(st.integers(-3, 3))
            if len(values) and data.draw(st.booleans(), label=f"cut {name}"):
                values = values[:data.draw(st.integers(0, len(values) - 1))]
            arrays[name] = values
    table = slices_of(scenario)
    got = [(s.src, s.i, s.dst, s.j, s.src_rows, s.rows, s.recv_size) for s in map(table.__getitem__, range(len(table)))]
    assert got == _slices_by_pseudocode(scenario)


def test_a_big_ragged_walkthrough_costs_what_it_shows(tmp_path, capsys, monkeypatch):
    """Explaining a 48-device exchange (2,256 slices) asks each device's group a few times, not once per slice,
    and makes a message record only for each SEND it prints, never the whole trace: its cost grows with the
    mesh and what it shows, not with the square of the mesh."""
    path = tmp_path / "ragged48.toml"
    path.write_text(_big_ragged(48))
    asked, made = [0], [0]
    group, item = sim.Mesh.group, sim.Trace.__getitem__

    def counted_group(self, *args, **kwargs):
        asked[0] += 1
        return group(self, *args, **kwargs)

    def counted_item(self, index):
        made[0] += 1
        return item(self, index)

    def every_record(self):
        raise AssertionError("explain made every record of the trace")

    monkeypatch.setattr(sim.Mesh, "group", counted_group)
    monkeypatch.setattr(sim.Trace, "__getitem__", counted_item)
    monkeypatch.setattr(sim.Trace, "messages", property(every_record))
    code, out, err = explain(capsys, str(path))
    assert code == 0 and err == "" and "... 2216 more messages (--full shows every one)" in out
    assert asked[0] <= 10 * 48, asked[0]
    assert made[0] <= 4 * 40, made[0]


def test_auto_names_the_algorithm_it_picked(tmp_path, capsys):
    """A call with algorithm='auto' is explained with the algorithm the cost model picked, as `meshsim run`
    says it, and that algorithm's paragraph."""
    path = tmp_path / "auto.toml"
    path.write_text('[mesh]\naxes = {x = 2, y = 4}\n[network]\npreset = "tpu-v5e"\n[collective]\nop = "psum"\n'
                    'axis_name = ["x", "y"]\nalgorithm = "auto"\n[inputs]\nseed = 0\nshape = [65536]\n')
    picked = scenarios.run(scenarios.load(str(path))).algorithm
    assert picked not in (None, "auto")
    code, out, _ = explain(capsys, str(path))
    said = words(out)
    assert code == 0 and f"algorithm: {picked} (picked by 'auto')" in said
    assert f"This run's pick: {picked}. Algorithm {collectives.definition('psum').algorithm(picked).text}" in said
