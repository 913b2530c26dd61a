"""`size_compile_pool(threads)`: how many threads XLA:CPU compiles on in this process, set as JAX starts.

XLA:CPU compiles a program's kernels on a thread pool it creates at the process's first compile, one
thread per core the process may run on at that moment (its CPU affinity). A Dask worker of `meshsim
campaign` is one core (one thread), and its JAX process should be one too: with one worker per core, a JAX
process that compiles on every core takes time from the other workers, and every case compiles a new
program (BENCHMARKS.md, "Differential campaign on Dask"). So such a process narrows its affinity to
`threads` cores, starts JAX with one tiny compile (the pool now exists, with `threads` threads), then
gives every one of its threads all its cores back: its threads may run on any core, but no more than
`threads` of them compile at once.

A process asks for it through the environment variable `COMPILE_THREADS_ENV` (`JaxOracle(compile_threads=1)`
and the campaign's rules worker set it). Where the platform has no CPU affinity (macOS, Windows) nothing
changes. Call it after JAX's configuration and before anything starts JAX's backend.
"""

from __future__ import annotations

import contextlib
import os

COMPILE_THREADS_ENV = "MESHSIM_COMPILE_THREADS"


def size_compile_pool(threads: int | None) -> bool:
    """Start JAX's backend so that XLA:CPU compiles on at most `threads` threads; True when it was sized.

    Returns False, changing nothing, for `threads=None` or where the platform has no CPU affinity.

    Raises:
        ValueError: `threads` is not a positive integer.
        RuntimeError: JAX's backend has started already (its pool is made).
    """
    if threads is None or not hasattr(os, "sched_setaffinity"):
        return False
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads={threads!r} must be a positive integer (the threads XLA:CPU compiles on)")
    import jax
    import numpy as np
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        raise RuntimeError("size_compile_pool must run before JAX starts its backend (the first device query, "
                           "placement or compile); XLA:CPU has made its compile pool already")
    everywhere = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(sorted(everywhere)[:threads]))
    try:
        jax.jit(lambda x: x + 1).lower(np.zeros(1, np.float32)).compile()
    finally:
        bind_threads(everywhere)
    return True


def bind_threads(cores: set[int]) -> None:
    """Let every thread of this process run on `cores` only (threads and processes it starts later inherit
    the binding of the thread that starts them). Linux only."""
    for thread in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(thread), cores)


def from_environment() -> bool:
    """`size_compile_pool` with the count the environment gives (`COMPILE_THREADS_ENV`), if any.

    Raises:
        ValueError: the variable is set but is not a positive integer.
    """
    value = os.environ.get(COMPILE_THREADS_ENV)
    if not value:
        return False
    if not value.isdigit():
        raise ValueError(f"{COMPILE_THREADS_ENV}={value!r} must be a positive integer")
    return size_compile_pool(int(value))
