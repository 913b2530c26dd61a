"""Inputs that once ended in a traceback, each through `meshsim` (`scenarios.cli.main`) in-process: one line on
stderr and exit 2 (a file or argument the user can fix), or what the command documents; never a traceback.
An error meshsim did not expect is one line and exit 3 with the path of a saved report."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest

from scenarios._results import append_row, open_for_append
from scenarios.cli import main
from scenarios.sweep import load_sweep
from scenarios.sweep._measure import measure
from scenarios.sweep._sweep_run import RESULTS, finish, pending

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "scenarios" / "library"

_COLLECTIVE = '[mesh]\naxes = {x = 2}\n\n[collective]\nop = "psum"\naxis_name = "x"\n\n[inputs]\nseed = 0\n'
_PROGRAM = ('[mesh]\naxes = {x = 2}\n\n[program]\nin_specs = "IN"\nout_specs = "P()"\nsource = """\ndef f(x):\n'
            '    return x\n"""\n\n[[args]]\nshape = [2]\n')
_AXES_65 = ", ".join(f"a{i} = 1" for i in range(65))
SCENARIOS = [
    ("inputs_dtype_comma", _COLLECTIVE + 'shape = [2]\ndtype = ","\n', "[inputs] dtype=',' must name a numeric"),
    ("inputs_dtype_fields", _COLLECTIVE + "shape = [2]\ndtype = '(\"a\",\"f4\")'\n",
     "[inputs] dtype='(\"a\",\"f4\")' must name a numeric"),
    ("args_dtype_comma", _PROGRAM.replace("IN", "P()") + 'dtype = ","\n',
     "[[args]] number 0: dtype=',' must name a numeric"),
    ("args_dtype_fields", _PROGRAM.replace("IN", "P()") + "dtype = '(\"a\",\"f4\")'\n",
     "[[args]] number 0: dtype='(\"a\",\"f4\")' must name"),
    ("inputs_shape_2_62", _COLLECTIVE + "shape = [0, 4611686018427387904]\n",
     "[inputs] shape=[0, 4611686018427387904] must be a list of non-negative integers"),
    ("args_shape_2_62", _PROGRAM.replace("IN", "P()").replace("[2]", "[0, 4611686018427387904]"),
     "[[args]] number 0: shape=[0, 4611686018427387904] must be a list"),
    ("mesh_65_axes", _COLLECTIVE.replace("x = 2", _AXES_65).replace('"x"', '"a0"') + "shape = [2]\n",
     "(1 to 64 axes)"),
    ("in_specs_1000_deep", _PROGRAM.replace("IN", "(" * 1000 + "P('x')" + ")" * 1000),
     "tuples nested more than 32 deep"),
]
COMMANDS = [["run"], ["explain"], ["check"], ["trace", "-o", "OUT.json"], ["draw", "-o", "OUT.svg"]]


@pytest.fixture
def bounded() -> Any:
    """Stop the test after 60 s with an exception (so a regression to reading forever fails, not hangs)."""
    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError("the test ran for 60 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _one_line(capsys: pytest.CaptureFixture, prefix: str = "meshsim: error: ") -> str:
    """The one line on stderr, which starts with `prefix`; no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    return lines[0]


def _argv(command: list[str], tmp_path: Path, *rest: str) -> list[str]:
    return [str(tmp_path / part) if part.startswith("OUT") else part for part in command] + list(rest)


@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
@pytest.mark.parametrize(("text", "fragment"), [row[1:] for row in SCENARIOS], ids=[row[0] for row in SCENARIOS])
def test_scenario_reproducers_are_one_line_and_exit_2_on_every_command(
        capsys: pytest.CaptureFixture, tmp_path: Path, command: list[str], text: str, fragment: str) -> None:
    """Each reproducer file, on each command that reads scenarios, exits 2 with one line naming the field,
    before any refusal for want of --allow-code (the file is wrong whatever its code)."""
    path = tmp_path / "s.toml"
    path.write_text(text, encoding="utf-8")
    assert main(_argv(command, tmp_path, str(path))) == 2
    line = _one_line(capsys)
    assert fragment in line and "s.toml:" in line and "--allow-code" not in line
    assert len(line) < 400


SWEEP = 'collective = "psum"\nmesh = {x = 2}\nsize = [64, 128]\n'


@pytest.mark.parametrize(("text", "fragment"), [
    (SWEEP + 'dtype = ","\n', "dtype=',' must name a numeric numpy dtype"),
    (SWEEP + "dtype = '(\"a\",\"f4\")'\n", "dtype='(\"a\",\"f4\")' must name"),
    (SWEEP + 'dtype = "bool"\n', "dtype='bool' must name"),
    (SWEEP.replace("{x = 2}", "{" + _AXES_65 + "}"), "(1 to 64 axes)"),
], ids=["dtype_comma", "dtype_fields", "dtype_bool", "mesh_65_axes"])
def test_sweep_file_reproducers_are_one_line_and_exit_2(capsys: pytest.CaptureFixture, tmp_path: Path, text: str,
                                                        fragment: str) -> None:
    """A sweep file's bad dtype or mesh is refused before any cluster starts."""
    path = tmp_path / "s.toml"
    path.write_text(text, encoding="utf-8")
    assert main(["sweep", str(path), "-o", str(tmp_path / "out")]) == 2
    assert fragment in _one_line(capsys)


@pytest.mark.parametrize("command", [["run"], ["explain"], ["sweep"]], ids=["run", "explain", "sweep"])
def test_a_scenario_or_sweep_file_that_is_a_pipe_is_refused(capsys: pytest.CaptureFixture, tmp_path: Path,
                                                            command: list[str], bounded: None) -> None:
    """A FIFO (nobody writes to it) or /dev/zero given as the file is refused at once, not read forever."""
    fifo = tmp_path / "s.toml"
    os.mkfifo(fifo)
    for path in [str(fifo)] + (["/dev/zero"] if os.path.exists("/dev/zero") else []):
        assert main([*command, path, *(["-o", str(tmp_path / "out")] if command == ["sweep"] else [])]) == 2
        assert "is not a regular file" in _one_line(capsys)


def test_a_python_scenario_that_is_a_pipe_is_refused(capsys: pytest.CaptureFixture, tmp_path: Path,
                                                     bounded: None) -> None:
    """A FIFO named like a Python scenario is refused before the refusal for want of --allow-code reads it."""
    fifo = tmp_path / "s.py"
    os.mkfifo(fifo)
    assert main(["run", str(fifo)]) == 2
    assert "is not a regular file" in _one_line(capsys)


@pytest.mark.parametrize("suffix", ["svg", "html"])
def test_drawing_a_collective_without_arrays_draws_its_devices(capsys: pytest.CaptureFixture, tmp_path: Path,
                                                               suffix: str) -> None:
    """axis_index over two axes (no arrays) draws a picture of its devices, in SVG and HTML."""
    out = tmp_path / f"x.{suffix}"
    assert main(["draw", "-o", str(out), str(LIBRARY / "axis_index_two_axes.toml")]) == 0
    assert "Traceback" not in capsys.readouterr().err
    text = out.read_text(encoding="utf-8")
    assert "no arrays" in text
    if suffix == "svg":
        assert ElementTree.fromstring(text).tag.endswith("svg")


@pytest.mark.parametrize("value", ["1e10", "1e300", "100000001"])
def test_a_timeout_past_the_maximum_is_refused_by_argparse(capsys: pytest.CaptureFixture, value: str) -> None:
    """--timeout beyond 1e8 s is a usage error (exit 2) naming the bound, not an OverflowError."""
    with pytest.raises(SystemExit) as stop:
        main(["run", "--timeout", value, str(LIBRARY / "axis_index_two_axes.toml")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"--timeout='{value}' must be a positive number of seconds up to 1e+08" in err.strip().splitlines()[-1]


def test_the_largest_timeout_runs(capsys: pytest.CaptureFixture) -> None:
    """--timeout 1e8, the maximum, is accepted by the system's timer and the run finishes."""
    assert main(["run", "--timeout", "1e8", str(LIBRARY / "axis_index_two_axes.toml")]) == 0
    assert "Traceback" not in capsys.readouterr().err


# Results files, on --resume.

def _sweep_with_rows(tmp_path: Path) -> tuple[Path, Path, list[dict[str, Any]]]:
    """A two-point sweep file, its output directory and its two rows, measured in-process."""
    path = tmp_path / "s.toml"
    path.write_text(SWEEP, encoding="utf-8")
    rows = [measure(point) for point in load_sweep(path).points]
    return path, tmp_path / "out", rows


def _write_rows(directory: Path, rows: list[Any], newline: bool = True) -> Path:
    directory.mkdir(exist_ok=True)
    results = directory / RESULTS
    results.write_text("\n".join(json.dumps(row) for row in rows) + ("\n" if newline else ""), encoding="utf-8")
    return results


@pytest.mark.parametrize(("change", "fragment"), [
    (lambda row: dict(row, time_s="abc"), "results.jsonl:2: results row: time_s='abc' must be a finite number"),
    (lambda row: dict(row, key=["a"]), "results.jsonl:2: not a result"),
    (lambda row: dict(row, collective=7), "results.jsonl:2: results row: collective=7 must be one of"),
    (lambda row: [row], "results.jsonl:2: not a result"),
], ids=["time_s_string", "key_list", "collective_int", "row_list"])
def test_sweep_resume_refuses_a_wrongly_typed_row(capsys: pytest.CaptureFixture, tmp_path: Path, change: Any,
                                                  fragment: str) -> None:
    """A results row with a field of the wrong type stops --resume with its line number, before any cluster."""
    path, out, rows = _sweep_with_rows(tmp_path)
    _write_rows(out, [rows[0], change(rows[1])])
    assert main(["sweep", str(path), "-o", str(out), "--resume"]) == 2
    line = _one_line(capsys)
    assert fragment in line and "repair or delete the line" in line


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_resume_refuses_a_results_file_that_is_a_device(capsys: pytest.CaptureFixture, tmp_path: Path,
                                                        bounded: None) -> None:
    """A results file that is a symlink to /dev/full is refused at once (sweep and campaign), not read forever."""
    path, out, _ = _sweep_with_rows(tmp_path)
    out.mkdir()
    (out / RESULTS).symlink_to("/dev/full")
    assert main(["sweep", str(path), "-o", str(out), "--resume"]) == 2
    assert "must be a regular file" in _one_line(capsys)
    assert main(["campaign", "--ops", "psum", "--cases", "10", "-o", str(out), "--resume"]) == 2
    assert "must be a regular file" in _one_line(capsys)


def test_sweep_resume_keeps_a_whole_last_row_without_its_newline(capsys: pytest.CaptureFixture,
                                                                 tmp_path: Path) -> None:
    """A complete last row lacking its newline counts as done and stays done: appending the other points'
    rows (as a run does) keeps it, and the sweep finishes with every point (it once ended '1 of N points have
    no result')."""
    path, out, rows = _sweep_with_rows(tmp_path)
    sweep = load_sweep(path)
    _write_rows(out, rows[:1], newline=False)
    done, todo = pending(sweep, out, resume=True)
    assert list(done) == [rows[0]["key"]] and [point.key for point in todo] == [rows[1]["key"]]
    with open_for_append(out / RESULTS) as stream:
        for point in todo:
            append_row(stream, measure(point))
    assert [row["key"] for row in finish(sweep, out)] == [row["key"] for row in rows]
    assert main(["sweep", str(path), "-o", str(out), "--resume", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2


def test_sweep_resume_runs_again_a_last_row_cut_short(tmp_path: Path) -> None:
    """A last line cut short is not done; appending cuts it off, so no line is left broken."""
    path, out, rows = _sweep_with_rows(tmp_path)
    results = _write_rows(out, rows, newline=False)
    results.write_bytes(results.read_bytes()[:-5])
    done, todo = pending(load_sweep(path), out, resume=True)
    assert list(done) == [rows[0]["key"]] and len(todo) == 1
    open_for_append(results).close()
    assert results.read_text(encoding="utf-8") == json.dumps(rows[0]) + "\n"


CAMPAIGN_RECORD = {"key": "psum-seed0-chunk0-10cases", "op": "psum", "kind": "forward", "seed": 1, "cases": 10,
                   "agree": 10, "known": {}, "findings": [], "seconds": 1.0, "cpu_seconds": 1.0, "worker": "h:1"}


@pytest.mark.parametrize(("record", "fragment"), [
    (dict(CAMPAIGN_RECORD, cases="abc"), "results row: cases='abc' must be a non-negative integer"),
    (dict(CAMPAIGN_RECORD, key=["psum"]), "results.jsonl:1: not a result"),
    (dict(CAMPAIGN_RECORD, op="all_gather"), "key='psum-seed0-chunk0-10cases' must name the record's op"),
    (dict(CAMPAIGN_RECORD, findings=[{"name": "../../x.toml", "replay": "r"}]), "must be a plain file name"),
], ids=["cases_string", "key_list", "op_not_its_key", "finding_path"])
def test_campaign_resume_refuses_a_wrongly_typed_record(capsys: pytest.CaptureFixture, tmp_path: Path,
                                                        record: dict[str, Any], fragment: str) -> None:
    """A campaign record with a field of the wrong type stops --resume with its line number, before any cluster."""
    _write_rows(tmp_path, [record])
    assert main(["campaign", "--ops", "psum", "--cases", "10", "-o", str(tmp_path), "--resume", "--json"]) == 2
    assert fragment in _one_line(capsys)


def test_campaign_resume_with_every_job_done_reports_them(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """A valid record (its last line without newline) counts as done: nothing runs and the report counts it."""
    _write_rows(tmp_path, [CAMPAIGN_RECORD], newline=False)
    assert main(["campaign", "--ops", "psum", "--cases", "10", "-o", str(tmp_path), "--resume", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["resumed_jobs"] == 1 and report["rows"][0]["cases"] == 10
    assert (tmp_path / RESULTS).read_text(encoding="utf-8").endswith("\n")


@pytest.mark.parametrize("cases", ["1000000000000", "100001"])
def test_campaign_cases_above_the_bound_are_refused_at_once(capsys: pytest.CaptureFixture, tmp_path: Path,
                                                            cases: str, bounded: None) -> None:
    """--cases beyond 100,000 per collective is refused before any plan is made (it once used 3.4 GB)."""
    assert main(["campaign", "--cases", cases, "-o", str(tmp_path / "c")]) == 2
    assert f"--cases='{cases}' must be at most 100000" in _one_line(capsys)
    assert not (tmp_path / "c").exists()


# The top level.

def _failing_command(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    """Make `meshsim run`'s command raise `error`."""
    from scenarios.cli import run

    def execute(args: Any) -> int:
        raise error

    original = run.add_parser

    def add_parser(commands: Any) -> None:
        original(commands)
        commands.choices["run"].set_defaults(execute=execute)

    monkeypatch.setattr(run, "add_parser", add_parser)


def test_an_unexpected_error_is_one_line_exit_3_and_a_private_report(
        capsys: pytest.CaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug (here a ZeroDivisionError) prints one line naming a report, exits 3; the report (mode 0600, in
    $XDG_STATE_HOME/meshsim) holds the command line and the traceback; control characters stay out."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    _failing_command(monkeypatch, ZeroDivisionError("first\nsecond \x1b[2J"))
    assert main(["run", "x.toml"]) == 3
    line = _one_line(capsys, "meshsim: internal error: ZeroDivisionError: first second ?[2J; the traceback is in ")
    report = Path(line.split("the traceback is in ")[1].split(";")[0])
    assert report.parent == tmp_path / "state" / "meshsim"
    assert stat.S_IMODE(report.stat().st_mode) == 0o600
    assert stat.S_IMODE(report.parent.stat().st_mode) == 0o700
    text = report.read_text(encoding="utf-8")
    assert "argv: ['meshsim', 'run', 'x.toml']" in text and "Traceback (most recent call last)" in text
    assert "ZeroDivisionError" in text


def test_without_a_writable_state_directory_the_report_goes_to_the_temp_dir(
        capsys: pytest.CaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the state directory cannot be made, the report goes to a directory of the user's own under the
    temporary directory; the line still says where."""
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocked))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    _failing_command(monkeypatch, RecursionError("deep"))
    assert main(["run", "x.toml"]) == 3
    line = _one_line(capsys, "meshsim: internal error: RecursionError: deep; the traceback is in ")
    assert str(tmp_path / "tmp" / "meshsim-") in line


def test_a_mesh_error_stays_exit_2_and_a_closed_pipe_exit_0(capsys: pytest.CaptureFixture,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler for bugs leaves MeshError (exit 2) and BrokenPipeError (exit 0) as they were."""
    import sim
    _failing_command(monkeypatch, sim.InvalidArgumentError("x=1 must be 2"))
    assert main(["run", "x.toml"]) == 2
    assert _one_line(capsys) == "meshsim: error: x=1 must be 2"
    _failing_command(monkeypatch, BrokenPipeError())
    assert main(["run", "x.toml"]) == 0
    assert capsys.readouterr().err == ""


def test_a_reproducer_in_a_process_of_its_own_prints_one_line(tmp_path: Path) -> None:
    """`python -m scenarios.cli run` on the dtype ',' file: exit 2, one line on stderr, nothing on stdout."""
    path = tmp_path / "s.toml"
    path.write_text(SCENARIOS[0][1], encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "scenarios.cli", "run", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("meshsim: error: ")
