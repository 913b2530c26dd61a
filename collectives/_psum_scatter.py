"""`psum_scatter`: reduce-scatter; member j ends with the sum of every member's chunk j along `scatter_dimension`."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

import sim
from collectives._algorithms import SCATTER, check_algorithm, resolve
from collectives._allreduce import fold_arrivals, laid_out, ring_reduce_scatter
from collectives._common import (
    axis_index,
    canonical_axis,
    group_of,
    map_tree,
    operand,
    out_layout_of,
    pack_slice,
    same_operands,
)
from collectives._definition import (
    AXIS_INDEX_GROUPS,
    AXIS_NAME,
    Definition,
    JaxBinding,
    Transposition,
    Vma,
    algorithm,
    flag,
    integer,
)
from collectives._halving import chunk_bounds, halving_reduce_scatter
from collectives._strategy import split_shape
from collectives._vma import typed
from layouts import Layout

_OP = "psum_scatter"
_ALGORITHMS = SCATTER


@dataclass(frozen=True)
class _Args:
    buffer: sim.Buffer
    scatter_dimension: int
    tiled: bool
    algorithm: str
    out_layout: Layout


def psum_scatter(x: Any, axis_name: Any, *, scatter_dimension: int = 0, axis_index_groups: Any = None,
                 tiled: bool = False, algorithm: str = "direct", out_layout: Any = None) -> Any:
    """Sum `x` over the group and leave member j only chunk j of the sum along `scatter_dimension`.

    Untiled, `x.shape[scatter_dimension]` must equal the group size and chunk j is index j (that dimension
    removed); tiled, it must be divisible by the group size and chunk j is the j-th block (rank kept).
    `scatter_dimension` must be non-negative, as JAX cannot lower a negative one. 'direct' sends chunk j
    of every member to member j, which adds them in group order to 0 (XLA:CPU's order, equal to JAX bit
    for bit); 'ring' folds chunk j in the member order j+1, j+2, ..., j (mod n) around the ring (n - 1
    steps); 'recursive_halving' (log2(n) steps, group size a power of two) halves the chunks each member
    is responsible for at each step, folding pairs of partial sums as a balanced tree, lower group index
    first; 'auto' picks the fastest by `collectives._cost` and records it in `sim.CallRecord.algorithm`.
    Integers come out the same from every algorithm; floats within `oracles._reordered`'s bound.
    `x` may be a pytree.

    `x` may sit in memory in any layout: a chunk whose bytes are one contiguous run is sent straight
    from memory, any other is packed first by a timed step. The result is written in `out_layout` (a
    `layouts.Layout`, default row-major), an arrival in another order unpacked by a timed step; 'ring'
    works in row-major order, unpacking a result laid out otherwise at the end. Values never change.

    Example on a 2-device mesh {'x': 2}: device 0 holds [1, 2], device 1 holds [10, 20];
    `psum_scatter(x, 'x')` gives 11 on device 0 and 22 on device 1; with `tiled=True`, [11] and [22].

    Raises:
        InvalidArgumentError: unknown axis name, bad groups, a scatter dimension out of range or not fitting
            the group size, shapes or dtypes that differ within a group, unknown algorithm, an `out_layout`
            of another rank than the result.
        InvalidTypeError: a non-numeric or bool x (JAX's reduce-scatter adds, and add rejects bool), an
            `out_layout` that is not a `layouts.Layout` or None.
    """
    return _psum_scatter(x, axis_name, scatter_dimension, axis_index_groups, tiled, algorithm, out_layout)


def _psum_scatter(x: Any, axis_name: Any, scatter_dimension: int, axis_index_groups: Any, tiled: bool,
                  algorithm: str, out_layout: Any = None) -> Any:
    params = {"axis_name": axis_name, "scatter_dimension": scatter_dimension, "axis_index_groups": axis_index_groups,
              "tiled": tiled}
    return map_tree(lambda leaf: typed(PSUM_SCATTER, axis_name, [leaf], lambda: _leaf(
        leaf, axis_name, scatter_dimension, axis_index_groups, tiled, algorithm, out_layout), params), x)


def _leaf(x: Any, axis_name: Any, scatter_dimension: int, axis_index_groups: Any, tiled: bool,
          algorithm: str, out_layout: Any) -> np.ndarray:
    context, group = group_of(_OP, axis_name, axis_index_groups)
    device = context.device
    x = operand(_OP, device, "x", x)
    if x.dtype.kind == "b":
        raise sim.InvalidTypeError(f"device {device}: {_OP}: x has dtype bool; it must be a number type "
                                   "(jax.lax.psum_scatter adds, and add does not accept bool)")
    if x.ndim == 0:
        raise sim.InvalidArgumentError(f"device {device}: {_OP}: x must have rank >= 1, got a scalar")
    dim = canonical_axis(_OP, device, "scatter_dimension", scatter_dimension, x.ndim, negative=False)
    _check_fits(device, x.shape[dim], dim, group.size, bool(tiled))
    check_algorithm(_OP, device, algorithm, group.size, _ALGORITHMS)
    rank = x.ndim if tiled else x.ndim - 1
    layout = out_layout_of(_OP, device, out_layout, rank) or Layout.row_major(rank)
    args = _Args(context.memory.resident(x), dim, bool(tiled), algorithm, layout)
    params = (("axis_name", axis_name), ("scatter_dimension", dim), ("tiled", bool(tiled)), ("algorithm", algorithm))
    return context.collective(sim.Collective(_OP, group, params, args, _protocol, same_operands(_OP, group)))


def _check_fits(device: int, size: int, dim: int, group_size: int, tiled: bool) -> None:
    if tiled and size % group_size:
        raise sim.InvalidArgumentError(
            f"device {device}: {_OP}: x.shape[scatter_dimension={dim}]={size} must be divisible by the group "
            f"size {group_size} when tiled=True")
    if not tiled and size != group_size:
        raise sim.InvalidArgumentError(
            f"device {device}: {_OP}: x.shape[scatter_dimension={dim}]={size} must equal the group size "
            f"{group_size} when tiled=False")


def _chunks(source: np.ndarray, args: _Args, n: int) -> list[np.ndarray]:
    """The n chunks of `source` along the scatter dimension (views; untiled, that dimension kept as 1)."""
    step = source.shape[args.scatter_dimension] // n if args.tiled else 1
    return [source[axis_index(source.shape, args.scatter_dimension, slice(j * step, (j + 1) * step))]
            for j in range(n)]


def _protocol(port: sim.Port, args: _Args) -> Generator:
    """Chunk j of every member goes to member j (direct) or around the ring (ring)."""
    parts = _chunks(port.memory.view(args.buffer), args, port.group.size)
    shape = _out_shape(parts[0].shape, args)
    n = port.group.size
    algorithm = resolve(port, _OP, args.algorithm, _ALGORITHMS, sum(p.nbytes for p in parts), (n,))
    if algorithm == "ring":
        mine = yield from ring_reduce_scatter(port, parts, "sum")
        return (yield from laid_out(port, mine.reshape(shape), args.out_layout, phase="result"))
    if algorithm == "recursive_halving":
        return (yield from _halving(port, parts, shape, args.out_layout))
    for j, dst in enumerate(port.group.members):
        payload, header = yield from pack_slice(port, parts[j], args.buffer.layout, chunk=j)
        port.send(dst, payload, header=header, chunk=j)
    return (yield from fold_arrivals(port, "sum", parts[0].dtype, shape, args.out_layout))


def _halving(port: sim.Port, parts: list[np.ndarray], shape: tuple[int, ...], layout: Layout) -> Generator:
    """Every chunk packed in row-major order into one flat vector, then reduce-scattered by recursive halving."""
    flat = port.memory.view(port.memory.alloc(parts[0].dtype, (sum(p.size for p in parts),)))
    bounds = chunk_bounds([p.size for p in parts])
    for c, part in enumerate(parts):
        values, _ = yield from pack_slice(port, part, Layout.row_major(part.ndim), chunk=c)
        flat[bounds[c]:bounds[c + 1]] = values.reshape(-1)
    mine = yield from halving_reduce_scatter(port, flat, bounds, "sum")
    return (yield from laid_out(port, mine.reshape(shape), layout, phase="result"))


def _out_shape(chunk_shape: tuple[int, ...], args: _Args) -> tuple[int, ...]:
    """A chunk's shape without the scatter dimension when untiled."""
    return chunk_shape if args.tiled else tuple(n for d, n in enumerate(chunk_shape) if d != args.scatter_dimension)


def _transpose(t: Transposition) -> list:
    """all_gather along the scattered dimension: every member's chunk of the cotangent goes to every member."""
    p = t.params
    return [t.ops.all_gather(t.ct, p["axis_name"], axis=p["scatter_dimension"],
                             axis_index_groups=p["axis_index_groups"], tiled=p["tiled"])]


PSUM_SCATTER = Definition(
    name="psum_scatter", function=psum_scatter, arrays=("x",),
    params=(AXIS_NAME, integer("scatter_dimension", 0), AXIS_INDEX_GROUPS, flag("tiled", False),
            algorithm(_ALGORITHMS)),
    vma=Vma.KEEP, sums=True, transpose=_transpose,
    jax=JaxBinding("psum_scatter", ("reduce_scatter",), lambda jax, p: lambda x: jax.lax.psum_scatter(x, **p)),
    strategy=lambda st, axes, **options: split_shape(st, axes, "scatter_dimension", negative=False),
)
