"""cProfile of one simulator call, split by thread.

The main thread runs the SimPy clock, every collective's protocol, placing the inputs and assembling the
outputs; each device program runs in its own thread, so it gets its own profiler. Time a thread spends
blocked in `acquire` is time the other side (the main thread or a device thread) was working.
"""

from __future__ import annotations

import cProfile
import io
import pstats
from typing import Callable

import numpy as np

import sim
from _stages import exchange, simulator_call


def profiled(program: Callable[[np.ndarray], np.ndarray], profiles: list[cProfile.Profile]) -> Callable:
    """`program` with a profiler of its own thread, appended to `profiles`."""
    def run(block: np.ndarray) -> np.ndarray:
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.enable()
        try:
            return program(block)
        finally:
            profile.disable()
    return run


def profile_simulator(x: np.ndarray) -> tuple[cProfile.Profile, list[cProfile.Profile]]:
    """Profiles of one simulator call on `x`: (main thread, one per device thread)."""
    devices: list[cProfile.Profile] = []
    plain = simulator_call()
    f = sim.shard_map(profiled(exchange, devices), mesh=plain.mesh, in_specs=plain.in_specs,
                      out_specs=plain.out_specs)
    main = cProfile.Profile()
    main.enable()
    f(x)
    main.disable()
    return main, devices


def top(profiles: list[cProfile.Profile], sort: str, limit: int) -> str:
    """The `limit` heaviest functions of `profiles` merged, ordered by `sort` ('tottime', 'cumulative')."""
    stream = io.StringIO()
    stats = pstats.Stats(profiles[0], stream=stream)
    for profile in profiles[1:]:
        stats.add(profile)
    stats.strip_dirs().sort_stats(sort).print_stats(limit)
    return stream.getvalue()


def report(x: np.ndarray, limit: int = 15) -> str:
    """The profile of one simulator call on `x`, as text for the console."""
    main, devices = profile_simulator(x)
    return "\n".join([
        "== main thread, by own time ==", top([main], "tottime", limit),
        "== main thread, by cumulative time ==", top([main], "cumulative", limit),
        f"== {len(devices)} device threads merged, by own time ==", top(devices, "tottime", limit),
    ])
