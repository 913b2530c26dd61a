"""cProfile of one repeated simulator call (the kind the table times).

Device programs run as greenlets in the main thread, so one profiler sees everything: the SimPy clock,
every collective's protocol, the device programs, placing the inputs and assembling the outputs.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats

import numpy as np
from _cases import Case
from _stages import simulator_call


def profile_simulator(case: Case, inputs: tuple[np.ndarray, ...]) -> cProfile.Profile:
    """The profile of the second simulator call on `inputs` (the first learns the output shapes)."""
    f = simulator_call(case, case.program)
    f(*inputs)
    f.last_run = None
    profile = cProfile.Profile()
    profile.enable()
    f(*inputs)
    profile.disable()
    return profile


def top(profile: cProfile.Profile, sort: str, limit: int) -> str:
    """The `limit` heaviest functions of `profile`, ordered by `sort` ('tottime', 'cumulative')."""
    stream = io.StringIO()
    pstats.Stats(profile, stream=stream).strip_dirs().sort_stats(sort).print_stats(limit)
    return stream.getvalue()


# (file, function) of the simulator's phases; a renamed function shows as n/a rather than failing.
PHASES = {
    "place inputs in device memories": ("_shard_map.py", "_programs"),
    "run the programs (exchange on the SimPy clock)": ("_engine.py", "run"),
    "assemble the global output": ("_blocks.py", "assemble"),
    "whole call": ("_shard_map.py", "run"),
}


def phases(profile: cProfile.Profile) -> str:
    """Cumulative seconds of each simulator phase, one line each."""
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
    profile = profile_simulator(case, inputs)
    return "\n".join([
        f"== {case.name}: simulator phases of a repeated call (cumulative) ==", phases(profile), "",
        "== by own time ==", top(profile, "tottime", limit),
        "== by cumulative time ==", top(profile, "cumulative", limit),
    ])
