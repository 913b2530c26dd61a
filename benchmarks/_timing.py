"""`Timing`: the wall-clock runs of one benchmark stage, what its result was checked against, peak memory."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """One stage's measured runs.

    `runs_s` are wall-clock seconds, one per repetition; `simulated_s` is the simulated clock's end time
    (simulator stage only); `check` says what the result was compared with and that it matched.
    """

    stage: str
    runs_s: tuple[float, ...]
    check: str
    simulated_s: float | None = None
    note: str = ""

    @property
    def best_s(self) -> float:
        """The fastest repetition: the least disturbed by other work on a shared machine."""
        return min(self.runs_s)


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """Run `fn` once, after a full garbage collection, and return (wall seconds, its result)."""
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def best_of(fn: Callable[[], object], repeat: int = 5,
            clock: Callable[[], float] = time.perf_counter) -> tuple[float, object]:
    """The shortest time of `repeat` calls of `fn` by `clock` (wall seconds; `time.process_time` for this
    process's CPU seconds), and the last call's result."""
    times, result = [], None
    for _ in range(repeat):
        start = clock()
        result = fn()
        times.append(clock() - start)
    return min(times), result


def check_repeat(repeat: int) -> int:
    """`repeat` if it is a positive number of repetitions."""
    if repeat < 1:
        raise ValueError(f"repeat={repeat} must be >= 1")
    return repeat


def peak_resident_gib() -> float | None:
    """This process's peak resident memory (VmHWM) in GiB; None where /proc is missing.

    VmHWM starts afresh at exec, unlike `getrusage`'s maxrss, which a child inherits from its parent.
    """
    kib = _status_kib("VmHWM")
    return None if kib is None else kib / 2**20


def peak_added_bytes(fn: Callable[[], object]) -> tuple[int | None, object]:
    """Run `fn` once; return the peak resident bytes it added to the process, and its result.

    After a full garbage collection, writing "5" to /proc/self/clear_refs resets the peak (VmHWM) to the
    current resident size (VmRSS), so the peak after the call minus the size before it is what the call
    added at its worst moment. Large numpy arrays are mapped afresh and unmapped when freed, so memory
    freed earlier in the process cannot hide them. None where the kernel does not offer this.
    """
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        return None, fn()
    before = _status_kib("VmRSS")
    result = fn()
    after = _status_kib("VmHWM")
    return (None if before is None or after is None else (after - before) * 1024), result


def _status_kib(field: str) -> int | None:
    """A `kB` field of /proc/self/status, e.g. VmRSS; None where /proc is missing."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None
