"""A campaign tells a failed oracle from a disagreement, and measures processor time per process.

The JAX worker or the rules worker killed in the middle of a job (`kill -9`, planted with
`oracles._processes.KILLS_ENV`), hung past its timeout or answering garbage: the job runs once more with a
fresh worker and agrees, or, failing twice, is an error record with the reasons, no cases and no
finding; `meshsim campaign` then exits 4 (no finding file) and `--resume` runs the job again. Every
record's `cpu_seconds` is >= 0 and counts the processes that died during the job.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import oracles
from oracles._processes import KILLS_ENV, ChildClock
from scenarios.campaign import _campaign, _rules_jobs, run_chunk, run_rules_chunk
from scenarios.cli import main
from scenarios.cli.campaign import NO_VERDICT


def _plant_kills(monkeypatch, tmp_path: Path, count: int) -> Path:
    """Have the next `count` worker processes started from here kill themselves on their first request."""
    counter = tmp_path / "kills"
    counter.write_text(str(count))
    monkeypatch.setenv(KILLS_ENV, str(counter))
    return counter


@pytest.fixture
def own_oracle(monkeypatch):
    """A JAX oracle of the test's own (not the shared one), used by `run_chunk` in this process."""
    oracle = oracles.JaxOracle(compile_threads=1, timeout_s=120)
    monkeypatch.setattr(_campaign, "worker_oracle", lambda: oracle)
    yield oracle
    oracle.close()


def test_the_clock_of_child_processes_never_goes_back_and_counts_the_dead():
    """A child that burns processor time and is killed, then a fresh one: the clock's total never decreases,
    and after the first is reaped it holds at least the time the first burnt (its kernel account)."""
    clock = ChildClock()
    burn = [sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
                                  "time.sleep(60)"]
    first = subprocess.Popen(burn)
    readings = [clock.seconds(first)]
    while readings[-1] < 0.3:
        time.sleep(0.05)
        readings.append(clock.seconds(first))
    assert clock.reap(first, grace_s=0.0) == -9  # killed: it was sleeping
    readings.append(clock.seconds(None))
    second = subprocess.Popen([sys.executable, "-c", "pass"])
    readings.append(clock.seconds(second))
    clock.reap(second, grace_s=30.0)
    readings.append(clock.seconds(None))
    assert readings == sorted(readings) and readings[-1] >= 0.3


@pytest.mark.differential
def test_a_jax_worker_that_crashes_keeps_its_time_in_the_oracles_total():
    """`JaxOracle.cpu_seconds` after its worker crashed (the test op `crash`) and a fresh one started is not
    less than before the crash: the dead worker's time stays counted."""
    with oracles.JaxOracle(compile_threads=1) as oracle:
        oracle.run("psum", {"x": 2}, ([1.0, 2.0],), {"axis_name": "x"})
        before = oracle.cpu_seconds
        assert before > 0
        with pytest.raises(oracles.OracleFailure):
            oracle.call({"op": "crash", "mesh_shape": {}, "args": (), "params": {}}, "crash")
        after_crash = oracle.cpu_seconds
        oracle.run("psum", {"x": 2}, ([1.0, 2.0],), {"axis_name": "x"})
        assert before <= after_crash <= oracle.cpu_seconds


@pytest.mark.differential
def test_a_jax_worker_killed_mid_job_is_retried_and_the_job_agrees(monkeypatch, tmp_path, own_oracle):
    """The JAX worker kills itself (SIGKILL) on its first request: the job runs again with a fresh worker,
    every case agrees, the record says it took 2 attempts and why, and its processor time is >= 0."""
    counter = _plant_kills(monkeypatch, tmp_path, 1)
    record = run_chunk("psum", 4, 11)
    assert counter.read_text() == "0"
    assert (record["cases"], record["agree"], record["findings"], record["attempts"]) == (4, 4, [], 2)
    assert "error" not in record and "OracleFailure" in record["retried"] and "died" in record["retried"]
    assert record["cpu_seconds"] >= 0 and record["seconds"] > 0


@pytest.mark.differential
def test_a_jax_worker_killed_twice_is_an_error_record_not_a_finding(monkeypatch, tmp_path, own_oracle):
    """Killed on both attempts: the record holds no case, no agreement and no finding, and an error naming
    both failures; a third job, with a healthy worker, agrees again."""
    _plant_kills(monkeypatch, tmp_path, 2)
    record = run_chunk("all_gather", 3, 5)
    assert (record["cases"], record["agree"], record["findings"], record["attempts"]) == (0, 0, [], 2)
    assert record["error"].count("OracleFailure") == 2 and "; then " in record["error"]
    assert record["cpu_seconds"] >= 0
    again = run_chunk("all_gather", 3, 5)
    assert (again["cases"], again["agree"], again["attempts"]) == (3, 3, 1)


@pytest.mark.differential
def test_the_campaign_command_saves_no_finding_for_a_killed_oracle_and_resume_reruns_it(
        monkeypatch, tmp_path, capsys):
    """`meshsim campaign` on 1 local worker whose JAX worker is killed twice: exit 4, no finding file, the
    job's record is an error with `cpu_seconds` >= 0; `--resume` then runs that job again and exits 0."""
    _plant_kills(monkeypatch, tmp_path, 2)
    out = tmp_path / "run"
    args = ["campaign", "--ops", "psum", "--cases", "3", "--workers", "1", "-o", str(out), "--json"]
    assert main(args) == NO_VERDICT == 4
    report = json.loads(capsys.readouterr().out)
    assert report["findings"] == {} and list(report["errors"]) == ["psum-seed0-chunk0-3cases"]
    assert report["rows"][0]["errors"] == 1 and report["rows"][0]["cases"] == 0
    assert not list((out / "findings").iterdir())
    [record] = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert "error" in record and record["cpu_seconds"] >= 0
    assert main([*args, "--resume"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["rows"][0]["cases"], report["rows"][0]["agree"], report["rows"][0]["errors"]) == (3, 3, 0)
    assert report["resumed_jobs"] == 0 and not list((out / "findings").iterdir())
    assert all(json.loads(line)["cpu_seconds"] >= 0 for line in (out / "results.jsonl").read_text().splitlines())


# A stand-in for the rules worker (no JAX): kills itself on its first request while the kill counter says
# so (after burning 0.2 s of processor time), hangs or answers garbage when asked, else answers the row of
# a search in which every program agreed.
FAKE_RULES_WORKER = textwrap.dedent("""
    import json, sys, time
    from oracles._processes import planted_kill
    for n, line in enumerate(sys.stdin):
        request = json.loads(line)
        if n == 0:
            start = time.process_time()
            while time.process_time() - start < 0.2:
                pass
            planted_kill()
        if request["op"] == "hang":
            time.sleep(600)
        if request["op"] == "garbage":
            print("not json", flush=True)
            continue
        print(json.dumps({"examples": request["examples"], "known": {}, "new": []}), flush=True)
""")


@pytest.fixture
def fake_rules_worker(monkeypatch):
    # a long timeout, so a worker slow to start on a loaded machine is not taken for a hung one (the hung one
    # sets its own short timeout)
    worker = _rules_jobs.RulesWorker(command=[sys.executable, "-c", FAKE_RULES_WORKER], timeout_s=120.0)
    monkeypatch.setattr(_rules_jobs, "WORKER", worker)
    yield worker
    worker.stop()


def test_a_rules_worker_killed_mid_job_is_retried(monkeypatch, tmp_path, fake_rules_worker):
    """The rules worker killed on its first request: the job runs again on a fresh one and agrees; its
    `cpu_seconds` counts the dead worker's 0.2 s."""
    _plant_kills(monkeypatch, tmp_path, 1)
    record = run_rules_chunk("psum", 7, 3, "transpose")
    assert (record["cases"], record["agree"], record["findings"], record["attempts"]) == (7, 7, [], 2)
    assert "RulesWorkerError" in record["retried"] and "exit code -9" in record["retried"]
    assert record["cpu_seconds"] >= 0.2


@pytest.mark.parametrize("op, kills, reason", [
    ("psum", 2, "exit code -9"),
    ("hang", 0, "no answer within timeout_s=3.0"),
    ("garbage", 0, "JSONDecodeError"),
])
def test_a_rules_worker_failing_twice_is_an_error_record(op, kills, reason, monkeypatch, tmp_path,
                                                        fake_rules_worker):
    """A rules worker killed twice, hung past its timeout, or answering what is not JSON: after 2 attempts
    the record is an error naming the reason, with no case and no finding."""
    _plant_kills(monkeypatch, tmp_path, kills)
    if op == "hang":
        fake_rules_worker.timeout_s = 3.0
    record = run_rules_chunk(op, 5, 3, "vmap")
    assert (record["cases"], record["agree"], record["findings"], record["attempts"]) == (0, 0, [], 2)
    assert record["error"].count(reason) == 2 and record["kind"] == "vmap"
    assert record["cpu_seconds"] >= 0
