"""Global arrays cut into device blocks and put back together, with the global outputs allocated once.

A device program's results are known only after it has run, so the first call of a `ShardMapped`
assembles each global output by copying every device's block into a new array. It also keeps each
output's global shape, dtype and spec for the inputs' signature, as `jax.jit` caches output avals per
input signature. A later call with the same signature allocates each global output before the run
(`prepare`) and reserves, in the memory of each device whose block is written, the region of the global
array that is its block, when that region is one contiguous run (`P('x')` over rows; not
`P(None, 'x')`). The collective that allocates a result of that dtype and shape in row-major order
takes the region (`LocalMemory.alloc`), so the values its messages carry land in the global output.

After the run (`assemble`), an output is the pre-allocated array when each device's block either is its
region (nothing to copy) or lies elsewhere while no allocation took its region (the block is copied in,
as on a first call). If an allocation took the region for another buffer (an intermediate of the output's
shape, or a result computed after it), that buffer keeps its bytes and the output is assembled into a
new array instead: nothing is ever written behind a device memory's back. A returned output whose blocks
were written in place is those devices' memory: the run's memories alias the arrays it returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from sim._errors import InvalidArgumentError
from sim.memory._buffer import address_of
from sim.memory._memory import LocalMemory
from sim.memory._spec import PartitionSpec
from sim.network._mesh import Mesh
from sim.program._tree import leaves


@dataclass(frozen=True)
class Aval:
    """A global output's spec, shape and dtype, as a call produced it; `reserve` says whether its blocks
    were fresh allocations in device memory then (a collective's result), worth a reserved region."""

    spec: PartitionSpec
    shape: tuple[int, ...]
    dtype: np.dtype
    reserve: bool = field(default=True, compare=False)


@dataclass
class Prepared:
    """A global output allocated before a run; `reserved[d]` is device d's region, offered to its memory,
    and `taken` the devices whose region an allocation took."""

    aval: Aval
    array: np.ndarray
    reserved: dict[int, np.ndarray]
    taken: set[int] = field(default_factory=set)
    in_place: bool = False  # set by `assemble`: every writer's block was its region (nothing copied)


def block_index(mesh: Mesh, device: int, spec: PartitionSpec, shape: tuple[int, ...], path: str) -> tuple[slice, ...]:
    """The block of a global array of `shape` that `device` holds under `spec`."""
    index = []
    for entry, block in _block_sizes(mesh, spec, shape, path):
        start = 0 if entry is None else mesh.axis_index(device, entry) * block
        index.append(slice(None) if entry is None else slice(start, start + block))
    return tuple(index)


def block_indices(mesh: Mesh, spec: PartitionSpec, shape: tuple[int, ...], path: str) -> list[tuple[slice, ...]]:
    """`block_index` of every device, in device order, each device's position along the spec's axes read off
    the mesh's grid at once."""
    whole = slice(None)
    per_dim: list[list[slice] | None] = []
    for entry, block in _block_sizes(mesh, spec, shape, path):
        if entry is None:
            per_dim.append(None)
            continue
        starts = (_axis_indices(mesh, entry) * block).tolist()
        per_dim.append([slice(start, start + block) for start in starts])
    return [tuple(whole if slices is None else slices[d] for slices in per_dim) for d in mesh.devices]


def row_blocks(mesh: Mesh, spec: PartitionSpec, shape: tuple[int, ...], path: str) -> tuple[int, list[int]] | None:
    """When every device's block under `spec` is a run of whole leading rows (`spec` splits dimension 0 at
    most): how many blocks the array cuts into along dimension 0, and each device's block number, by device.
    None when `spec` splits a later dimension. Raises as `block_indices` does."""
    sizes = _block_sizes(mesh, spec, shape, path)
    if any(entry is not None for entry, _ in sizes[1:]):
        return None
    if not sizes or sizes[0][0] is None:
        return 1, [0] * mesh.size
    entry = sizes[0][0]
    return mesh.axis_size(entry), _axis_indices(mesh, entry).tolist()


def _block_sizes(mesh: Mesh, spec: PartitionSpec, shape: tuple[int, ...], path: str) -> list[tuple[Any, int]]:
    """For each dimension `spec` names: its entry (None: whole) and the block length along it."""
    if len(spec) > len(shape):
        raise InvalidArgumentError(f"{path}: spec {spec!r} has {len(spec)} entries but the array has rank {len(shape)}")
    sizes: list[tuple[Any, int]] = []
    for dim, entry in enumerate(spec):
        if entry is None:
            sizes.append((None, shape[dim]))
            continue
        count = mesh.axis_size(entry)
        if shape[dim] % count:
            raise InvalidArgumentError(
                f"{path}: dimension {dim} of size {shape[dim]} must be divisible by the {count} devices of {entry!r}"
            )
        sizes.append((entry, shape[dim] // count))
    return sizes


def _axis_indices(mesh: Mesh, axis_name: Any) -> np.ndarray:
    """Every device's index along `axis_name` (row-major over a tuple of names), by device id (read-only, kept
    per mesh shape and axis name)."""
    return _indices_along(tuple(mesh.shape.items()), mesh.axis_names_of(axis_name))


@lru_cache(maxsize=1024)
def _indices_along(shape: tuple[tuple[str, int], ...], names: tuple[str, ...]) -> np.ndarray:
    """`_axis_indices` on a mesh of `shape` ((name, size) pairs) along `names`.

    >>> _indices_along((('x', 2), ('y', 3)), ('y',)).tolist()
    [0, 1, 2, 0, 1, 2]
    """
    sizes = dict(shape)
    coords = dict(zip(sizes, np.unravel_index(np.arange(math.prod(sizes.values())), tuple(sizes.values()))))
    index = np.zeros(math.prod(sizes.values()), np.int64)
    for name in names:
        index = index * sizes[name] + coords[name]
    index.flags.writeable = False
    return index


def prepare(mesh: Mesh, memories: list[LocalMemory], avals: dict[str, Aval]) -> dict[str, Prepared]:
    """Allocate each global output in `avals` (by output path) whose blocks can be reserved, and reserve its
    writers' regions; the others are assembled as on a first call."""
    prepared = {}
    for path, aval in avals.items():
        if not aval.reserve:
            continue
        array = np.zeros(aval.shape, aval.dtype)  # fresh zero pages: an allocation's zeros, never written twice
        regions = {d: region for d, region in zip(_writers(mesh, aval.spec), _regions(mesh, aval, array, path))
                   if region.size and region.flags.c_contiguous}
        if regions:
            for device, region in regions.items():
                memories[device].reserve(region)
            prepared[path] = Prepared(aval, array, regions)
    return prepared


def settle(memories: list[LocalMemory], prepared: dict[str, Prepared]) -> None:
    """After a run: withdraw the reservations nothing took and note, per output, the regions that were taken."""
    if not prepared:  # nothing was reserved
        return
    for device, memory in enumerate(memories):
        untaken = memory.release()
        for output in prepared.values():
            region = output.reserved.get(device)
            if region is not None and not any(r is region for r in untaken):
                output.taken.add(device)


def assemble(mesh: Mesh, spec: PartitionSpec, path: str, per_device: tuple,
             prepared: Prepared | None = None, plans: dict | None = None) -> np.ndarray:
    """Put per-device blocks together (into `prepared` when it fits); blocks along axes `spec` leaves out must
    all be equal. When every block is its region of `prepared`, `prepared.in_place` says so. `plans` keeps
    how blocks of each spec, shape and dtype are put together on this mesh (`_Assembly`) for later calls."""
    blocks = [b if b.__class__ is np.ndarray else np.asarray(b) for b in per_device]
    first = blocks[0]
    shape, dtype = first.shape, first.dtype
    for d, block in enumerate(blocks):
        if block.shape != shape or block.dtype != dtype:
            raise InvalidArgumentError(
                f"{path}: device {d} returned {block.dtype}{list(block.shape)} but device 0 returned "
                f"{first.dtype}{list(first.shape)}; every device must return the same shape and dtype"
            )
    plan = plans.get((spec, shape, dtype)) if plans is not None else None
    if plan is None:
        plan = _assembly(mesh, spec, path, first)
        if plans is not None:
            plans[(spec, shape, dtype)] = plan
    if plan.replicated:
        _check_replicas(mesh, spec, path, blocks)
    aval, writers = plan.aval, plan.writers
    fits = prepared is not None and prepared.aval == aval
    # which writers' blocks are already their regions of the prepared array (nothing to copy there)
    if fits:
        taken, reserved = prepared.taken, prepared.reserved
        addresses = _region_addresses(mesh, aval, prepared.array, path, plan.rows)
        placed = [d in taken and _is_view(blocks[d], reserved[d], at) for d, at in zip(writers, addresses)]
    else:
        placed = [False] * len(writers)
    fits = fits and all(p or d not in prepared.taken for d, p in zip(writers, placed))
    out = prepared.array if fits else np.empty(aval.shape, aval.dtype)  # every element is written below
    if fits and all(placed):
        prepared.in_place = True
        return out
    if not fits and plan.in_order:  # the blocks, in device order, are the array's rows
        np.concatenate([blocks[d] for d in writers], out=out)
        return out
    for d, region, done in zip(writers, _regions(mesh, aval, out, path), placed):
        if not (fits and done):  # no block is a view of a new array
            region[...] = blocks[d]
    return out


@dataclass(frozen=True)
class _Assembly:
    """How `assemble` puts together blocks of one shape and dtype under one spec on one mesh shape: the global
    aval, the writers (`_writers`), whether some mesh axis is left out (replicas to check), whether the
    writers' blocks in order are the array's rows in order, and the writers' block numbers among the
    array's runs of rows with their count (None: the blocks are not runs of rows)."""

    aval: Aval
    writers: list[int]
    replicated: bool
    in_order: bool
    rows: tuple[int, list[int]] | None


def _assembly(mesh: Mesh, spec: PartitionSpec, path: str, first: np.ndarray) -> _Assembly:
    """The `_Assembly` of blocks like `first` under `spec`; raises where `spec` has more entries than their rank."""
    if len(spec) > first.ndim:
        raise InvalidArgumentError(f"{path}: out_specs entry {spec!r} has more entries than rank {first.ndim}")
    global_shape = list(first.shape)
    for dim, entry in enumerate(spec):
        if entry is not None:
            global_shape[dim] *= mesh.axis_size(entry)
    aval = Aval(spec, tuple(global_shape), first.dtype)
    replicated = any(a not in spec.axes() for a in mesh.axis_names)
    rows = _row_numbers(mesh, aval, path)
    in_order = rows is not None and rows[1] == list(range(rows[0]))
    return _Assembly(aval, _writers(mesh, spec), replicated, in_order, rows)


def _row_numbers(mesh: Mesh, aval: Aval, path: str) -> tuple[int, list[int]] | None:
    """How many runs of whole rows an array of `aval` cuts into, and each writer's block number among them, in
    `_writers` order (None: its blocks are not runs of rows)."""
    rows = row_blocks(mesh, aval.spec, aval.shape, path) if len(aval.shape) else None
    return None if rows is None else (rows[0], [rows[1][d] for d in _writers(mesh, aval.spec)])


def avals_of(mesh: Mesh, memories: list[LocalMemory], paths: Any, specs: Any, results: list[Any],
             outputs: Any, prepared: dict[str, Prepared] | None = None) -> dict[str, Aval]:
    """Each output's aval by path, for `prepare` to allocate it again; the per-device `results` say which
    outputs were fresh allocations (a region reserved for any other would only be taken by the wrong one).
    An output assembled in place (`Prepared.in_place`) was: each block is the allocation that took its region."""
    per_device = [[result] if isinstance(result, np.ndarray) else leaves(result) for result in results]
    found = {}
    prepared = prepared or {}
    for k, (path, spec, out) in enumerate(zip(leaves(paths), leaves(specs, _is_spec), leaves(outputs))):
        here = prepared.get(path)
        writers = _writers(mesh, spec)
        if here is not None and here.in_place:
            fresh = all(per_device[d][k].flags.writeable for d in writers)
        else:
            fresh = all(per_device[d][k].flags.writeable and memories[d].find(per_device[d][k]) is not None
                        for d in writers)
        found[path] = Aval(spec, out.shape, out.dtype, fresh)
    return found


def _region_addresses(mesh: Mesh, aval: Aval, array: np.ndarray, path: str,
                      rows: tuple[int, list[int]] | None) -> list[int]:
    """Where each writer's block of `array` starts in the process's memory, in `_writers` order; `rows` is
    `_Assembly.rows`."""
    if rows is None:
        return [address_of(region) for region in _regions(mesh, aval, array, path)]
    count, numbers = rows
    start, block_bytes = address_of(array), array.nbytes // count
    return [start + number * block_bytes for number in numbers]


def _regions(mesh: Mesh, aval: Aval, array: np.ndarray, path: str) -> list[np.ndarray]:
    """The writers' blocks of `array` (of `aval`'s shape), as views, in `_writers` order."""
    writers = _writers(mesh, aval.spec)
    rows = row_blocks(mesh, aval.spec, aval.shape, path) if array.ndim else None
    if rows is not None:  # runs of whole rows: one reshape, then a block by its number
        count, which = rows
        stack = array.reshape((count, aval.shape[0] // count, *aval.shape[1:]))
        return [stack[which[d]] for d in writers]
    # `...` keeps a 0-d block an array view (indexing with `()` alone would give a read-only scalar)
    indices = block_indices(mesh, aval.spec, aval.shape, path)
    return [array[(*indices[d], ...)] for d in writers]


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether `a` and `b` (one shape and dtype) hold the same bytes, NaN payloads and signed zeros included,
    compared in place (no copy of either)."""
    if a.dtype.hasobject or a.dtype.itemsize not in (1, 2, 4, 8):
        return a.tobytes() == b.tobytes()
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    return bool(np.array_equal(a.view(unsigned), b.view(unsigned)))


def _check_replicas(mesh: Mesh, spec: PartitionSpec, path: str, blocks: list[np.ndarray]) -> None:
    """Devices along mesh axes `spec` leaves out must hold the same block as their twin at index 0."""
    unmapped = [a for a in mesh.axis_names if a not in spec.axes()]
    if not unmapped:  # every device writes its own block: nothing is replicated
        return
    for d, block in enumerate(blocks):
        coords = mesh.coords(d)
        if not any(coords[a] for a in unmapped):
            continue
        twin = _twin(mesh, d, unmapped)
        if not same_bytes(block, blocks[twin]):
            axis = next(a for a in unmapped if coords[a] != mesh.coords(twin)[a])
            raise InvalidArgumentError(
                f"{path}: out_specs entry {spec!r} claims the output is replicated along mesh axis {axis!r}, "
                f"but device {d} and device {twin} hold different values"
            )


def _is_spec(value: Any) -> bool:
    return isinstance(value, PartitionSpec)


def _writers(mesh: Mesh, spec: PartitionSpec) -> list[int]:
    """The devices whose blocks make up the global array: index 0 along every axis `spec` leaves out."""
    return list(_writers_of(tuple(mesh.shape.items()), frozenset(spec.axes())))


@lru_cache(maxsize=1024)
def _writers_of(shape: tuple[tuple[str, int], ...], split: frozenset[str]) -> tuple[int, ...]:
    """`_writers` on a mesh of `shape` ((name, size) pairs) for a spec splitting over the axes `split`.

    >>> _writers_of((('x', 2), ('y', 2)), frozenset({'y'}))
    (0, 1)
    """
    grid = np.arange(math.prod(size for _, size in shape)).reshape(tuple(size for _, size in shape))
    first = tuple(slice(0, 1) if name not in split else slice(None) for name, _ in shape)
    return tuple(grid[first].reshape(-1).tolist())


def _twin(mesh: Mesh, device: int, axes: list[str]) -> int:
    """The device with the same coordinates as `device` except 0 along `axes`."""
    coords = mesh.coords(device)
    twin = 0
    for name in mesh.axis_names:
        twin = twin * mesh.shape[name] + (0 if name in axes else coords[name])
    return twin


def _is_view(block: np.ndarray, region: np.ndarray, address: int | None = None) -> bool:
    """Whether `block` is exactly `region` (which starts at `address`, if given): the same bytes seen the same
    way."""
    return (address_of(block) == (address_of(region) if address is None else address)
            and block.shape == region.shape and block.strides == region.strides and block.dtype == region.dtype)
