"""`meshsim run` on big results (summaries, `--full`, the spinner, streamed JSON) and on Python scenarios."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import scenarios
from scenarios.cli import main
from scenarios.cli.render import _progress

ROOT = Path(__file__).resolve().parents[1]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_SCENARIO = """title = "{title}"
[mesh]
axes = {{x = {devices}}}
[collective]
op = "{op}"
axis_name = "x"
{params}
[inputs]
seed = 0
shape = {shape}
dtype = "{dtype}"
"""
_TILED = "split_axis = 0\nconcat_axis = 0\ntiled = true"


@pytest.fixture(autouse=True)
def plain_output(monkeypatch):
    """Run from the repository root with colour detection left to rich (no forced terminal)."""
    monkeypatch.chdir(ROOT)
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)


def scenario(tmp_path: Path, shape: list[int], devices: int = 8, op: str = "all_to_all", params: str = _TILED,
             dtype: str = "float32") -> str:
    """A seeded scenario file of `op` over `devices` devices, each holding an array of `shape`."""
    path = tmp_path / f"{op}_{'x'.join(map(str, shape))}.toml"
    path.write_text(_SCENARIO.format(title=f"{op} of {shape}", devices=devices, op=op, params=params,
                                     shape=shape, dtype=dtype))
    return str(path)


def meshsim(*args: str, shell: str = "") -> subprocess.CompletedProcess:
    """`meshsim ARGS` as its own process (`python -m scenarios.cli`), optionally piped into `shell`."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    command = [sys.executable, "-m", "scenarios.cli", *args]
    if shell:
        command = ["bash", "-c", " ".join(command) + f" | {shell}"]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_16_mb_per_device_all_to_all_prints_a_small_summary(tmp_path, capsys):
    """An 8-device tiled all_to_all of 16 MB per device prints under 20 kB: each array's shape and dtype and
    its edges, provenance as runs of rows, never a line per element or per row."""
    assert main(["run", scenario(tmp_path, [4194304])]) == 0
    out = capsys.readouterr().out
    assert len(out.encode()) < 20_000
    assert out.count("shape (4194304,) float32") == 16
    assert "rows 3670016:4194304 from device 7, slice 0" in out and "rows 0:524288 from device 0, slice 7" in out
    assert out.count(", ..., ") == 16 and "64 messages (56 between devices, 117440512 bytes over the network)" in out


def test_summary_shows_the_edges_numpy_shows(tmp_path, capsys):
    """A 2-D result of more than 1000 elements shows 3 indices at each end of each long axis, with `...`
    between, the values being the array's own (its first and last rows, as numpy prints them)."""
    path = scenario(tmp_path, [2000, 4], devices=2, dtype="int32")
    assert main(["run", path]) == 0
    out = capsys.readouterr().out
    x = scenarios.load(path).inputs[0]["x"]
    assert "shape (2000, 4) int32" in out and "...," in out
    for row in (x[0], x[-1]):
        assert "[" + ", ".join(f"{v:>2}" for v in row) + "]" in out
    assert len(out.splitlines()) < 60


def test_full_prints_every_element_and_small_arrays_are_whole(tmp_path, capsys):
    """`--full` prints every element of a big array; an array of at most 1000 elements is never summarised."""
    path = scenario(tmp_path, [1600], devices=2, dtype="int32")
    assert main(["run", "--full", path]) == 0
    out = capsys.readouterr().out
    assert "shape (" not in out and ", ..., " not in out
    printed = out.split("device 0", 1)[1].split("\n  x  ", 1)[1].split("\n  result", 1)[0]
    values = [int(v) for v in re.findall(r"-?\d+", printed)]
    assert values == scenarios.load(path).inputs[0]["x"].tolist()
    assert main(["run", scenario(tmp_path, [1000], devices=2, dtype="int32")]) == 0
    assert ", ..., " not in capsys.readouterr().out


def test_an_array_with_no_long_axis_is_shown_whole(tmp_path, capsys):
    """More than 1000 elements but no axis longer than 6 (numpy would cut nothing): printed whole, no shape line."""
    assert main(["run", scenario(tmp_path, [6, 6, 6, 6], devices=2, dtype="int32")]) == 0
    out = capsys.readouterr().out
    assert "shape (" not in out and "..." not in out and out.count("[[[[") == 4


def test_a_long_message_table_shows_its_ends(tmp_path, capsys, monkeypatch):
    """Beyond 100 messages the table shows 50 at each end and says how many it left out; `--full` shows all."""
    monkeypatch.setenv("COLUMNS", "200")
    path = scenario(tmp_path, [16], devices=16, op="psum", params='algorithm = "ring"')
    assert main(["run", path]) == 0
    out = capsys.readouterr().out
    assert "480 messages" in out and "380 rows left out (--full shows every one)" in out
    numbers = [int(m) for m in re.findall(r"^\W*(\d+)\s*│", out, re.MULTILINE)]
    assert numbers == [*range(50), *range(430, 480)]
    assert main(["run", "--full", path]) == 0
    out = capsys.readouterr().out
    assert "left out" not in out
    assert [int(m) for m in re.findall(r"^\W*(\d+)\s*│", out, re.MULTILINE)] == list(range(480))


def test_json_of_a_big_result_holds_every_element(tmp_path, capsys):
    """`--json` of a result past the summary threshold is one JSON document equal to `to_dict()`: every
    input, output and provenance entry."""
    path = scenario(tmp_path, [3000, 2], devices=4)
    assert main(["run", "--json", path]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(scenarios.run(scenarios.load(path)).to_dict()))
    assert len(printed["devices"][3]["output"]) == 3000 and len(printed["devices"][3]["provenance"]["sources"]) == 3000


def test_json_of_a_program_scenario_is_unchanged(capsys):
    """`--json` of a program scenario prints its `to_dict()`."""
    path = "scenarios/library/transpose_1_psum_unmapped.toml"
    assert main(["run", "--allow-code", "--json", path]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(scenarios.run(scenarios.load(path)).to_dict()))


def slow_run(monkeypatch, seconds: float) -> None:
    """Make `scenarios.run` take at least `seconds`."""
    real = scenarios.run

    def run(scenario):
        time.sleep(seconds)
        return real(scenario)

    monkeypatch.setattr(scenarios, "run", run)


def test_a_long_run_in_a_terminal_shows_a_spinner(monkeypatch, capsys):
    """In a terminal, a run that outlasts the delay shows a status naming the scenario while it simulates,
    and the results still follow."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setattr(_progress, "AFTER_S", 0.05)
    slow_run(monkeypatch, 0.6)
    assert main(["run", "scenarios/library/ragged_docs_example.toml"]) == 0
    out = capsys.readouterr().out
    assert "simulating scenarios/library/ragged_docs_example.toml on 2 devices" in out
    assert "simulated time:" in _ANSI.sub("", out)


@pytest.mark.parametrize("argv, terminal", [(["run", "--json"], True), (["run"], False)],
                         ids=["json in a terminal", "not a terminal"])
def test_no_spinner_in_json_or_off_a_terminal(argv, terminal, monkeypatch, capsys):
    """`--json`, or output that is not a terminal, never shows the status, however long the run."""
    if terminal:
        monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setattr(_progress, "AFTER_S", 0.05)
    slow_run(monkeypatch, 0.4)
    assert main([*argv, "scenarios/library/ragged_docs_example.toml"]) == 0
    out = capsys.readouterr().out
    assert "simulating" not in out and "\x1b[?25l" not in out
    if "--json" in argv:
        assert json.loads(out)["collective"]["op"] == "ragged_all_to_all"


def test_a_quick_run_shows_no_spinner(monkeypatch, capsys):
    """A run that ends before the delay prints exactly its results, no status, even in a terminal."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setattr(_progress, "AFTER_S", 60.0)
    assert main(["run", "scenarios/library/ragged_docs_example.toml"]) == 0
    assert "simulating" not in capsys.readouterr().out


@pytest.mark.parametrize("path, package", [("scenarios/_load.py", "scenarios"), ("scenarios/cli/run.py", "scenarios"),
                                           ("sim/__init__.py", "sim"), ("collectives/__init__.py", "collectives"),
                                           ("layouts/__init__.py", "layouts"), ("oracles/__init__.py", "oracles")])
def test_the_packages_own_code_is_not_a_scenario(path, package, capsys):
    """A file of meshsim's own packages (outside scenarios/library/) is refused with exit 2 and one message."""
    assert main(["run", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"meshsim: error: {path}: part of meshsim's own code (the {package!r} package), not a "
                            f"scenario; a scenario is a TOML file or a Python script outside the packages, "
                            f"e.g. scenarios/library/moe_dispatch.toml\n")


def test_python_scenario_refuses_json_and_a_missing_one_is_named(capsys):
    """`--json` with a Python scenario, and a Python scenario that does not exist, each exit 2 with one message."""
    assert main(["run", "--json", "scenarios/library/layout_guide.py"]) == 2
    assert "layout_guide.py: --json needs a TOML scenario; a Python scenario prints its own output" \
        in capsys.readouterr().err
    assert main(["run", "no/such/scenario.py"]) == 2
    assert capsys.readouterr().err == \
        "meshsim: error: no/such/scenario.py: cannot read the scenario file: No such file or directory\n"


def test_a_meshsim_error_in_a_script_exits_2_with_its_notes(tmp_path):
    """A `MeshError` raised inside a Python scenario exits 2 after what the script printed: one message with
    the error and its notes (the device it was raised on), no traceback."""
    script = tmp_path / "bad_axis.py"
    script.write_text("import numpy as np\nimport collectives, sim\nprint('before the call')\n"
                      "f = sim.shard_map(lambda x: collectives.psum(x, axis_name='y'), mesh=sim.Mesh({'x': 2}),\n"
                      "                  in_specs=(sim.P('x'),), out_specs=sim.P('x'))\n"
                      "f.run(np.arange(4.0))\n")
    done = meshsim("run", "--allow-code", str(script))
    assert done.returncode == 2 and done.stdout == "before the call\n"
    assert "Traceback" not in done.stderr and done.stderr.count("meshsim: error:") == 1
    assert done.stderr.startswith(f"meshsim: error: {script}: InvalidArgumentError: device 0: psum: axis_name='y'")
    assert f"\n  raised on device 0 before its first collective, at {script}:4" in done.stderr


def test_a_closed_pipe_ends_a_python_scenario_quietly(tmp_path):
    """A Python scenario printing far more than a pipe holds, read by `head -c 1`, ends with exit 0 and no
    BrokenPipeError traceback."""
    script = tmp_path / "long.py"
    script.write_text("for i in range(100000):\n    print('row', i, 'of a long listing')\n")
    done = meshsim("run", "--allow-code", str(script), shell="head -c 1 > /dev/null; exit ${PIPESTATUS[0]}")
    assert done.stderr == "" and done.returncode == 0


def test_the_spinner_through_a_pseudo_terminal():
    """A process whose stdout is a real (pseudo-)terminal shows the status during a long run, hides the
    cursor only while it shows, and prints the results after it."""
    pty = pytest.importorskip("pty")
    code = ("import time, scenarios; from scenarios.cli import main; "
            "from scenarios.cli.render import _progress; _progress.AFTER_S = 0.05; "
            "real = scenarios.run; scenarios.run = lambda s: (time.sleep(0.6), real(s))[1]; "
            "raise SystemExit(main(['run', 'scenarios/library/ragged_docs_example.toml']))")
    leader, follower = pty.openpty()
    env = {**{k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}, "TERM": "xterm"}
    process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdin=follower, stdout=follower,
                               stderr=follower)
    os.close(follower)
    out = b""
    while chunk := _read(leader):
        out += chunk
    os.close(leader)
    assert process.wait(timeout=60) == 0
    text = out.decode()
    assert "simulating scenarios/library/ragged_docs_example.toml on 2 devices" in text
    assert text.index("\x1b[?25l") < text.index("\x1b[?25h") < text.index("device 0")
    assert "simulated time:" in _ANSI.sub("", text)


def _read(fd: int) -> bytes:
    """The next bytes from a pseudo-terminal; empty once the other side has closed."""
    try:
        return os.read(fd, 65536)
    except OSError:  # Linux reports a closed pseudo-terminal as EIO
        return b""


def test_a_big_mesh_shows_its_first_and_last_devices(tmp_path, capsys):
    """Past 16 devices `run` shows the first and last 8 and says how many it left out; a device's result
    taller than 40 lines (here 48) shows its edges; `--full` shows every device and row."""
    path = scenario(tmp_path, [1], devices=48, op="all_gather", params="")
    assert main(["run", path]) == 0
    out = capsys.readouterr().out
    shown = [int(d) for d in re.findall(r"^device (\d+)  \(x=", out, re.MULTILINE)]
    assert shown == [*range(8), *range(40, 48)] and "... 32 more devices (--full shows every one)" in out
    assert out.count("shape (48, 1) float32") == 16 and "2304 messages" in out
    assert main(["run", "--full", path]) == 0
    out = capsys.readouterr().out
    assert [int(d) for d in re.findall(r"^device (\d+)  \(x=", out, re.MULTILINE)] == list(range(48))
    assert "more devices" not in out and "shape (" not in out


def test_provenance_is_the_replay_of_every_message(tmp_path):
    """Each device's provenance equals a plain replay of the messages that landed on it, record by record,
    in trace order (the later message wins), on the library's scenarios that say where messages land."""
    for name in ("ragged_docs_example", "moe_dispatch", "all_to_all_docs_untiled", "all_gather_groups",
                 "all_to_all_seeded"):
        result = scenarios.run(scenarios.load(str(ROOT / "scenarios" / "library" / f"{name}.toml")))
        for d, provenance in enumerate(result.provenance):
            writers: list = [None] * len(provenance.messages)
            for k, m in enumerate(list(result.trace)):
                if m.dst == d and "rows" in m.detail:
                    writers[slice(*m.detail["rows"])] = [k] * (m.detail["rows"][1] - m.detail["rows"][0])
            assert provenance.messages == tuple(writers), (name, d)
            assert provenance.sources == tuple(None if k is None else result.trace[k].src for k in writers)
