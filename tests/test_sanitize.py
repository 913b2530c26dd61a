"""Sanitize mode: a whole program runs, every violation of every call is reported by device, call and rule."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import collectives
import sim
from scenarios.cli import main
from sim import P

ROOT = Path(__file__).resolve().parents[1]
MESH = sim.Mesh({"x": 2})
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# Two ragged calls on {'x': 2}, each device's index tables one row of these (input_offsets, send_sizes,
# output_offsets, recv_sizes). Call A: both senders write device 0's row 0 (an overlap on device 0).
# Call B: device 0's slice 1 reads operand rows [3, 5) of 4 (out of bounds), and both senders write row 1
# of device 1 (an overlap on device 1).
CALL_A = ([[0, 1], [0, 1]], [[1, 1], [1, 1]], [[0, 0], [0, 2]], [[1, 1], [1, 1]])
CALL_B = ([[0, 3], [0, 1]], [[1, 2], [1, 1]], [[1, 0], [3, 1]], [[1, 1], [2, 1]])
OPERAND = np.arange(8.0)  # device 0 holds rows 0..3, device 1 rows 4..7
OUTPUT = np.full(8, -1.0)


def two_calls(operand, output, *tables):
    """Two ragged_all_to_all calls on the same operand and output, with the tables of CALL_A and CALL_B."""
    first = collectives.ragged_all_to_all(operand, output, *tables[:4], axis_name="x")
    second = collectives.ragged_all_to_all(operand, output, *tables[4:], axis_name="x")
    return first, second


def tables() -> list[np.ndarray]:
    return [np.asarray(t, np.int32).reshape(-1) for t in (*CALL_A, *CALL_B)]


def mapped(f=two_calls, sanitize: bool = True) -> sim.ShardMapped:
    return sim.shard_map(f, mesh=MESH, in_specs=P("x"), out_specs=(P("x"), P("x")), sanitize=sanitize)


def test_every_violation_of_every_call_is_reported_with_its_rows():
    """Violations in two calls on two devices are all recorded, each with device, call, rule and rows."""
    run = mapped().run(OPERAND, OUTPUT, *tables())
    found = {(v.device, v.call, v.rule, v.rows) for v in run.violations}
    assert found == {(0, 0, "overlap", (0, 1)), (0, 1, "out of bounds", (3, 5)), (1, 1, "overlap", (1, 2))}
    assert all(v.collective == "ragged_all_to_all" and v.members == (0, 1) for v in run.violations)
    assert run.stopped is None
    report = run.report()
    assert report.startswith("3 violation(s)\ndevice 0\n  ragged_all_to_all call #0 over devices [0, 1]: overlap")
    assert "device 1\n  ragged_all_to_all call #1 over devices [0, 1]: overlap\n    rows 1:2: " in report
    assert "[skipped send slice 1 of device 0]" in report


def test_skipped_slices_keep_the_output_rows():
    """A skipped slice is neither sent nor received: the receiver keeps `output`'s rows there, and every
    other slice lands as without the broken ones."""
    run = mapped().run(OPERAND, OUTPUT, *tables())
    first, second = run.outputs
    # call A: both slices into device 0 skipped; device 1 gets device 0's row 1 at 0, its own row 5 at 2
    assert first.tolist() == [-1, -1, -1, -1, 1, -1, 5, -1]
    # call B: device 0 gets row 0 at 1 and device 1's row 4 at 3; both slices into device 1 skipped
    assert second.tolist() == [-1, 0, -1, 4, -1, -1, -1, -1]
    sent = [{(m.src, m.dst, m.detail["slice"]) for m in run.trace if m.call == call} for call in (0, 1)]
    assert sent == [{(0, 1, 1), (1, 1, 1)}, {(0, 0, 0), (1, 0, 0)}]


def test_without_sanitize_the_first_bad_call_raises_as_before():
    """Unsanitized, the same program raises at its first bad call, with that call's message only."""
    with pytest.raises(sim.InvalidArgumentError, match=r"^ragged_all_to_all: 1 invalid argument\(s\)\n  device 0: "
                       r"slice 0 \(from device 0, output rows \[0, 1\)\) and slice 1 \(from device 1, output rows "
                       r"\[0, 1\)\) overlap in rows \[0, 1\)$") as caught:
        mapped(sanitize=False)(OPERAND, OUTPUT, *tables())
    assert [str(v) for v in caught.value.violations] == [str(caught.value).split("\n  ")[1]]


def test_a_call_that_cannot_run_stops_the_run_and_keeps_what_was_found():
    """A collective whose operands disagree in shape cannot run: the run stops there, with the earlier
    call's violations and its own in the report, and no outputs."""
    def program(operand, output, *index):
        first = collectives.ragged_all_to_all(operand, output, *index[:4], axis_name="x")
        keep = int(collectives.axis_index("x")) + 1
        return first, collectives.psum(operand[:keep], "x")

    run = mapped(program).run(OPERAND, OUTPUT, *tables()[:4])
    assert run.outputs is None
    assert [(v.device, v.collective, v.rule) for v in run.violations] == [
        (0, "ragged_all_to_all", "overlap"), (1, "psum", "mismatch: x")]
    assert run.stopped.startswith("psum: 1 invalid argument(s)")
    assert run.report().endswith("the run stopped there: psum: 1 invalid argument(s)")


def test_a_clean_program_runs_the_same_with_sanitize():
    """Sanitizing a program without violations changes nothing: same outputs, trace, calls and time."""
    ok = [np.asarray(t, np.int32).reshape(-1) for t in (*CALL_A[:2], [[0, 1], [1, 2]], CALL_A[3])] * 2
    plain, checked = mapped(sanitize=False).run(OPERAND, OUTPUT, *ok), mapped().run(OPERAND, OUTPUT, *ok)
    assert checked.violations == [] and checked.stopped is None and checked.report() == "no violations"
    assert [o.tolist() for o in checked.outputs] == [o.tolist() for o in plain.outputs]
    assert list(checked.trace) == list(plain.trace)
    assert checked.calls == plain.calls and checked.end_time_s == plain.end_time_s


_PROGRAM = f'''title = "two bad ragged calls"
[mesh]
axes = {{x = 2}}
[program]
source = """
import numpy as np
def f(operand, output, *tables):
    first = ragged_all_to_all(operand, output, *tables[:4], axis_name='x')
    return first, ragged_all_to_all(operand, output, *tables[4:], axis_name='x')
"""
in_specs = "P('x')"
out_specs = "(P('x'), P('x'))"
transpose = false
[[args]]
value = {OPERAND.tolist()}
[[args]]
value = {OUTPUT.tolist()}
''' + "".join(f'[[args]]\nvalue = {np.asarray(t).reshape(-1).tolist()}\ndtype = "int32"\n' for t in (*CALL_A, *CALL_B))


@pytest.fixture(autouse=True)
def wide_output(monkeypatch):
    """From the repository root, on a terminal wide enough for the report's rows not to wrap."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "240")


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(["run", *argv])
    return code, _ANSI.sub("", capsys.readouterr().out)


def test_cli_sanitize_prints_every_violation_and_exits_1(tmp_path, capsys):
    """`meshsim run --sanitize` prints the program's result and a table of all three violations, exit 1."""
    path = tmp_path / "bad.toml"
    path.write_text(_PROGRAM)
    code, out = run_cli(capsys, str(path), "--sanitize", "--allow-code")
    assert code == 1
    assert "sanitize: 3 violation(s)" in out
    assert out.count("overlap") >= 2 and "out of bounds" in out
    assert "ragged_all_to_all #0 on [0, 1]" in out and "ragged_all_to_all #1 on [0, 1]" in out
    assert "3:5" in out and "send slice 1 of device 0" in out


def test_cli_sanitize_json_and_a_clean_scenario(tmp_path, capsys):
    """`--sanitize --json` prints the violations as JSON (exit 1); a clean scenario exits 0 and says so."""
    path = tmp_path / "bad.toml"
    path.write_text(_PROGRAM)
    code, out = run_cli(capsys, str(path), "--sanitize", "--json", "--allow-code")
    document = json.loads(out)
    assert code == 1 and document["stopped"] is None
    assert sorted((v["device"], v["call"], v["rule"], v["rows"]) for v in document["violations"]) == [
        (0, 0, "overlap", [0, 1]), (0, 1, "out of bounds", [3, 5]), (1, 1, "overlap", [1, 2])]
    code, out = run_cli(capsys, "scenarios/library/ragged_docs_example.toml", "--sanitize")
    assert code == 0 and "sanitize: no violations" in out and "[1 3 0 0]" in out.replace(",", "")


def test_cli_sanitize_refuses_python_scenarios(capsys):
    """A Python scenario runs its own shard_maps: --sanitize on one exits 2 and says to pass sanitize=True."""
    code = main(["run", "scenarios/library/layout_guide.py", "--sanitize"])
    assert code == 2 and "sanitize=True" in capsys.readouterr().err
