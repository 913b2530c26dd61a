"""`Timing`: the wall-clock runs of one benchmark stage, what its result was checked against, peak memory."""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Callable


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


def check_repeat(repeat: int) -> int:
    """`repeat` if it is a positive number of repetitions."""
    if repeat < 1:
        raise ValueError(f"repeat={repeat} must be >= 1")
    return repeat


def peak_resident_gib() -> float | None:
    """This process's peak resident memory (VmHWM) in GiB; None where /proc is missing.

    VmHWM starts afresh at exec, unlike `getrusage`'s maxrss, which a child inherits from its parent.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        return None
    return None
