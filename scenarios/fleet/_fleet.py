"""Independent jobs on Dask distributed: a local cluster by default, an existing scheduler when given.

Sweeps and campaigns are lists of `Job`s, each a module-level function and its arguments (workers import
the function, so it must live in an installed module) under a key that stays the same from run to run.
`fleet(...)` yields a connected `distributed.Client`; `run_jobs` submits the jobs and hands each result
to the caller as it completes, which writes it down at once: a rerun skips the keys already written.

A worker is one core: one Dask thread, and a JAX process of its own (the campaign's) compiles on one
thread (`COMPILE_THREADS`, `oracles.size_compile_pool`). On a local cluster of no more workers than the
machine gives this process cores, worker k is also bound to core k, with the processes it starts: each
worker and its JAX process pass the turn between them many times a second, and pairs left to migrate
share the cores less well than pairs that stay put (BENCHMARKS.md, "Differential campaign on Dask").

Dask does the hard parts: a worker that dies (killed, out of memory) takes no job with it, because the
scheduler reruns the jobs it held on the other workers, and the nanny of a local cluster starts a new
worker in its place. A job that raises is not retried: the exception reaches the caller.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from scenarios._errors import ScenarioError

CONNECT_TIMEOUT_S = 10
COMPILE_THREADS = 1  # the threads XLA:CPU compiles on in a worker's JAX process: a worker is one core


class FleetError(ScenarioError):
    """The cluster cannot be reached or started, or it gave up on a job (every worker holding it died)."""


@dataclass(frozen=True)
class Job:
    """One independent piece of work: `fn(*args)`, known by `key` (unique within its sweep or campaign)."""

    key: str
    fn: Callable[..., Any]
    args: tuple = ()


def check_dask(command: str) -> None:
    """Raise a clear error when Dask (the dask extra) is not installed, before `command` starts any work.

    Raises:
        ScenarioError: `distributed` cannot be imported, naming `command` and the extra to install.
    """
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ScenarioError(f"{command} needs Dask: pip install 'meshsim[dask]'") from None


@contextmanager
def fleet(workers: int | None = None, scheduler: str | None = None) -> Iterator[Any]:
    """A `distributed.Client` on a local cluster of `workers` processes (default: one per core, one thread
    each), started and stopped here, or on the running scheduler at `scheduler` ("tcp://HOST:PORT").

    Raises:
        FleetError: the scheduler cannot be reached within `CONNECT_TIMEOUT_S`, or `workers` < 1.
    """
    from distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
        except (OSError, TimeoutError, ValueError) as error:
            raise FleetError(f"cannot reach the Dask scheduler scheduler={scheduler!r} within {CONNECT_TIMEOUT_S} s "
                             f"({type(error).__name__}: {error}); start one (`dask scheduler` and `dask worker "
                             "ADDRESS` on each machine) or leave out --scheduler for a local cluster") from None
        with client:
            yield client
        return
    count = (os.cpu_count() or 1) if workers is None else workers
    if count < 1:
        raise FleetError(f"workers={count}: a local cluster needs at least 1 worker")
    # No dashboard; the scheduler's small HTTP server (health, metrics) takes any free port, not 8787,
    # which another cluster on the machine may hold (Dask would warn and move).
    with LocalCluster(n_workers=count, threads_per_worker=1, processes=True, dashboard_address=None,
                      scheduler_kwargs={"dashboard_address": ":0"}, silence_logs=logging.CRITICAL) as cluster, \
            Client(cluster) as client:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []
        if cores and count <= len(cores):
            from scenarios.fleet._one_core import OneCore

            client.register_plugin(OneCore(cores))
        yield client


def run_jobs(client: Any, jobs: Sequence[Job], done: Callable[[Job, Any], None]) -> None:
    """Run `jobs` on `client`'s workers and call `done(job, result)` for each, in the order they finish.

    Raises:
        FleetError: a job was on every worker that died under it (Dask's `allowed-failures` times).
        Exception: whatever a job raised, unchanged (the jobs not yet finished are cancelled).
    """
    from distributed import as_completed
    from distributed.scheduler import KilledWorker

    run = uuid.uuid4().hex[:8]  # keys stay unique on a scheduler shared by several runs
    futures = {client.submit(job.fn, *job.args, key=f"{job.key}-{run}", pure=False): job for job in jobs}
    try:
        for future in as_completed(futures):
            try:
                result = future.result()
            except KilledWorker as error:
                raise FleetError(f"job key={futures[future].key!r} was lost with every worker that ran it "
                                 f"({error}); it may need more memory than a worker has") from None
            done(futures[future], result)
    finally:
        client.cancel(list(futures))


def cpu_seconds(child: int | None) -> float:
    """The processor time used so far by this process and by its child process `child` (a pid; None
    before the child starts), as a job reports it: a job's work is often a JAX process's."""
    import psutil  # comes with distributed

    used = time.process_time()
    if child is not None:
        with contextlib.suppress(psutil.Error):  # the child just ended
            times = psutil.Process(child).cpu_times()
            used += times.user + times.system
    return used
