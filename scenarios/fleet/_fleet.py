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
import signal
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from scenarios._errors import ScenarioError

CONNECT_TIMEOUT_S = 10
LOOPBACK = "127.0.0.1"  # where a local cluster listens: nothing of it is reachable from another machine
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
def fleet(workers: int | None = None, scheduler: str | None = None, dashboard: str | None = None) -> Iterator[Any]:
    """A `distributed.Client` on a local cluster of `workers` processes (default: one per core, one thread
    each), started and stopped here, or on the running scheduler at `scheduler` ("tcp://HOST:PORT").

    A local cluster listens on 127.0.0.1 only: its scheduler, nannies, workers and their small HTTP servers
    (health checks only). `dashboard` ("HOST:PORT", from `dashboard_address`) also serves Dask's dashboard
    there; `client.dashboard_link` is its URL. Worker processes start with Ctrl-C blocked: the command that
    started them handles it and stops them.

    Raises:
        FleetError: the scheduler does not answer as a Dask scheduler within `CONNECT_TIMEOUT_S`, `workers` < 1,
            or `dashboard` comes with `scheduler`.
    """
    if scheduler is not None:
        if dashboard is not None:
            raise FleetError(f"--dashboard={dashboard!r} applies to a local cluster; the scheduler at "
                             f"{scheduler!r} serves its own dashboard (`dask scheduler --dashboard-address`)")
        with _remote(scheduler) as client:
            yield client
        return
    count = (os.cpu_count() or 1) if workers is None else workers
    if count < 1:
        raise FleetError(f"workers={count}: a local cluster needs at least 1 worker")
    with _local(count, dashboard) as client:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []
        if cores and count <= len(cores):
            from scenarios.fleet._one_core import OneCore

            client.register_plugin(OneCore(cores))
        yield client


@contextmanager
def _remote(scheduler: str) -> Iterator[Any]:
    """A client of the running scheduler at `scheduler`, once it has answered as one (`check_scheduler`)."""
    from distributed import Client

    check_scheduler(scheduler, CONNECT_TIMEOUT_S)
    try:
        client = Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError, ValueError) as error:
        raise FleetError(_not_dask(scheduler, f"{type(error).__name__}: {error}")) from None
    with client:
        yield client


@contextmanager
def _local(count: int, dashboard: str | None) -> Iterator[Any]:
    """A client of a new local cluster of `count` one-thread worker processes, every listener on 127.0.0.1."""
    import dask
    from distributed import Client, LocalCluster

    # Without the dashboard the scheduler's HTTP server (always started) answers health checks only, not
    # its pages of addresses, call stacks and logs; on any free port, as 8787 may be another cluster's.
    routes = {} if dashboard else {"distributed.scheduler.http.routes": ["distributed.http.health"],
                                   "distributed.worker.http.routes": ["distributed.http.health"]}
    address = dashboard or f"{LOOPBACK}:0"
    with dask.config.set(routes), contextlib.ExitStack() as stack:
        with _interrupts_blocked(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Port .* is already in use")  # it takes another, in dashboard_link
            cluster = stack.enter_context(LocalCluster(
                n_workers=count, threads_per_worker=1, processes=True, host=LOOPBACK, dashboard_address=address,
                scheduler_kwargs={"dashboard": dashboard is not None}, worker_dashboard_address=None,
                silence_logs=logging.CRITICAL))
        yield stack.enter_context(Client(cluster))


@contextmanager
def _interrupts_blocked() -> Iterator[None]:
    """Block SIGINT in this thread while the cluster starts: the threads started meanwhile (Dask's event loop)
    and every process they start (worker processes, now and when a nanny restarts one) keep it blocked, so a
    Ctrl-C reaches this process's main thread alone, which stops the cluster in order. A Ctrl-C that came
    meanwhile is raised when the block lifts."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # started later, it would unblock SIGINT in the thread that starts it
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def check_scheduler(scheduler: str, timeout_s: float) -> None:
    """Connect to `scheduler` and read its handshake, all within `timeout_s`: the one check that the address
    is a Dask scheduler's before a client waits on it (a server that is not Dask's may answer nothing, or
    bytes Dask would read as a frame of exabytes). TLS addresses use Dask's security configuration.

    Raises:
        FleetError: a malformed address, nothing listening there, no handshake within `timeout_s`, or an
            answer that is not Dask's.
    """
    import asyncio

    from distributed.comm import connect
    from distributed.security import Security

    deadline = time.monotonic() + timeout_s
    security = Security()  # Dask's configuration: distributed.comm.tls.*, e.g. DASK_DISTRIBUTED__COMM__TLS__CA_FILE
    _check_tls(scheduler, security)
    _check_listening(scheduler, timeout_s)

    async def handshake() -> None:
        left = max(deadline - time.monotonic(), 0.1)
        comm = await asyncio.wait_for(connect(scheduler, timeout=left, **security.get_connection_args("client")),
                                      left)
        await comm.close()

    try:
        asyncio.run(handshake())
    except TimeoutError:
        raise FleetError(_not_dask(scheduler, f"a server accepted the connection but sent no Dask handshake "
                                              f"within {timeout_s:g} s")) from None
    except Exception as error:  # whatever a foreign server's bytes make Dask's reader raise
        why = f"the server there answers in another protocol than Dask's (reading it raised {type(error).__name__})"
        if type(error).__name__ == "CommClosedError":
            why = ("the server closed the connection before Dask's handshake (a tls:// scheduler reached with "
                   "tcp://, one that refuses this client's certificate, or not Dask)")
        raise FleetError(_not_dask(scheduler, why)) from None


def _check_tls(scheduler: str, security: Any) -> None:
    """A tls:// `scheduler` needs the client's certificate and its CA in Dask's configuration (`security`)."""
    if scheduler.startswith("tls://") and not (security.tls_ca_file and security.tls_client_cert):
        raise FleetError(_not_dask(scheduler, "a tls:// scheduler needs this client's certificate in Dask's "
                                              "configuration: set DASK_DISTRIBUTED__COMM__TLS__CA_FILE, "
                                              "..._TLS__CLIENT__CERT and ..._TLS__CLIENT__KEY (docs/reference/"
                                              "clusters.md, \"TLS\")"))


def _check_listening(scheduler: str, timeout_s: float) -> None:
    """Open and close a TCP connection to a tcp:// or tls:// `scheduler` (other schemes pass unchecked)."""
    import socket

    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import backends

    try:
        scheme, location = parse_address(scheduler)
        if scheme not in backends:
            raise ValueError(f"unknown scheme {scheme!r}, Dask knows {', '.join(map(repr, backends))}")
        host, port = parse_host_port(location) if scheme in ("tcp", "tls") else (None, None)
    except (ValueError, TypeError) as error:
        raise FleetError(_not_dask(scheduler, f"not an address: {error}")) from None
    if host is None:
        return
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as error:
        raise FleetError(_not_dask(scheduler, f"no connection: {type(error).__name__}: {error}")) from None


def _not_dask(scheduler: str, why: str) -> str:
    """The message for a `--scheduler` that does not answer as a Dask scheduler, and what to do."""
    return (f"cannot reach the Dask scheduler scheduler={scheduler!r}: {why}; expected the address a running Dask "
            "scheduler listens on (tcp://HOST:PORT, or tls://, as `dask scheduler` prints), or leave out --scheduler "
            "for a local cluster")


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

