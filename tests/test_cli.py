"""The `meshsim` command, run in-process through `scenarios.cli.main` and as a separate process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import scenarios
from scenarios.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = "scenarios/library/ragged_docs_example.toml"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(autouse=True)
def plain_output(monkeypatch):
    """Run from the repository root with colour detection left to rich (no forced terminal)."""
    monkeypatch.chdir(ROOT)
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)


def launchers() -> list:
    """The installed console script when present, and `python -m scenarios.cli` always."""
    script = Path(sys.executable).with_name("meshsim")
    marks = [] if script.exists() else [pytest.mark.skip(reason="meshsim console script not installed")]
    return [pytest.param([str(script)], id="console-script", marks=marks),
            pytest.param([sys.executable, "-m", "scenarios.cli"], id="module")]


def meshsim(launcher: list[str], *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    return subprocess.run([*launcher, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def broken(tmp_path: Path) -> Path:
    path = tmp_path / "broken.toml"
    path.write_text((ROOT / DOCS).read_text().replace('op = "ragged_all_to_all"', 'op = "foo"'))
    return path


def test_run_prints_the_docs_results(capsys):
    """`meshsim run` on the docs example prints both documented results, the provenance and the time."""
    assert main(["run", DOCS]) == 0
    out = _ANSI.sub("", capsys.readouterr().out)
    assert "[1, 3, 0, 0]" in out and "[2, 2, 4, 0]" in out
    assert "rows 1:2 from device 1, slice 0 (its operand rows 0:1)" in out
    assert "rows 2:4 kept from output" in out
    assert "4 messages" in out and "simulated time: 1.00008 us" in out


@pytest.mark.parametrize("launcher", launchers())
def test_run_as_a_process(launcher):
    """The command run as its own process prints the docs' results, exits 0 and writes nothing to stderr."""
    done = meshsim(launcher, "run", DOCS)
    assert done.returncode == 0, done.stderr
    assert "[1, 3, 0, 0]" in _ANSI.sub("", done.stdout) and "[2, 2, 4, 0]" in _ANSI.sub("", done.stdout)
    assert done.stderr == ""


@pytest.mark.parametrize("launcher", launchers())
def test_json_has_outputs_provenance_and_messages(launcher):
    """`--json` prints one JSON document (no markup) with outputs, row senders, messages and the end time."""
    done = meshsim(launcher, "run", "--json", DOCS)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    devices = report["devices"]
    assert [d["output"] for d in devices] == [[1, 3, 0, 0], [2, 2, 4, 0]]
    assert [d["provenance"]["sources"] for d in devices] == [[0, 1, None, None], [0, 0, 1, None]]
    assert devices[1]["inputs"]["output_offsets"] == [1, 2]
    messages = report["messages"]
    assert {(m["src"], m["dst"], m["detail"]["slice"], tuple(m["detail"]["rows"])) for m in messages} == {
        (0, 0, 0, (0, 1)), (0, 1, 1, (0, 2)), (1, 0, 0, (1, 2)), (1, 1, 1, (2, 3))}
    assert all({"size_bytes", "send_time_s", "arrival_time_s"} <= set(m) for m in messages)
    assert report["end_time_s"] == max(m["arrival_time_s"] for m in messages)
    assert report["collective"] == {"op": "ragged_all_to_all", "axis_name": "x"}


def test_json_provenance_points_at_the_writing_message(capsys):
    """In `--json`, each written row's message index names a message from that row's sender covering it."""
    assert main(["run", "--json", "scenarios/library/moe_dispatch.toml"]) == 0
    report = json.loads(capsys.readouterr().out)
    for device in report["devices"]:
        provenance = device["provenance"]
        for row, (source, k) in enumerate(zip(provenance["sources"], provenance["messages"])):
            if k is None:
                assert source is None
                continue
            message = report["messages"][k]
            assert (message["src"], message["dst"]) == (source, device["device"])
            assert message["detail"]["rows"][0] <= row < message["detail"]["rows"][1]


def test_broken_file_exits_2_naming_file_field_and_line(tmp_path, capsys):
    """A scenario with an unknown op exits 2, prints nothing on stdout, and names file, line and field on stderr."""
    path = broken(tmp_path)
    assert main(["run", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{path}:12: [collective] op='foo' must be one of" in captured.err


@pytest.mark.parametrize("launcher", launchers())
def test_broken_file_as_a_process_has_no_traceback(launcher, tmp_path):
    """As a process, a broken scenario exits 2 with a one-line message and no traceback."""
    done = meshsim(launcher, "run", str(broken(tmp_path)))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr
    assert "broken.toml:12: [collective] op='foo'" in done.stderr


@pytest.mark.parametrize("launcher", launchers())
def test_simulator_rejection_is_a_clean_message(launcher, tmp_path):
    """Inputs the simulator rejects exit 2 with its reasons (device, argument, slice), never a traceback."""
    path = tmp_path / "sizes.toml"
    path.write_text((ROOT / DOCS).read_text().replace("send_sizes = [1, 2]", "send_sizes = [1, 1]"))
    done = meshsim(launcher, "run", str(path))
    assert done.returncode == 2 and done.stdout == ""
    assert "Traceback" not in done.stderr
    assert "sizes.toml: the simulator rejected" in done.stderr
    assert "device 1, slice 0: recv_sizes[0]=2 but device 0 sends send_sizes[1]=1" in done.stderr


def test_missing_file_exits_2(capsys):
    """A path that does not exist exits 2 with a message naming it."""
    assert main(["run", "no/such/file.toml"]) == 2
    assert "no/such/file.toml: cannot read the scenario file" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["run"], ["run", DOCS, "--colour"], ["frobnicate"]],
                         ids=["no command", "no scenario", "unknown option", "unknown command"])
def test_bad_arguments_exit_2(argv, capsys):
    """Missing or unknown command-line arguments exit 2 with argparse's usage message on stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "usage: meshsim" in capsys.readouterr().err


# (id, argv, the error line after "meshsim run: error: "): options argparse alone cannot judge
UNUSABLE = [
    ("sanitize with explore-orders", ["run", "--sanitize", "--explore-orders", "2", DOCS],
     "--sanitize cannot go with --explore-orders: --sanitize reports every rule the run breaks"),
    ("explore-seed alone", ["run", "--explore-seed", "5", DOCS],
     "--explore-seed 5 needs --explore-orders N, the number of orders whose seeds start there"),
    ("max-memory 0", ["run", "--max-memory", "0", DOCS],
     "argument --max-memory: --max-memory='0' must be a positive size such as 4GiB, 500MB or a number of bytes"),
    ("unknown option before the file", ["run", "--bogus", DOCS], "unrecognized arguments: --bogus"),
    ("unknown option after the file", ["explain", DOCS, "--bogus"], "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("argv, message", [row[1:] for row in UNUSABLE], ids=[row[0] for row in UNUSABLE])
def test_options_that_do_not_go_together_exit_2_with_the_commands_usage(argv, message, capsys):
    """Options that do not go together, a bad --max-memory and an unknown option are said as argparse says
    a bad argument, with the command's own usage (not meshsim's), and exit 2 before anything runs."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: meshsim {argv[0]} ") and f"meshsim {argv[0]}: error: {message}" in err


def test_every_bundled_scenario_runs(capsys):
    """Each bundled scenario prints a result per device and the simulated time (a program scenario: its
    typed program and the simulated time of each pass)."""
    for path in sorted((ROOT / "scenarios" / "library").glob("*.toml")):
        assert main(["run", "--allow-code", str(path.relative_to(ROOT))]) == 0
        out = _ANSI.sub("", capsys.readouterr().out)
        scenario = scenarios.load(path)
        if isinstance(scenario, scenarios.ProgramScenario):  # forward, and transposed once and twice if asked
            passes = 3 if scenario.transpose else 1
            assert out.count("{ lambda ;") == passes and out.count("simulated time") == passes
        else:
            assert out.count("  result  ") == scenario.mesh.size and "simulated time:" in out


def test_messages_of_other_collectives_show_their_own_detail(capsys, monkeypatch):
    """Where messages do not land on rows (psum's ring, ppermute), the table shows what they do carry in a
    `detail` column instead of empty slice and rows columns; the JSON lists the call with its parameters."""
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["run", "scenarios/library/psum_ring.toml"]) == 0
    out = _ANSI.sub("", capsys.readouterr().out)
    assert "psum(axis_name='i', algorithm='ring')" in out and out.count("[   6,   60,  600, 6000]") == 4
    assert "phase=reduce-scatter, step=0, chunk=3" in out and "phase=all-gather, step=2" in out
    assert "rows at dst" not in out and "24 messages" in out
    assert main(["run", "--json", "scenarios/library/ppermute_shift.toml"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["collective"] == {"op": "ppermute", "axis_name": "x", "perm": [[0, 1], [1, 0]]}
    assert [d["output"] for d in data["devices"]] == [[5, 6], [7, 8], [1, 2], [3, 4]]
    assert [d["provenance"] for d in data["devices"]] == [None] * 4


@pytest.mark.parametrize("name", ["psum_ring", "psum_in_network", "moe_all_to_all_tpu_v5e"])
def test_the_message_table_keeps_its_columns_in_80_columns(name, capsys, monkeypatch):
    """In 80 columns (a pipe, a small terminal) the message table keeps every column whole, its header and
    its cells; a long `detail` folds onto more lines instead of taking the room of src, dst and bytes."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["run", f"scenarios/library/{name}.toml"]) == 0
    lines = _ANSI.sub("", capsys.readouterr().out).splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("┏")):]
    header = [cell.strip() for cell in table[1].strip("┃").split("┃")]
    assert header[:6] == ["#", "src", "dst", "bytes", "sent", "arrived"]
    assert all(len(line) <= 80 for line in table) and not any("…" in line for line in table)
    if "detail" in header:
        assert "phase=" in "".join(table)


def test_importing_sim_stays_light():
    """`import sim` loads neither rich, the CLI, the scenario runner nor the collectives."""
    heavy = "('rich', 'scenarios', 'scenarios.cli', 'collectives')"
    code = f"import sys, sim; print(sorted(m for m in {heavy} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


def test_layout_guide_script_scenario_runs(capsys):
    """`meshsim run --allow-code scenarios/library/layout_guide.py` plays the layout guide's four cases with its
    outcomes."""
    assert main(["run", "--allow-code", str(ROOT / "scenarios" / "library" / "layout_guide.py")]) == 0
    out = capsys.readouterr().out
    assert out.count("-> `apply` called successfully") == 3
    assert "-> error: mismatched input layouts" in out and "does not match the required layout" in out


def test_version(capsys):
    """`meshsim --version` prints the installed version and exits 0."""
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert re.fullmatch(r"meshsim \d+\.\d+\.\d+\n", capsys.readouterr().out)


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`meshsim run --json ... | head -c 1` on an output far larger than a pipe's buffer ends without a
    BrokenPipeError traceback."""
    big = tmp_path / "big.toml"
    big.write_text('[mesh]\naxes = {x = 4}\n[collective]\nop = "all_gather"\naxis_name = "x"\n'
                   '[inputs]\nseed = 0\nshape = [20000]\n')
    shell = f"{sys.executable} -m scenarios.cli run --json {big} | head -c 1 > /dev/null"
    done = subprocess.run(["bash", "-c", shell], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stderr == "", done.stderr


@pytest.mark.parametrize("argv", [["run", "scenarios/library/moe_all_to_all_tpu_v5e.toml"],
                                  ["run", "--json", "scenarios/library/moe_all_to_all_tpu_v5e.toml"],
                                  ["explain", "scenarios/library/moe_dispatch.toml"]],
                         ids=["run", "run --json", "explain"])
def test_a_reader_that_goes_away_ends_the_command_with_exit_0(argv):
    """`meshsim ... | head -c 1`: the rich output ends as the JSON one does, exit 0 and nothing on stderr (rich's
    own handler would exit 1, which means a disagreement)."""
    command = " ".join([sys.executable, "-m", "scenarios.cli", *argv])
    done = subprocess.run(["bash", "-c", f"{command} | head -c 1 > /dev/null; exit ${{PIPESTATUS[0]}}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["run", DOCS], ["run", "--json", DOCS], ["explain", DOCS]])
def test_an_output_the_disk_has_no_room_for_is_one_line_and_exit_2(argv, tmp_path):
    """`meshsim ... > /dev/full` (a full disk) is the user's to fix: one line and exit 2, no crash report."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "scenarios.cli", *argv], cwd=ROOT, stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120,
                              env={**env, "XDG_STATE_HOME": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr == "meshsim: error: cannot write the output: No space left on device\n"
    assert not any(tmp_path.rglob("crash-*"))

