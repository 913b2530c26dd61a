"""The in-process stages: the numpy reference exchange and the simulator, each timed best-of-N.

Each repetition drops the previous repetition's arrays (and collects the garbage) before it starts, so at
most one result of each stage is alive at a time.
"""

from __future__ import annotations

import gc
from typing import Callable

import numpy as np

import collectives
import sim
from _timing import Timing, check_repeat, timed
from _workload import AXIS_NAME, DEVICES, Workload, numpy_all_to_all


class ResultMismatch(AssertionError):
    """A stage produced a different array from the numpy reference: its timing would be meaningless."""


def time_numpy(x: np.ndarray, workload: Workload, repeat: int) -> tuple[Timing, np.ndarray]:
    """Best-of-`repeat` wall time of the numpy exchange, and its result (checked by a second formulation)."""
    runs_s, reference = [], None
    for _ in range(check_repeat(repeat)):
        reference = None
        elapsed_s, reference = timed(lambda: numpy_all_to_all(x, workload))
        runs_s.append(elapsed_s)
    _check_reference(x, reference, workload)
    return Timing("numpy", tuple(runs_s), "equals a reshape/swapaxes transcription"), reference


def _check_reference(x: np.ndarray, reference: np.ndarray, workload: Workload) -> None:
    """The chunk loop must agree with the all_to_all written as one axis swap of (sender, receiver)."""
    chunks = x.reshape(DEVICES, DEVICES, workload.chunk_rows, workload.columns)
    swapped = np.swapaxes(chunks, 0, 1).reshape(x.shape)
    if not np.array_equal(swapped, reference):
        raise ResultMismatch("numpy: the chunk loop and the swapaxes transcription disagree")


def exchange(block: np.ndarray) -> np.ndarray:
    """One device's program: the tiled all_to_all of its block over the whole mesh axis."""
    return collectives.all_to_all(block, AXIS_NAME, 0, 0, tiled=True)


def simulator_call(program: Callable[[np.ndarray], np.ndarray] = exchange) -> sim.ShardMapped:
    """`program` mapped over a fresh 8-device mesh (default network), rows split over the axis."""
    mesh = sim.Mesh({AXIS_NAME: DEVICES})
    return sim.shard_map(program, mesh=mesh, in_specs=sim.P(AXIS_NAME), out_specs=sim.P(AXIS_NAME))


def time_simulator(x: np.ndarray, reference: np.ndarray, repeat: int) -> Timing:
    """Best-of-`repeat` wall time of `simulator_call()(x)`; every repetition's output must equal `reference`.

    The timed call covers what a user's call costs: placing each block in its device memory, the message
    exchange on the SimPy clock, and assembling the global output.
    """
    runs_s, simulated_s, messages = [], set(), 0
    network = simulator_call().mesh.network
    for _ in range(check_repeat(repeat)):
        f = simulator_call()
        elapsed_s, out = timed(lambda: f(x))
        runs_s.append(elapsed_s)
        simulated_s.add(f.last_run.end_time_s)
        messages = len(f.last_run.trace)
        if not np.array_equal(out, reference):
            raise ResultMismatch("simulator: all_to_all output differs from the numpy reference")
        del f, out
        gc.collect()
    if len(simulated_s) != 1:
        raise ResultMismatch(f"simulator: simulated time differs between repetitions: {sorted(simulated_s)}")
    note = (f"{messages} messages; network {network.topology}, latency {network.latency_s * 1e6:g} us, "
            f"{network.bandwidth_bytes_per_s / 1e9:g} GB/s per link and direction")
    return Timing("simulator", tuple(runs_s), "equals numpy", simulated_s.pop(), note)
