"""`measure`: one sweep point run on the simulator as a user would run it, and its row of results.

The collective runs under `sim.shard_map` on inputs drawn from `numpy.random.default_rng(seed)`, as real
messages over the point's network; the simulated time is the run's end (`sim.Run.end_time_s`), so every
figure of the row comes from the messages, none from a formula.

Sizes and bandwidths follow nccl-tests (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md and src/*.cu):
`size_bytes` is nccl-tests' "size" S and `count` its "count", per collective (each definition's `Sweep`):

| collective | nccl-tests op | S (size_bytes) | count | busbw factor |
|---|---|---|---|---|
| psum, pmean, pmax, pmin | AllReduce | each device's buffer | its elements | 2(n-1)/n |
| all_gather | AllGather | the gathered buffer (n blocks) | elements of one device's block | (n-1)/n |
| psum_scatter | ReduceScatter | each device's input (n blocks) | elements of one device's output | (n-1)/n |
| all_to_all, ragged_all_to_all | AlltoAll | each device's buffer (n blocks) | elements of one block | (n-1)/n |
| ppermute (shift by one) | SendRecv | each device's buffer | its elements | 1 |

algbw = S / t and busbw = algbw x factor, in GB/s (1e9 bytes per second), n being the group size. As in
nccl-tests, S is rounded down to a whole number of elements per block; the row gives the size that ran.
ragged_all_to_all sends even splits: every device's operand is n blocks of `count` rows, block j to member j.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

import collectives
import layouts
import sim
from collectives._algorithms import axes_shape
from scenarios._inputs import rounded
from scenarios.sweep._deadline import PastDeadline, deadline
from scenarios.sweep._sweep import SWEPT, Point
from scenarios.sweep._sweep_values import build_network

COLUMNS = ("key", "collective", "mesh", "axis_name", "devices", "network", "algorithm", "algorithm_run", "dtype",
           "seed", "size_bytes", "count", "time_s", "algbw_GB_per_s", "busbw_GB_per_s", "messages",
           "between_devices", "bytes_sent", "wall_s", "error", "payload")


# How a sweep times each collective it offers: its definition's `Sweep` record, by name.
Operation = collectives.Sweep
OPERATIONS: dict[str, Operation] = {name: collectives.definition(name).sweep for name in SWEPT}


def measure(point: Point, max_memory_bytes: int | None = None, max_messages: int | None = None,
            timeout_s: float | None = None) -> dict[str, Any]:
    """Run `point` on the simulator and return its row (`COLUMNS`).

    A point the simulator rejects (an algorithm the collective lacks, a power-of-two algorithm on 6 devices,
    a network that does not hold the mesh, a size too small for one element per block), one over budget
    (`refused`), one still running after `timeout_s` seconds (stopped there: `deadline`), and one whose run
    fails in any other way (out of memory on the worker, say) gives a row whose `error` is the message and
    whose figures are None; it never raises for that, so one point's failure never ends a sweep.
    """
    row = _row(point)
    try:
        plan = _plan(point, max_memory_bytes, max_messages, row)
        with deadline(timeout_s):
            row.update(_timed(point, plan))
    except PastDeadline:
        row["error"] = (f"stopped after --timeout {timeout_s:g} s: the point had not finished; raise --timeout, or "
                        f"make the point smaller")
    except sim.MeshError as error:
        row["error"] = str(error)
    except MemoryError as error:  # the run is gone once the handler ends; the row is all that is kept
        detail = f": {error}" if str(error) else ""
        row["error"] = (f"out of memory on the worker (MemoryError{detail}); a smaller size or mesh, or a worker "
                        f"with more memory, may run it")
    except Exception as error:  # a point's failure is its own row's, never the whole sweep's
        row["error"] = f"the point failed: {type(error).__name__}: {error}"
    return row


def refused(point: Point, max_memory_bytes: int | None = None, max_messages: int | None = None) -> dict | None:
    """The row of a point over budget (its memory or messages estimate past the limits, or a combination the
    simulator rejects), made without running it; None for a point that may run.

    A sweep checks every point with this before submitting it, so a point too large to finish is an error
    row at once instead of a worker busy for hours.
    """
    row = _row(point)
    try:
        _plan(point, max_memory_bytes, max_messages, row)
    except sim.MeshError as error:
        row["error"] = str(error)
        return row
    return None


def _row(point: Point) -> dict[str, Any]:
    """The point's row with its parameters filled in and every figure None."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(key=point.key, collective=point.collective, network=point.network_label, algorithm=point.algorithm,
               dtype=point.dtype, seed=point.seed, size_bytes=point.size_bytes, payload=point.payload,
               mesh=",".join(f"{name}={size}" for name, size in point.mesh.items()))
    return row


@dataclass(frozen=True)
class _Plan:
    """A point checked against its budget: its mesh, axis, group size and the sizes of its buffers."""

    mesh: sim.Mesh
    axis_name: str | tuple[str, ...]
    n: int
    count: int
    per_device: int
    size_bytes: int


def _plan(point: Point, max_memory_bytes: int | None, max_messages: int | None, row: dict[str, Any]) -> _Plan:
    """The point's mesh and sizes, once its memory and messages estimates are within the limits (filling
    `row`'s axis_name and devices on the way).

    Raises:
        MeshError: the simulator rejects the combination, or an estimate exceeds its limit.
    """
    mesh = sim.Mesh(dict(point.mesh), network=build_network(point.network, tuple(point.mesh.values())),
                    max_memory_bytes=max_memory_bytes)
    axis_name = _axis_name(point, mesh)
    n = mesh.axis_size(axis_name)
    row.update(axis_name=",".join(mesh.axis_names_of(axis_name)), devices=n)
    operation, dtype = OPERATIONS[point.collective], np.dtype(point.dtype)
    count = _count(point, operation, dtype, n)
    per_device = count if operation.blocks != "split" else count * n
    size_bytes = count * dtype.itemsize * (1 if operation.blocks == "whole" else n)
    messages = _messages(point, mesh, axis_name)
    what = f"{point.collective} ({point.algorithm}) of size_bytes={point.size_bytes} on {mesh.size} devices"
    try:
        _check_memory(what, point, mesh.size, per_device * dtype.itemsize, size_bytes, messages, max_memory_bytes)
    except sim.InvalidArgumentError as error:
        raise sim.InvalidArgumentError(f"{error}; raise the limit with meshsim sweep --max-memory SIZE") from None
    try:
        sim.check_messages(what, messages, max_messages)
    except sim.InvalidArgumentError as error:
        raise sim.InvalidArgumentError(f"{error}; a point that large takes long: raise the limit with meshsim "
                                       f"sweep --max-messages N") from None
    return _Plan(mesh, axis_name, n, count, per_device, size_bytes)


def _messages(point: Point, mesh: sim.Mesh, axis_name: Any) -> int:
    """At most how many messages the point's call sends (`Definition.most_messages`, by the algorithm it asks
    for); 0 for an algorithm the collective lacks, which its run rejects in the simulator's own words."""
    definition = collectives.definition(point.collective)
    try:
        algorithm = definition.algorithm(point.algorithm)
    except sim.MeshError:
        return 0
    return definition.most_messages(algorithm, mesh.size, axes_shape(mesh, axis_name, None))


def _axis_name(point: Point, mesh: sim.Mesh) -> str | tuple[str, ...]:
    """The point's axis_name as the collectives take it: every mesh axis when None; checked against the mesh."""
    name = point.axis_name if point.axis_name is not None else list(point.mesh)
    name = name if isinstance(name, str) else (name[0] if len(name) == 1 else tuple(name))
    mesh.axis_size(name)  # raises for a name the mesh lacks
    return name


def _timed(point: Point, plan: _Plan) -> dict[str, Any]:
    """Size, count and every figure of one simulated call of the point's collective."""
    mesh, axis_name, n, count = plan.mesh, plan.axis_name, plan.n, plan.count
    operation, dtype = OPERATIONS[point.collective], np.dtype(point.dtype)
    spec = sim.P(tuple(mesh.shape))
    args = _inputs(point, mesh, axis_name, dtype, plan.per_device, count)
    program = operation.call(axis_name, n, point.algorithm)
    f = sim.shard_map(program, mesh=mesh, in_specs=(spec,) * len(args), out_specs=spec,
                      check_vma=False)
    start = time.perf_counter()
    run = f.run(*args)
    wall_s = time.perf_counter() - start
    traffic = sim.record.Traffic.of(run.trace)
    time_s = float(run.end_time_s)
    algbw = plan.size_bytes / time_s / 1e9 if time_s > 0 else None
    return {"size_bytes": plan.size_bytes, "count": count, "time_s": time_s, "algbw_GB_per_s": algbw,
            "busbw_GB_per_s": None if algbw is None else algbw * operation.busbw_factor(n),
            "messages": traffic.messages, "between_devices": traffic.between, "bytes_sent": traffic.network_bytes,
            "wall_s": wall_s, "algorithm_run": ",".join(sorted({c.algorithm or "" for c in run.calls}))}


def _count(point: Point, operation: Operation, dtype: np.dtype, n: int) -> int:
    """nccl-tests' count: elements per device ("whole") or per block, S rounded down to whole elements."""
    blocks = 1 if operation.blocks == "whole" else n
    count = point.size_bytes // (dtype.itemsize * blocks)
    if count < 1:
        raise sim.InvalidArgumentError(
            f"size_bytes={point.size_bytes} holds no whole {dtype} element per block: {point.collective} over "
            f"{n} devices needs at least {dtype.itemsize * blocks} bytes")
    return count


def _check_memory(what: str, point: Point, devices: int, in_bytes: int, size_bytes: int, messages: int,
                  max_memory_bytes: int | None) -> None:
    """Refuse, before drawing anything, a point whose buffers and trace would take more than the memory limit
    (by default half the machine's): every device's input, output and messages in flight, and the trace's
    `sim.MESSAGE_BYTES` per message."""
    out_bytes = size_bytes if OPERATIONS[point.collective].blocks == "gathered" else in_bytes
    if point.payload == "abstract":  # shapes and dtypes only: no buffer holds a byte
        in_bytes = out_bytes = 0
    sim.check_memory(what, {"inputs": devices * in_bytes, "outputs": devices * out_bytes,
                            "messages": devices * in_bytes, "trace": messages * sim.MESSAGE_BYTES}, max_memory_bytes)


def _inputs(point: Point, mesh: sim.Mesh, axis_name: Any, dtype: np.dtype, per_device: int,
            count: int) -> tuple[np.ndarray, ...]:
    """Every device's operand, stacked (device d's block is rows d*per_device:+per_device), drawn from the seed,
    and whatever else the collective's `Sweep.inputs` makes of it (ragged's output buffers, offsets, sizes)."""
    rng = np.random.default_rng(point.seed)
    total = len(mesh.devices) * per_device
    if point.payload == "abstract":  # the operand and the buffers made like it (ragged's output) are abstract
        x = sim.memory.hollow_empty((total,), dtype)
        index = np.array([mesh.axis_index(d, axis_name) for d in mesh.devices], dtype=np.int32)
        return OPERATIONS[point.collective].inputs(x, index, count, per_device // count)
    if layouts.is_any_float(dtype):
        x = rounded(rng.standard_normal(total, dtype=np.float64 if dtype.itemsize > 4 else np.float32), dtype)
    else:
        x = rng.integers(max(-9, np.iinfo(dtype).min), 10, total).astype(dtype)
    index = np.array([mesh.axis_index(d, axis_name) for d in mesh.devices], dtype=np.int32)
    return OPERATIONS[point.collective].inputs(x, index, count, per_device // count)
