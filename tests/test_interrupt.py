"""Ctrl-C, as a terminal sends it (SIGINT to the whole process group: the command and every process it
started), at any moment of any command: one `meshsim: interrupted` line, exit 130, no traceback from the
command or from its Dask workers; a sweep interrupted and resumed has every point once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "scenarios" / "sweeps" / "psum_ring_vs_switch.toml"  # 60 points: some 8 s on 2 workers
# A bidirectional ring psum of one float over each row of a 2 x 256 mesh (two groups at once, so neither
# has the clock to itself and both run event by event: 256 steps of 1,024 messages each, most of them
# empty chunks whose members drift apart in time, so each step lands on many instants): `run` takes about
# 15-40 s, `draw`, `explain` and `trace` longer, so every interrupt below (at most 2.5 s in) arrives while
# the command still works. (It must stay slow as the engine gets faster: pick a bigger case if it does not;
# past about a million messages a run needs --max-messages.)
LONG_RUN = """title = "a long bidirectional ring psum"
description = "long enough to be interrupted"

[mesh]
axes = {g = 2, i = 256}

[collective]
op = "psum"
axis_name = "i"
algorithm = "bidirectional_ring"

[inputs]
seed = 0
shape = [1]
"""


def interrupted(argv: list[str], after_s: float, cwd: Path, started: Path | None = None) -> tuple[int, str]:
    """Start `meshsim ARGV` (its console script's module) in a process group of its own, send the group
    SIGINT after `after_s` seconds (counted from when the file `started` holds a line, when given: the
    first result saved, so the command is surely at work), and return its exit code and stderr."""
    process = subprocess.Popen([sys.executable, "-m", "meshsim_launcher", *argv], cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 120
    while started is not None and not _has_a_line(started) and process.poll() is None:
        assert time.monotonic() < deadline, f"{started} still holds no line after 120 s"
        time.sleep(0.05)
    time.sleep(after_s)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=120)
    return process.returncode, err


def _has_a_line(path: Path) -> bool:
    return path.exists() and b"\n" in path.read_bytes()


def assert_one_line(code: int, err: str, resume: bool = False) -> None:
    """Exit 130 and stderr one `meshsim: interrupted` line; with `resume`, saying how to resume unless the
    command was still loading (nothing was run)."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    # 130, or ended by the SIGINT itself after its line (seen once under a loaded machine): a shell shows both
    # as exit status 130
    assert code in (130, -signal.SIGINT), err
    assert len(lines) == 1 and lines[0].startswith("meshsim: interrupted"), err
    if resume and "while starting" not in lines[0]:
        assert "--resume" in lines[0]


@pytest.mark.parametrize("after_s", [0.3, 1.0, 2.5])
def test_run_of_a_collective_scenario(tmp_path, after_s):
    """`meshsim run` of a `[collective]` scenario, while loading (0.3 s), starting and simulating."""
    path = tmp_path / "long.toml"
    path.write_text(LONG_RUN)
    assert_one_line(*interrupted(["run", str(path)], after_s, tmp_path))


@pytest.mark.parametrize("command", [["explain"], ["trace", "-o", "t.json"], ["draw", "-o", "d.svg"]])
def test_other_commands_of_a_scenario(tmp_path, command):
    """`explain`, `trace` and `draw` of the same long scenario, interrupted while they simulate."""
    path = tmp_path / "long.toml"
    path.write_text(LONG_RUN)
    assert_one_line(*interrupted([*command, str(path)], 2.0, tmp_path))


def _rows(path: Path) -> list[str]:
    return [json.loads(line)["key"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize(("after_s", "running"), [(0.3, False), (1.0, False), (2.0, False), (0.2, True)])
def test_sweep_on_a_local_cluster(tmp_path, after_s, running):
    """`meshsim sweep` on a local cluster of 2 workers, interrupted while loading, while the cluster starts
    (the moment that made the workers print `AssertionError: Status.init` tracebacks) and just after its first
    point is saved: one line that says how to resume; resumed, every point has exactly one row."""
    out = tmp_path / "out"
    started = out / "results.jsonl" if running else None
    code, err = interrupted(["sweep", str(SWEEP), "-o", str(out), "--workers", "2"], after_s, tmp_path, started)
    assert_one_line(code, err, resume=True)
    if "while starting" in err:
        return
    done = subprocess.run([sys.executable, "-m", "meshsim_launcher", "sweep", str(SWEEP), "-o", str(out), "--workers",
                           "2", "--resume"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    keys = _rows(out / "results.jsonl")
    assert len(keys) == len(set(keys)) == 60


@pytest.mark.differential
@pytest.mark.parametrize("running", [False, True])
def test_campaign_on_a_local_cluster(tmp_path, running):
    """`meshsim campaign` on a local cluster of 2 workers (each with a JAX process of its own), interrupted
    as the cluster starts and once its first job is saved (far from the last): one line that says how to
    resume, no worker traceback."""
    argv = ["campaign", "--ops", "psum", "all_gather", "--cases", "2000", "-o", str(tmp_path / "c"),
            "--workers", "2"]
    started = tmp_path / "c" / "results.jsonl" if running else None
    assert_one_line(*interrupted(argv, 0.5 if running else 1.5, tmp_path, started), resume=True)


SLEEPING_PROGRAM = """title = "a program that takes its time"

[mesh]
axes = {i = 2}

[program]
source = '''
import time
def f(x):
    time.sleep(60)
    return x
'''
in_specs = "P('i')"
out_specs = "P('i')"
transpose = false

[[args]]
shape = [4]
"""


def test_run_of_a_program_the_user_interrupts(tmp_path):
    """Ctrl-C while a `[program]`'s own code runs is the user's interrupt (one line, exit 130), not an error
    of the file (a KeyboardInterrupt the code raises itself still is: tests/test_consent.py)."""
    path = tmp_path / "sleeping.toml"
    path.write_text(SLEEPING_PROGRAM)
    assert_one_line(*interrupted(["run", "--allow-code", str(path)], 3.0, tmp_path))
