"""The address-space limit a scenario's code runs under: what the process holds now, plus `--max-memory`.

A `[program]` source or a Python scenario is ordinary Python: it can keep any number of numpy arrays alive
without the simulator seeing them. While such code runs, the process's address space (`RLIMIT_AS`) is
capped at its size when the code starts plus the memory limit (`--max-memory`, `max_memory_bytes`; by
default half the machine's memory), so an allocation past it fails with MemoryError inside the code,
which becomes one `ScenarioError` naming the file and the limit. The previous limit is restored when the
code ends, so a process that goes on (a Python session calling `scenarios.load`) is not left capped.

Where the system has no `RLIMIT_AS` or does not say how large the process is (no `/proc/self/statm`),
the code runs without the cap; the simulator's own count of device memory (`sim.MemoryMeter`) still holds.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import sim
from scenarios._errors import ScenarioError

try:
    import resource
except ImportError:  # not a POSIX system
    resource = None  # type: ignore[assignment]

_KNOB = "raise the limit with --max-memory SIZE (meshsim) or max_memory_bytes=N (scenarios.load)"


def address_space_bytes() -> int | None:
    """The process's address space now (its virtual size, `/proc/self/statm`), or None where it is unknown."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[0])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def address_space_limit(max_memory_bytes: int | None, path: str) -> Iterator[None]:
    """Run the block with the address space capped at its size now plus `max_memory_bytes` (None: default).

    A tighter limit already in force stays; the previous limit is back when the block ends, however it ends.

    Raises:
        ScenarioError: the block ran out of memory under the cap (a MemoryError, or the simulator's
            `MemoryLimitError`); the message names `path`, the limit and how to raise it. The block's
            frames (and whatever arrays they held) are released before it is raised.
    """
    limit = sim.default_max_memory_bytes() if max_memory_bytes is None else max_memory_bytes
    previous = _cap(limit)
    message = None
    try:
        yield
    except MemoryError as error:
        message = _out_of_memory(path, limit, error)
    finally:
        if previous is not None:
            resource.setrlimit(resource.RLIMIT_AS, previous)
    if message is not None:  # raised here, outside the handler: the MemoryError's frames are gone
        raise ScenarioError(message)


def _cap(limit: int) -> tuple[int, int] | None:
    """Cap RLIMIT_AS at the current size plus `limit` (never above a limit already set); the previous limits,
    or None when nothing was changed."""
    size = address_space_bytes()
    if resource is None or not hasattr(resource, "RLIMIT_AS") or size is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = size + limit
    for bound in (soft, hard):
        if bound != resource.RLIM_INFINITY:
            cap = min(cap, bound)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ValueError, OSError):
        return None
    return soft, hard


def _out_of_memory(path: str, limit: int, error: MemoryError) -> str:
    """The one line that says the scenario's code ran out of its memory limit."""
    if isinstance(error, sim.MeshError):  # the simulator's count of device memory: its message says it all
        return f"{path}: stopped at the memory limit: {error}"
    detail = f": {error}" if str(error) else ""
    return (f"{path}: the scenario's code ran out of memory: it may grow the process by at most "
            f"max_memory_bytes={limit} ({sim.format_bytes(limit)}) while it runs (MemoryError{detail}); {_KNOB}")
