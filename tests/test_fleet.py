"""The Dask engine under sweeps and campaigns (`scenarios.fleet._fleet`): jobs on a local cluster of 2 workers,
a worker killed mid-run losing nothing, each worker bound to a core of its own, a failing job and an
unreachable scheduler reported clearly."""

from __future__ import annotations

import os
import signal
import time

import pytest

from scenarios.fleet import FleetError, Job, fleet, run_jobs


def slow_square(n: int) -> tuple[int, int]:
    """n squared, after a moment, and the id of the process that computed it."""
    time.sleep(0.2)
    return n * n, os.getpid()


def refuse(n: int) -> int:
    raise ValueError(f"n={n} is refused")


@pytest.fixture(scope="module")
def client():
    with fleet(workers=2) as c:
        yield c


def test_jobs_run_on_both_workers(client):
    """Every job's result comes back once, under its own key, and both workers did some of them."""
    got: dict[str, tuple[int, int]] = {}
    run_jobs(client, [Job(f"p{n}", slow_square, (n,)) for n in range(20)], lambda job, r: got.update({job.key: r}))
    assert {k: v for k, (v, _) in got.items()} == {f"p{n}": n * n for n in range(20)}
    assert len({pid for _, pid in got.values()}) == 2


def test_a_killed_worker_loses_no_job(client):
    """A worker killed in the middle of a run: the jobs it held rerun elsewhere, and every result arrives."""
    got: dict[str, int] = {}
    pids = list(client.run(os.getpid).values())

    def done(job: Job, result: tuple[int, int]) -> None:
        got[job.key] = result[0]
        if len(got) == 3:
            os.kill(pids[0], signal.SIGKILL)

    run_jobs(client, [Job(f"k{n}", slow_square, (n,)) for n in range(30)], done)
    assert got == {f"k{n}": n * n for n in range(30)}
    assert pids[0] not in client.run(os.getpid).values()


def bindings() -> dict[str, list[list[int]]]:
    """The cores each thread of this process may run on, and those of a process it starts."""
    import json
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                           capture_output=True, text=True, check=True).stdout
    threads = {tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task")}
    return {"threads": sorted(map(list, threads)), "child": [json.loads(child)]}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="binds 2 workers to 2 cores")
def test_each_local_worker_is_bound_to_a_core_of_its_own(client):
    """On a local cluster of no more workers than cores, worker k (the nanny's restart of a killed one
    too: this runs after the kill above) and every process it starts run on core k only; with more
    workers than cores nothing is bound."""
    cores = sorted(os.sched_getaffinity(0))
    bound = sorted(client.run(bindings).values(), key=str)
    assert bound == [{"threads": [[core]], "child": [[core]]} for core in cores[:2]]
    with fleet(workers=len(cores) + 1) as crowded:
        assert all(b == {"threads": [cores], "child": [cores]} for b in crowded.run(bindings).values())


def test_a_failing_job_raises_its_error(client):
    """A job that raises is not retried: its exception reaches the caller as it was."""
    with pytest.raises(ValueError, match="n=3 is refused"):
        run_jobs(client, [Job("bad", refuse, (3,))], lambda job, r: None)


def test_unreachable_scheduler_is_a_clear_error(monkeypatch):
    """A scheduler address nobody listens on is a FleetError naming it and what to do, within the timeout."""
    monkeypatch.setattr("scenarios.fleet._fleet.CONNECT_TIMEOUT_S", 2)
    start = time.perf_counter()
    with pytest.raises(FleetError, match=r"cannot reach the Dask scheduler scheduler='tcp://127.0.0.1:9'.*"
                                         r"leave out --scheduler"), fleet(scheduler="tcp://127.0.0.1:9"):
        pass
    assert time.perf_counter() - start < 20


def test_a_cluster_needs_a_worker():
    """workers=0 is refused with the rule."""
    with pytest.raises(FleetError, match="workers=0: a local cluster needs at least 1 worker"), fleet(workers=0):
        pass
