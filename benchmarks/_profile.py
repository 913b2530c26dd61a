"""cProfile of one repeated simulator call (the kind the table times), split by thread.

The main thread runs the SimPy clock, every collective's protocol, placing the inputs and assembling the
outputs; each device program runs in its own thread, so it gets its own profiler. Time a thread spends
blocked in `acquire` is time the other side (the main thread or a device thread) was working.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
from collections.abc import Callable

import numpy as np
from _cases import Case
from _stages import simulator_call


def profiled(program: Callable[[np.ndarray], np.ndarray], profiles: list[cProfile.Profile]) -> Callable:
    """`program` with a profiler of its own thread, appended to `profiles`."""
    def run(*blocks: np.ndarray) -> np.ndarray:
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.enable()
        try:
            return program(*blocks)
        finally:
            profile.disable()
    return run


def profile_simulator(case: Case, inputs: tuple[np.ndarray, ...]) -> tuple[cProfile.Profile, list[cProfile.Profile]]:
    """Profiles of the second simulator call on `inputs` (the first learns the output shapes): (main
    thread, one per device thread)."""
    devices: list[cProfile.Profile] = []
    f = simulator_call(case, profiled(case.program, devices))
    f(*inputs)
    f.last_run = None
    devices.clear()
    main = cProfile.Profile()
    main.enable()
    f(*inputs)
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


# (file, function) of the simulator's phases; a renamed function shows as n/a rather than failing.
PHASES = {
    "place inputs in device memories": ("_shard_map.py", "_programs"),
    "run the programs (exchange on the SimPy clock)": ("_engine.py", "run"),
    "assemble the global output": ("_blocks.py", "assemble"),
    "whole call": ("_shard_map.py", "run"),
}


def phases(profile: cProfile.Profile) -> str:
    """Cumulative seconds of each simulator phase in the main thread, one line each."""
    found: dict[tuple[str, str], float] = {}
    for (path, _, name), (_, _, _, cumulative_s, _) in pstats.Stats(profile).stats.items():
        key = (os.path.basename(path), name)
        found[key] = max(found.get(key, 0.0), cumulative_s)
    lines = []
    for phase, key in PHASES.items():
        seconds = found.get(key)
        lines.append(f"  {phase:<48} {'n/a' if seconds is None else f'{seconds:.3f} s'}")
    return "\n".join(lines)


def report(case: Case, inputs: tuple[np.ndarray, ...], limit: int = 15) -> str:
    """The profile of one repeated simulator call of `case` on `inputs`, as text for the console."""
    main, devices = profile_simulator(case, inputs)
    return "\n".join([
        f"== {case.name}: simulator phases of a repeated call (main thread, cumulative) ==", phases(main), "",
        "== main thread, by own time ==", top([main], "tottime", limit),
        "== main thread, by cumulative time ==", top([main], "cumulative", limit),
        f"== {len(devices)} device threads merged, by own time ==", top(devices, "tottime", limit),
    ])
