"""Running a compiled function: one program per device of its shardings, on the simulated clock.

`probe` runs it once on zeros to learn its results and how it reads AUTO arguments; `execute` runs it on
real arguments, relaying out uncommitted ones first, and writes each result in its output layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import layouts
from layouts import Format, Layout
from sim._errors import InvalidArgumentError
from sim.engine._driver import current
from sim.engine._engine import Simulation
from sim.memory._array import Array, Shard
from sim.memory._auto import Read, layout_from_reads, recorder
from sim.memory._buffer import Buffer
from sim.memory._memory import LocalMemory
from sim.memory._sharding import NamedSharding, SingleDeviceSharding
from sim.network._mesh import Mesh
from sim.program._blocks import same_bytes
from sim.program._copy import relayout
from sim.program._shard_map import Run


@dataclass(frozen=True)
class Plan:
    """What a compiled function needs to run: argument names, global shapes and dtypes, formats."""

    fn: Callable[..., Any]
    names: list[str]
    shapes: list[tuple[tuple[int, ...], np.dtype]]
    in_formats: list[Format]
    out_formats: list[tuple[Format, tuple[int, ...]]]


def devices_of(formats: Sequence[Format]) -> tuple[Mesh, list[int]]:
    """The mesh to simulate and the device id each of its devices stands for.

    Raises:
        InvalidArgumentError: the formats name different meshes, or different single devices.
    """
    meshes = {id(f.sharding.mesh): f.sharding.mesh for f in formats if isinstance(f.sharding, NamedSharding)}
    singles = sorted({f.sharding.device for f in formats if isinstance(f.sharding, SingleDeviceSharding)})
    if len(meshes) > 1 or (meshes and singles) or len(singles) > 1:
        where = [repr(f.sharding) for f in formats]
        raise InvalidArgumentError(f"every argument and result must live on the same devices; got shardings {where}")
    if meshes:
        mesh = next(iter(meshes.values()))
        return mesh, list(mesh.devices)
    return Mesh({"device": 1}), [singles[0] if singles else 0]


def probe(plan: Plan, auto: Sequence[bool]) -> tuple[list[Layout], Any, list[list[Read]]]:
    """Run `plan.fn` once on zeros; return the argument layouts (AUTO ones resolved), device 0's results
    (an array or a tuple of arrays, strides as produced) and the reads recorded per argument."""
    mesh, ids = devices_of(plan.in_formats)
    reads: list[list[Read]] = [[] for _ in plan.names]
    chosen = [Layout.row_major(len(s)) if a else f.layout for a, f, (s, _) in zip(auto, plan.in_formats, plan.shapes)]

    def program(real: int) -> Callable[[], Any]:
        blocks = []
        for i, (fmt, (shape, dtype)) in enumerate(zip(plan.in_formats, plan.shapes)):
            block = np.zeros(fmt.sharding.shard_shape(shape), dtype)
            block = layouts.decode(layouts.encode(block, chosen[i]), dtype, block.shape, chosen[i])
            blocks.append(recorder(block, reads[i]) if auto[i] else block)
        return lambda: plan.fn(*blocks)

    simulation = _simulation(mesh, ids)
    first = simulation.run([program(real) for real in ids])[0]
    results = tuple(np.asarray(r) for r in first) if isinstance(first, (tuple, list)) else np.asarray(first)
    resolved = [layout_from_reads(len(s), r) if a else layout for a, layout, r, (s, _) in
                zip(auto, chosen, reads, plan.shapes)]
    return resolved, results, reads


def execute(plan: Plan, arrays: Sequence[Array]) -> Run:
    """Run `plan.fn` on `arrays` (already on the compiled shardings); outputs are Arrays in the output formats."""
    mesh, ids = devices_of(plan.in_formats)
    simulation = _simulation(mesh, ids)

    def program(real: int) -> Callable[[], Any]:
        def run() -> list[Buffer]:
            views = [_argument(name, array, fmt.layout, real)
                     for name, array, fmt in zip(plan.names, arrays, plan.in_formats)]
            result = plan.fn(*views)
            leaves = list(result) if isinstance(result, (tuple, list)) else [result]
            return [_written(k, leaf, fmt, shape)
                    for k, (leaf, (fmt, shape)) in enumerate(zip(leaves, plan.out_formats))]
        return run

    buffers = simulation.run([program(real) for real in ids])
    committed = any(a.committed for a in arrays)
    outputs = tuple(_assemble(k, fmt, shape, ids, simulation.memories, [b[k] for b in buffers], committed)
                    for k, (fmt, shape) in enumerate(plan.out_formats))
    return Run(outputs, simulation.trace, simulation.now_s, simulation)


def _simulation(mesh: Mesh, ids: list[int]) -> Simulation:
    """A simulation over `mesh` whose memories carry the device ids `ids` (a single device keeps its id)."""
    return Simulation(mesh, check_vma=False, memories=[LocalMemory(real) for real in ids])


def _argument(name: str, array: Array, layout: Layout, real: int) -> np.ndarray:
    """Device `real`'s block of `array`, relaid out into `layout` (a traced copy) when it differs."""
    shard = array.shard(real)
    if shard.buffer.layout == layout:
        return shard.data
    return relayout(shard.data, layout, f"argument {name}", device=real)


def _written(k: int, leaf: Any, fmt: Format, shape: tuple[int, ...]) -> Buffer:
    """Result `k` as a buffer in this device's memory with the output layout."""
    context = current()
    value = np.asarray(leaf)
    block = fmt.sharding.shard_shape(shape)
    if value.shape != block:
        raise InvalidArgumentError(f"result {k} on device {context.memory.device} has shape {list(value.shape)}; "
                                   f"the function was compiled for blocks of {list(block)}")
    found = context.memory.find(value)
    if found is not None and found.layout == fmt.layout:
        return found
    return context.memory.store(value, fmt.layout)


def _assemble(k: int, fmt: Format, shape: tuple[int, ...], ids: list[int], memories: list[LocalMemory],
              buffers: list[Buffer], committed: bool) -> Array:
    """Result `k` as an Array; devices that hold the same block must hold the same values."""
    indices = fmt.sharding.indices(shape)
    shards = [Shard(real, indices[real], memory, buffer) for real, memory, buffer in zip(ids, memories, buffers)]
    first: dict[tuple, Shard] = {}
    for shard in shards:
        key = tuple((s.start, s.stop) for s in shard.index)
        twin = first.setdefault(key, shard)
        if not same_bytes(twin.data, shard.data):
            raise InvalidArgumentError(
                f"result {k}: out sharding {fmt.sharding!r} says devices {twin.device} and {shard.device} hold "
                f"the same block, but their values differ; name the varying mesh axis in its PartitionSpec")
    return Array(shape, buffers[0].dtype, fmt, committed, shards)
