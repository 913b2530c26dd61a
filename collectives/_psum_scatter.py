"""`psum_scatter`: reduce-scatter; member j ends with the sum of every member's chunk j along `scatter_dimension`."""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

import sim
from collectives import _batch_rules as batch_rules
from collectives import _bidirectional as bidirectional
from collectives import _hierarchical as hierarchical
from collectives import _multi_axis as multi_axis
from collectives._algorithm import (
    SUM_BOUND,
    Algorithm,
    Pattern,
    added,
    auto_of,
    bidirectional_form,
    bidirectional_messages,
    bidirectional_steps,
    halving,
    lg,
    on_group,
    pairs,
    scattered,
)
from collectives._algorithm import part as share
from collectives._algorithms import axes_shape, check_algorithm, named, resolve, ring_team
from collectives._allreduce import fold_arrivals
from collectives._arithmetic import fold
from collectives._common import (
    axis_index,
    canonical_axis,
    group_of,
    laid_out,
    map_tree,
    operand,
    out_layout_of,
    pack_slice,
    row_major_everywhere,
    same_operands,
)
from collectives._definition import (
    AXIS_INDEX_GROUPS,
    AXIS_NAME,
    Definition,
    JaxBinding,
    Transposition,
    Vma,
    flag,
    integer,
)
from collectives._facts import MOVES, WHOLE, Reduction, Sweep
from collectives._halving import chunk_bounds, halving_reduce_scatter
from collectives._in_network import REDUCE_SCATTER as IN_NETWORK
from collectives._in_network import check_network, reduce_scatter
from collectives._joint import Cut
from collectives._ring_lanes import reduce_scatter_lanes, ring_reduce_scatter
from collectives._strategy import split_shape
from collectives._vma import typed
from layouts import Layout

_OP = "psum_scatter"


@dataclass(frozen=True)
class _Args:
    buffer: sim.Buffer
    scatter_dimension: int
    tiled: bool
    algorithm: str
    out_layout: Layout
    shape: tuple[int, ...] = ()


def psum_scatter(x: Any, axis_name: Any, *, scatter_dimension: int = 0, axis_index_groups: Any = None,
                 tiled: bool = False, algorithm: str = "direct", out_layout: Any = None) -> Any:
    """Sum `x` over the group and leave member j only chunk j of the sum along `scatter_dimension`.

    Untiled, `x.shape[scatter_dimension]` must equal the group size and chunk j is index j (that dimension
    removed); tiled, it must be divisible by the group size and chunk j is the j-th block (rank kept).
    `scatter_dimension` must be non-negative, as JAX cannot lower a negative one. 'direct' sends chunk j
    of every member to member j, which adds them in group order to 0 (XLA:CPU's order, equal to JAX bit
    for bit); 'ring' folds chunk j in the member order j+1, j+2, ..., j (mod n) around the ring (n - 1
    steps); 'bidirectional_ring' (n // 2 steps, `collectives._bidirectional`) folds chunk j along two chains
    that meet at member j, one from each side of the ring, both directions of every link busy at each step
    (for even n, the member opposite sends half its term each way); 'recursive_halving' (log2(n) steps,
    group size a power of two) halves the chunks each member is responsible for at each step, folding pairs
    of partial sums as a balanced tree, lower group index first; 'multi_axis' (several mesh axes: each
    chunk cut into one part per axis, the parts reduced at once by bidirectional rings along the axes, each
    in its own rotation of them, `collectives._multi_axis`; over one axis 'bidirectional_ring');
    'hierarchical' (`collectives._hierarchical`) folds inside each node first, over its fast switch, then
    round a ring of the members of the same local rank across nodes, so the slower fabric carries one share
    per member (without nodes: one direct step); 'in_network' (only where the network's switch reduces:
    `sim.Network.switch_reduces`) sends every chunk into the switch, which adds chunk j in group order
    ('direct''s bits) and sends it to member j alone (`collectives._in_network`); 'auto' picks the fastest by
    `collectives._cost` and records it in `sim.CallRecord.algorithm`.
    Integers come out the same from every algorithm; floats within `oracles._reordered`'s bound.
    `x` may be a pytree.

    `x` may sit in memory in any layout: a chunk whose bytes are one contiguous run is sent straight
    from memory, any other is packed first by a timed step. The result is written in `out_layout` (a
    `layouts.Layout`, default row-major), an arrival in another order unpacked by a timed step; 'ring'
    works in row-major order, unpacking a result laid out otherwise at the end. Values never change.

    Example on a 2-device mesh {'x': 2}: device 0 holds [1, 2], device 1 holds [10, 20];
    `psum_scatter(x, 'x')` gives 11 on device 0 and 22 on device 1; with `tiled=True`, [11] and [22].
    With `algorithm='in_network'` on a switch that reduces, device 0 sends 1 and 2, device 1 sends 10 and
    20 into the switch, which adds 1 + 10 and sends 11 to device 0 only, 2 + 20 and sends 22 to device 1.

    Raises:
        InvalidArgumentError: unknown axis name, bad groups, a scatter dimension out of range or not fitting
            the group size, shapes or dtypes that differ within a group, unknown algorithm, an `out_layout`
            of another rank than the result, 'in_network' on a network whose switch does not reduce.
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
    x = operand(_OP, device, "x", x, reduces=True)
    if x.dtype.kind == "b":
        raise sim.InvalidTypeError(f"device {device}: {_OP}: x has dtype bool; it must be a number type "
                                   "(jax.lax.psum_scatter adds, and add does not accept bool)")
    if x.ndim == 0:
        raise sim.InvalidArgumentError(f"device {device}: {_OP}: x must have rank >= 1, got a scalar")
    dim = canonical_axis(_OP, device, "scatter_dimension", scatter_dimension, x.ndim, negative=False)
    _check_fits(device, x.shape[dim], dim, group.size, bool(tiled))
    check_network(_OP, device, check_algorithm(_OP, device, algorithm, group.size, ALGORITHMS), context.mesh)
    rank = x.ndim if tiled else x.ndim - 1
    layout = out_layout_of(_OP, device, out_layout, rank) or Layout.row_major(rank)
    args = _Args(context.memory.resident(x), dim, bool(tiled), algorithm, layout,
                 axes_shape(context.mesh, axis_name, axis_index_groups))
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
    d = args.scatter_dimension
    if source.flags.c_contiguous and d == 0 and source.size:  # consecutive rows: cut when read (`Cut`)
        shape = (step, *source.shape[1:])
        return Cut.bounded(source.reshape(-1), np.arange(n + 1) * math.prod(shape), shape=shape)
    if source.flags.c_contiguous:  # the same views, cut by one reshape (splitting one axis never copies)
        return list(np.moveaxis(source.reshape(source.shape[:d] + (n, step) + source.shape[d + 1:]), d, 0))
    return [source[axis_index(source.shape, args.scatter_dimension, slice(j * step, (j + 1) * step))]
            for j in range(n)]


def _protocol(port: sim.Port, args: _Args) -> Generator:
    """Chunk j of every member goes to member j (direct) or around the ring (ring)."""
    source = port.memory.view(args.buffer)
    parts = _chunks(source, args, port.group.size)
    shape = _out_shape(parts.shape if isinstance(parts, Cut) else parts[0].shape, args)
    algorithm = resolve(port, ALGORITHMS, args.algorithm, source.nbytes, args.shape)
    if algorithm is RING:
        mine = yield from ring_reduce_scatter(port, parts, "sum")
        return (yield from laid_out(port, mine.reshape(shape), args.out_layout, phase="result"))
    if algorithm is RECURSIVE_HALVING:
        return (yield from _halving(port, parts, shape, args.out_layout, source.dtype))
    if algorithm is HIERARCHICAL:
        return (yield from _hierarchical(port, parts, shape, args.out_layout))
    if algorithm is IN_NETWORK:
        return (yield from reduce_scatter(port, parts, shape, args.out_layout))
    if algorithm is MULTI_AXIS:
        return (yield from _multi_axis(port, parts, shape, args))
    if algorithm is BIDIRECTIONAL_RING:
        team = ring_team(port)
        arranged = parts if team.order is None else team.arrange(parts)  # a Cut stays one, uncut
        mine = yield from bidirectional.reduce_scatter(port, team, arranged, "sum", "reduce-scatter")
        return (yield from laid_out(port, mine.reshape(shape), args.out_layout, phase="result"))
    if _in_place(port):
        return (yield from _direct_rows(port, args, source.dtype, shape))
    for j, dst in enumerate(port.group.members):
        payload, header = yield from pack_slice(port, parts[j], args.buffer.layout, chunk=j)
        port.send(dst, payload, header=header, chunk=j)
    return (yield from fold_arrivals(port, "sum", source.dtype, shape, args.out_layout))


def _in_place(port: sim.Port) -> bool:
    """Whether every member's chunks are consecutive row-major parts of its operand and its result is
    row-major, and adding is free (decided once per call): then 'direct' sends and takes whole rows."""
    def decide() -> bool:
        return port.transport.costs.reduce_s(1) <= 0 and row_major_everywhere(
            port.group_args, lambda args: args.scatter_dimension == 0)
    return port.once("in_place", decide)


def _direct_rows(port: sim.Port, args: _Args, dtype: np.dtype, shape: tuple[int, ...]) -> Generator:
    """'direct' as one row per member (`Port.send_split`: chunk j to member j) and one column per member,
    folded in group order at once: the messages, the allocations and the bits of `fold_arrivals`."""
    source = port.memory.view(args.buffer)
    port.send_split(source, chunk=range(port.group.size))
    column = yield from port.recv_column()
    memory = port.memory
    out, _ = (memory.view(memory.alloc(dtype, shape, args.out_layout)) for _ in range(2))  # the result, an inbox
    out[...] = fold("sum", column.reshape((port.group.size, *shape)))
    return out


def _halving(port: sim.Port, parts: list[np.ndarray], shape: tuple[int, ...], layout: Layout, dtype: np.dtype
             ) -> Generator:
    """Every chunk packed in row-major order into one flat vector, then reduce-scattered by recursive halving."""
    # every member's chunks are of one shape: their bounds worked out once per call
    bounds, firsts = port.once(("halving bounds", shape), lambda: _bounds(parts))
    flat = port.memory.view(port.memory.alloc(dtype, (bounds[-1],)))
    start = int(parts.at[0]) if isinstance(parts, Cut) else 0
    if isinstance(parts, Cut) and bool(np.all(parts.at == firsts + start)):  # chunks in order
        flat[...] = parts.flat[start:start + bounds[-1]]  # the chunks' values, as copied one by one
    else:
        for c, part in enumerate(parts):
            values, _ = yield from pack_slice(port, part, Layout.row_major(part.ndim), chunk=c)
            flat[bounds[c]:bounds[c + 1]] = values.reshape(-1)
    mine = yield from halving_reduce_scatter(port, flat, bounds, "sum")
    return (yield from laid_out(port, mine.reshape(shape), layout, phase="result"))


def _bounds(parts: list[np.ndarray]) -> tuple[list[int], np.ndarray]:
    """Where each chunk starts in the flat vector and where the last ends (a list), and the starts (an array)."""
    bounds = chunk_bounds(parts.sizes if isinstance(parts, Cut) else [p.size for p in parts])
    return bounds, np.asarray(bounds[:-1], np.int64)


def _hierarchical(port: sim.Port, parts: list[np.ndarray], shape: tuple[int, ...], layout: Layout) -> Generator:
    """Direct reduce-scatter inside the node of the chunks of every member of each local rank, then a ring
    reduce-scatter of those among the members of the caller's local rank (`collectives._hierarchical`)."""
    order, (nodes, k) = hierarchical.grid(port)
    node, across = hierarchical.node_teams(port)
    pieces = yield from hierarchical.rank_pieces(port, parts, order, nodes, k)
    folded = yield from hierarchical.reduce_scatter(port, node, pieces, "sum", "intra-node reduce-scatter")
    if nodes > 1:
        [folded[0]] = yield from reduce_scatter_lanes(port, [(across, folded, "inter-node ")], "sum")
    return (yield from laid_out(port, folded[0].reshape(shape), layout, phase="result"))
def _multi_axis(port: sim.Port, parts: list[np.ndarray], shape: tuple[int, ...], args: _Args) -> Generator:
    """Every chunk packed in row-major order into one row of a flat table, then reduce-scattered over the
    named axes at once (`collectives._multi_axis`)."""
    terms = port.memory.view(port.memory.alloc(parts[0].dtype, (len(parts), parts[0].size)))
    for c, part in enumerate(parts):
        values, _ = yield from pack_slice(port, part, Layout.row_major(part.ndim), chunk=c)
        terms[c] = values.reshape(-1)
    mine = yield from multi_axis.reduce_scatter(port, terms, args.shape, "sum")
    return (yield from laid_out(port, mine.reshape(shape), args.out_layout, phase="result"))


def _out_shape(chunk_shape: tuple[int, ...], args: _Args) -> tuple[int, ...]:
    """A chunk's shape without the scatter dimension when untiled."""
    return chunk_shape if args.tiled else tuple(n for d, n in enumerate(chunk_shape) if d != args.scatter_dimension)


def _transpose(t: Transposition) -> list:
    """all_gather along the scattered dimension: every member's chunk of the cotangent goes to every member."""
    p = t.params
    return [t.ops.all_gather(t.ct, p["axis_name"], axis=p["scatter_dimension"],
                             axis_index_groups=p["axis_index_groups"], tiled=p["tiled"])]


# ---------------------------------------------------------------------------------------------- the records


def _scatter_form(steps: Any):
    """(steps(p)) alpha + ((p-1)/p) n beta: ring with p - 1 steps, recursive halving with lg(p)."""
    return lambda p, n, a, b: steps(p) * a + (p - 1) / p * n * b


DIRECT = Algorithm(
    "direct", "direct: every member sends chunk j of its operand to member j (itself included) in one step; member "
              "j folds the arrivals in group order, so its chunk of the sum is XLA:CPU's bit for bit.",
    pairs(share), lambda shape: math.prod(shape) - 1, 1, reorders=False, adds=added(scattered))
RING = Algorithm(
    "ring", "ring: in each of n - 1 steps every member passes one partial chunk to the next member, which adds its "
            "own term, so member c ends with chunk c complete: the reduce-scatter half of the ring all-reduce, "
            "each message 1/n of the operand.",
    on_group(lambda p, b: [(Pattern("shift", 1), b / p, p - 1)]), lambda shape: math.prod(shape) - 1, 2,
    reorders=True, bound=SUM_BOUND, closed_form=_scatter_form(lambda p: p - 1), adds=added(scattered))
BIDIRECTIONAL_RING = Algorithm(
    "bidirectional_ring", "bidirectional ring: chunk c is folded along two chains that end at member c, one "
                          "clockwise from member c - n // 2 and one counter-clockwise from member c + n // 2; at "
                          "each step every member adds its term to the partial sums it received and passes them on, "
                          "both ways at once: n // 2 steps (ceil((n - 1) / 2)) of two messages of 1/n of the "
                          "operand (the first, from the member opposite, of half that for even n).",
    on_group(lambda p, b: bidirectional_steps(p, b / p, half_first=True)),
    lambda shape: bidirectional_messages(math.prod(shape)), 2, reorders=True, bound=SUM_BOUND,
    closed_form=lambda p, n, a, b: bidirectional_form(p, n / p, a, b), adds=added(scattered))
RECURSIVE_HALVING = Algorithm(
    "recursive_halving", "recursive halving: at distance n/2, n/4, ..., 1 each member keeps the half of its chunks "
                         "that holds its own and sends the other half to index XOR distance, which adds it: "
                         "log2(n) steps of halving messages.",
    on_group(halving), lambda shape: lg(math.prod(shape)), 1, reorders=True, bound=SUM_BOUND, power_of_two=True,
    closed_form=_scatter_form(lg), adds=added(scattered))
MULTI_AXIS = Algorithm(
    "multi_axis", "multi axis: every chunk is cut into one part per named mesh axis and the parts are reduced at "
                  "the same time, part r along the axes in the reverse of the r-th rotation of their order, each "
                  "phase a bidirectional ring along one axis, so every axis's links carry one part at a time "
                  "(over one axis: the bidirectional ring).",
    multi_axis.scatter_schedule, multi_axis.ring_messages, 3, reorders=True, bound=SUM_BOUND, grid=True,
    inner=BIDIRECTIONAL_RING, closed_form=BIDIRECTIONAL_RING.closed_form, adds=added(scattered))
HIERARCHICAL = hierarchical.REDUCE_SCATTER
ALGORITHMS = (DIRECT, RING, BIDIRECTIONAL_RING, RECURSIVE_HALVING, MULTI_AXIS, HIERARCHICAL, IN_NETWORK)
ALGORITHMS += (auto_of(ALGORITHMS),)


def _chunk(params: dict[str, Any], x: np.ndarray, j: int, n: int) -> np.ndarray:
    """The part of a member's operand that member j's result sums: chunk j along `scatter_dimension`."""
    dim = params.get("scatter_dimension", 0)
    if not params.get("tiled", False):
        return np.take(x, j, axis=dim)
    step = x.shape[dim] // n
    return np.take(x, np.arange(j * step, (j + 1) * step), axis=dim)


def _teach(params: dict[str, Any], n: int) -> list[str]:
    algorithm = named(ALGORITHMS, params.get("algorithm", "direct"))
    return [f"Element-wise, it adds the operands of the {n} members of each group, and keeps only chunk j of "
            f"the sum (along scatter_dimension) on member j.", f"Algorithm {algorithm.text}"]


PSUM_SCATTER = Definition(
    name="psum_scatter", function=psum_scatter, arrays=("x",),
    params=(AXIS_NAME, integer("scatter_dimension", 0), AXIS_INDEX_GROUPS, flag("tiled", False)),
    vma=Vma.KEEP, sums=True, transpose=_transpose,
    jax=JaxBinding("psum_scatter", ("reduce_scatter",), lambda jax, p: lambda x: jax.lax.psum_scatter(x, **p)),
    strategy=lambda st, axes, **options: split_shape(st, axes, "scatter_dimension", negative=False),
    batch=batch_rules.gather("scatter_dimension", removes=True), algorithms=ALGORITHMS,
    reduction=Reduction("sum", "adds", chunk=_chunk), sizes=MOVES,
    sweep=Sweep("ReduceScatter", "split", "(n-1)/n", lambda axis_name, n, algorithm: lambda x: psum_scatter(
        x, axis_name, tiled=True, algorithm=algorithm), redop="sum"),
    drawing=WHOLE, teach=_teach,
)
