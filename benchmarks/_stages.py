"""The in-process stages: the numpy evaluation and the simulator, each timed best-of-N, and their memory.

Each repetition drops the previous repetition's arrays (and collects the garbage) before it starts, so at
most one result of each stage is alive at a time.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from _cases import Case
from _timing import Timing, check_repeat, peak_added_bytes, timed
from _workload import AXIS_NAME, DEVICES

import sim


class ResultMismatch(AssertionError):
    """A stage produced a different array from the numpy reference: its timing would be meaningless."""


@dataclass(frozen=True)
class Memory:
    """Peak resident bytes one call adds (None where /proc cannot tell), and the bytes it reads and writes."""

    numpy_bytes: int | None
    first_call_bytes: int | None
    repeated_call_bytes: int | None
    input_bytes: int
    output_bytes: int


def time_numpy(case: Case, inputs: tuple[np.ndarray, ...], repeat: int) -> tuple[Timing, np.ndarray]:
    """Best-of-`repeat` wall time of the numpy evaluation, and its result (checked by a second transcription)."""
    runs_s, reference = [], None
    for _ in range(check_repeat(repeat)):
        reference = None
        elapsed_s, reference = timed(lambda: case.evaluate(*inputs))
        runs_s.append(elapsed_s)
    if not case.check(inputs, reference):
        raise ResultMismatch(f"numpy: {case.name}: the numpy evaluation and {case.transcription} disagree")
    return Timing("numpy", tuple(runs_s), f"equals {case.transcription}"), reference


def simulator_call(case: Case, program: Callable | None = None) -> sim.ShardMapped:
    """`program` (default the case's) mapped over a fresh 8-device mesh (default network), rows split."""
    mesh = sim.Mesh({AXIS_NAME: DEVICES})
    return sim.shard_map(program or case.program, mesh=mesh, in_specs=case.in_specs, out_specs=sim.P(AXIS_NAME))


def time_simulator(case: Case, inputs: tuple[np.ndarray, ...], reference: np.ndarray, repeat: int) -> Timing:
    """Best-of-`repeat` wall time of `f(*inputs)` for one `f = simulator_call(case)`, after one untimed first
    call; every call's output must equal `reference`.

    The first call learns the output shapes (as a jitted JAX function is compiled on its first call), so
    from the second call on each device writes its block of the global output in place. A timed call
    covers what a user's call costs: placing each block in its device memory (adopted, no copy), the
    message exchange on the SimPy clock, and handing back the global output.
    """
    f = simulator_call(case)
    first_s, out = timed(lambda: f(*inputs))
    _check(case, out, reference)
    runs_s, simulated_s = [], {f.last_run.end_time_s}
    messages = len(f.last_run.trace)
    for _ in range(check_repeat(repeat)):
        out = f.last_run = None
        elapsed_s, out = timed(lambda: f(*inputs))
        runs_s.append(elapsed_s)
        simulated_s.add(f.last_run.end_time_s)
        _check(case, out, reference)
    del out
    f.last_run = None
    gc.collect()
    if len(simulated_s) != 1:
        raise ResultMismatch(f"simulator: simulated time differs between calls: {sorted(simulated_s)}")
    network = f.mesh.network
    note = (f"first call {first_s:.3f} s (not timed); {messages} messages; network {network.topology}, latency "
            f"{network.latency_s * 1e6:g} us, {network.bandwidth_bytes_per_s / 1e9:g} GB/s per link and direction")
    return Timing("simulator", tuple(runs_s), "equals numpy", simulated_s.pop(), note)


def measure_memory(case: Case, inputs: tuple[np.ndarray, ...]) -> Memory:
    """Peak resident bytes added by one numpy evaluation, one first simulator call and one repeated call."""
    numpy_bytes, out = peak_added_bytes(lambda: case.evaluate(*inputs))
    output_bytes = out.nbytes
    del out
    f = simulator_call(case)
    first_bytes, out = peak_added_bytes(lambda: f(*inputs))
    out = f.last_run = None
    repeated_bytes, out = peak_added_bytes(lambda: f(*inputs))
    del out
    f.last_run = None
    gc.collect()
    return Memory(numpy_bytes, first_bytes, repeated_bytes, sum(x.nbytes for x in inputs), output_bytes)


def _check(case: Case, out: np.ndarray, reference: np.ndarray) -> None:
    if not np.array_equal(out, reference):
        raise ResultMismatch(f"simulator: {case.name} output differs from the numpy reference")
