"""All-reduce as message protocols: eight algorithms, the same integer bytes, different times and float orders.

- 'direct': every member sends its whole operand to every member, and each member folds the arrivals in
  group order into the identity: element e is `((((id op x0) op x1) op x2) ... op x(n-1))`. One step;
  n(n-1) full-size messages cross the network. This is XLA:CPU's order, so it equals JAX bit for bit.
- 'ring': a ring reduce-scatter, then a ring all-gather (member i sends to member i+1 mod n). The
  flattened operand is cut into n chunks (the sizes of `numpy.array_split`); chunk c is folded into the
  identity in the member order c+1, c+2, ..., n-1, 0, 1, ..., c and then passed around the ring.
  2(n-1) steps; each member sends one chunk (about 1/n of the operand) per step.
- 'recursive_doubling' (group size a power of two): at step k each member swaps its partial result with
  the member whose group index differs in bit k, and both compute `partial(lower index) op
  partial(higher index)`; element e is the balanced tree `((id op x0) op (id op x1)) op (...)`.
  log2(n) steps of full-size messages.
- 'bidirectional_ring': a reduce-scatter, then an all-gather, each of n // 2 steps that send both ways
  round the ring at once (`collectives._bidirectional`): chunk c is folded along two chains of members
  that meet at member c, then travels from c both ways. 2 (n // 2) steps of two messages of about 1/n
  of the operand (half that in the step next to the member opposite, for even n).
- 'rabenseifner' (group size a power of two): a reduce-scatter by recursive halving, then an all-gather
  by recursive doubling (`collectives._halving`). 2 log2(n) steps; the messages halve, then double.
- 'per_axis': a ring all-reduce along each named mesh axis in turn, the minor axis first (over one axis,
  or with axis_index_groups: 'ring').
- 'hierarchical' (`collectives._hierarchical`): a direct reduce-scatter inside each node, a ring all-reduce
  of each chunk among the members of the same local rank across nodes, a direct all-gather inside the node
  (without nodes: the two direct phases over the whole group).
- 'tree' (`collectives._tree`): NCCL's tree, simplified: each half of the operand is summed down a chain in
  each node, up one of two complementary binary trees across nodes, and sent back down (without nodes: one
  chain over the group).
- 'in_network' (only where the network's switch reduces, `sim.Network.switch_reduces`): every member sends
  each of its n shards into the switch, which adds shard j in group order (the bits of 'direct') and
  multicasts the sum to every member, NCCL's NVLS (`collectives._in_network`). One step.
- 'multi_axis': a multi-axis reduce-scatter, then a multi-axis all-gather (`collectives._multi_axis`): the
  operand cut into one part per named axis, the parts reduced and gathered at the same time, each along the
  axes in its own rotation (over one axis, or with axis_index_groups: 'bidirectional_ring').

Layouts change times, never values. Payloads leave memory through `pack_slice` (a timed "pack" when
they are not one contiguous run); an arrival whose order differs from the buffer it is folded into or
written to is first unpacked into that buffer's layout (a timed "unpack"); the arithmetic is free. So
'direct' unpacks every arrival when the result's layout (`out_layout`) differs from the operands';
'recursive_doubling' keeps its partial results in the result's layout, the own operand copied into it
first; 'ring' works in row-major order: an operand laid out otherwise is packed into that order first,
and a result laid out otherwise is unpacked from it at the end.

The ring's reduce-scatter and all-gather ('ring', 'per_axis', 'hierarchical') are `collectives._ring_lanes`,
shared with `psum_scatter` as `fold_arrivals` is. Every algorithm but 'direct' and 'in_network' folds in
another order; `oracles._reordered` states the bound all of them keep.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np

import sim
from collectives import _bidirectional as bidirectional
from collectives import _direct_rows as direct_rows
from collectives import _doubling_loops as doubling_loops
from collectives import _doubling_rows as doubling_rows
from collectives import _hierarchical as hierarchical
from collectives import _multi_axis as multi_axis
from collectives import _ring_steps as ring_steps
from collectives import _tree as tree
from collectives._algorithm import (
    SUM_BOUND,
    Algorithm,
    Pattern,
    Step,
    added,
    auto_of,
    bidirectional_form,
    bidirectional_messages,
    bidirectional_steps,
    doubling,
    halving,
    lg,
    on_group,
    pairs,
)
from collectives._algorithm import whole as whole_operand
from collectives._algorithms import axis_teams, resolve, ring_team
from collectives._arithmetic import accumulator, combine, convert, fold, identity, started, widen
from collectives._common import laid_out, pack_slice, row_major, row_major_everywhere, unpack_into, unpack_values
from collectives._halving import (
    SwappedPartials,
    chunk_bounds,
    doubling_all_gather,
    halving_reduce_scatter,
    rabenseifner_rows,
)
from collectives._in_network import ALL_REDUCE as IN_NETWORK
from collectives._in_network import all_reduce as in_network_all_reduce
from collectives._joint import cut, joint
from collectives._ring_lanes import reduce_scatter_lanes, ring_all_reduce, ring_reduce_scatter, split, staging
from layouts import Layout

# the names other modules take from here (the ring's and the layouts' parts live in _ring_lanes and _common)
__all__ = ["ALGORITHMS", "AllReduceArgs", "all_reduce_protocol", "fold_arrivals", "laid_out", "reduce_scatter_lanes",
           "ring_reduce_scatter", "split", "staging"]


@dataclass(frozen=True)
class AllReduceArgs:
    """One member's part of an all-reduce: its operand, the element operation, the algorithm asked for, the
    result's layout, and the grid of the named mesh axes ('per_axis')."""

    buffer: sim.Buffer
    reduction: str
    algorithm: str
    out_layout: Layout
    shape: tuple[int, ...] = ()


def all_reduce_protocol(port: sim.Port, args: AllReduceArgs) -> Generator:
    """The member's part of the all-reduce with the chosen algorithm; returns its result (a memory view)."""
    shape = args.shape or (port.group.size,)
    size_bytes = math.prod(args.buffer.shape) * np.dtype(args.buffer.dtype).itemsize
    algorithm = resolve(port, ALGORITHMS, args.algorithm, size_bytes, shape)
    return (yield from _PROTOCOLS[algorithm](port, args))


def _direct(port: sim.Port, args: AllReduceArgs) -> Generator:
    source = port.memory.view(args.buffer)
    if _in_place(port):
        # nothing to pack or unpack: one row of identical messages each, folded in group order at once
        g = port.group.size
        port.send_copies(source, step=0)
        column = yield from port.recv_column()
        yield from sim.add_step(port, (g - 1) * source.nbytes)
        out = port.memory.view(port.memory.alloc(source.dtype, source.shape, args.out_layout))
        out[...] = _folded(port, args.reduction, column, (g, *source.shape))
        return out
    payload, header = yield from pack_slice(port, source, args.buffer.layout)
    for dst in port.group.members:
        port.send(dst, payload, header=header, step=0)
    return (yield from fold_arrivals(port, args.reduction, source.dtype, source.shape, args.out_layout))


def _folded(port: sim.Port, reduction: str, column: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The fold of the received `column` (reshaped to `shape`: one term per member). Members whose columns
    are one and the same array (every member's copies, read as one view or one stack of the rows) fold it
    once: the same terms in the same order, so the same bits."""
    found = port.once(("folded", id(column)), lambda: (column, fold(reduction, column.reshape(shape))))
    return found[1] if found[0] is column else fold(reduction, column.reshape(shape))


def _in_place(port: sim.Port) -> bool:
    """Whether every member's operand and result are row-major (decided once per call)."""
    return port.once("in_place", lambda: row_major_everywhere(port.group_args))


def fold_arrivals(port: sim.Port, reduction: str, dtype: np.dtype, shape: tuple[int, ...],
                  layout: Layout) -> Generator:
    """Fold one message from every member, in group order, into the identity (XLA:CPU's order).

    The result is a new buffer laid out with `layout`. Each arrival is first unpacked into a receive
    buffer in that layout, a timed step when its order differs. bfloat16 accumulates in its wider
    `accumulator` dtype and rounds once, as XLA:CPU's promoted all-reduce does.
    """
    memory = port.memory
    out, inbox = (memory.view(memory.alloc(dtype, shape, layout)) for _ in range(2))
    acc = identity(reduction, accumulator(dtype))
    for i, src in enumerate(port.group.members):
        message = yield port.recv(src)
        yield from unpack_into(port, message, inbox, member=i)
        if src != port.device:
            yield from sim.add_step(port, inbox.nbytes, member=i)
        acc = combine(reduction, acc, widen(inbox))
    out[...] = convert(acc, dtype)
    return out


def _ring(port: sim.Port, args: AllReduceArgs) -> Generator:
    source = port.memory.view(args.buffer)
    terms = yield from row_major(port, source, phase="operand")
    flat = yield from ring_all_reduce(port, [(ring_team(port), terms.reshape(-1), "")], args.reduction)
    return (yield from laid_out(port, flat.reshape(source.shape), args.out_layout, phase="result"))


def _bidirectional_ring(port: sim.Port, args: AllReduceArgs) -> Generator:
    """A bidirectional reduce-scatter, then a bidirectional all-gather (`collectives._bidirectional`)."""
    source = port.memory.view(args.buffer)
    terms = yield from row_major(port, source, phase="operand")
    team = ring_team(port)
    parts = cut(terms.reshape(-1), team.size)
    mine = yield from bidirectional.reduce_scatter(port, team, parts, args.reduction, "reduce-scatter")
    units = cut(joint(port, "all-gather", source.dtype, (source.size,)), team.size)
    flat = units.flat
    units[team.index][...] = mine
    yield from bidirectional.all_gather(port, team, units, "all-gather")
    return (yield from laid_out(port, flat.reshape(source.shape), args.out_layout, phase="result"))


def _hierarchical(port: sim.Port, args: AllReduceArgs) -> Generator:
    """Direct reduce-scatter inside the node, ring all-reduce across nodes, direct all-gather inside the node
    (`collectives._hierarchical`)."""
    source = port.memory.view(args.buffer)
    terms = (yield from row_major(port, source, phase="operand")).reshape(-1)
    node, across = hierarchical.node_teams(port)
    parts = direct_rows.singles(terms, node.size)
    [mine] = yield from hierarchical.reduce_scatter(port, node, parts, args.reduction, "intra-node reduce-scatter")
    if across.size > 1:
        mine = yield from ring_all_reduce(port, [(across, mine, "inter-node ")], args.reduction)
    flat = port.memory.view(port.memory.alloc(source.dtype, (source.size,)))
    units = direct_rows.singles(flat, node.size)
    units[node.index][0][...] = mine
    yield from hierarchical.all_gather(port, node, units, "intra-node all-gather")
    return (yield from laid_out(port, flat.reshape(source.shape), args.out_layout, phase="result"))


def _tree(port: sim.Port, args: AllReduceArgs) -> Generator:
    """NCCL's tree, simplified: a chain in each node, a double binary tree across nodes (`collectives._tree`)."""
    source = port.memory.view(args.buffer)
    terms = (yield from row_major(port, source, phase="operand")).reshape(-1)
    flat = yield from tree.all_reduce(port, terms, args.reduction)
    return (yield from laid_out(port, flat.reshape(source.shape), args.out_layout, phase="result"))


def _per_axis(port: sim.Port, args: AllReduceArgs) -> Generator:
    """A ring all-reduce along each mesh axis of the grid in turn, the minor axis first."""
    source = port.memory.view(args.buffer)
    flat = (yield from row_major(port, source, phase="operand")).reshape(-1)
    for k, team in axis_teams(port, args.shape):
        flat = yield from ring_all_reduce(port, [(team, flat, f"axis {k} ")], args.reduction)
    return (yield from laid_out(port, flat.reshape(source.shape), args.out_layout, phase="result"))


def _multi_axis(port: sim.Port, args: AllReduceArgs) -> Generator:
    """A multi-axis reduce-scatter, then a multi-axis all-gather (`collectives._multi_axis`)."""
    source = port.memory.view(args.buffer)
    flat = (yield from row_major(port, source, phase="operand")).reshape(-1)
    flat = yield from multi_axis.all_reduce(port, flat, args.shape, args.reduction)
    return (yield from laid_out(port, flat.reshape(source.shape), args.out_layout, phase="result"))


def _recursive_doubling(port: sim.Port, args: AllReduceArgs) -> Generator:
    source = port.memory.view(args.buffer)
    me, members, layout = port.group.index, port.group.members, args.out_layout
    n = port.group.size
    tables = n > 1 and _in_place(port) and ring_steps.by_tables(port, "recursive-doubling", source, args.reduction)
    if tables and source.size and doubling_rows.by_rows(port, source.dtype):
        return (yield from _doubling_rows(port, source, args.reduction))
    inbox = port.memory.view(port.memory.alloc(source.dtype, source.shape, layout))
    yield from unpack_values(port, source, args.buffer.layout.major_to_minor, inbox, term="own")
    partial = _fresh(port, started(args.reduction, inbox), layout)
    if tables:
        doubling = SwappedPartials(port, partial, inbox, args.reduction, layout)
        count = n.bit_length() - 1
        yield from ring_steps.per_member(port, "recursive-doubling", count, [me ^ (1 << s) for s in range(count)],
                                         doubling)
        return doubling.partial
    distance = 1
    while distance < port.group.size:
        partner, step = me ^ distance, distance.bit_length() - 1
        payload, header = yield from pack_slice(port, partial, layout)
        port.send(members[partner], payload, tag=distance, header=header, phase="recursive-doubling", step=step)
        message = yield port.recv(members[partner], tag=distance)
        yield from unpack_into(port, message, inbox, step=step)
        yield from sim.add_step(port, inbox.nbytes, step=step)
        low, high = (partial, inbox) if me < partner else (inbox, partial)
        partial = _fresh(port, combine(args.reduction, low, high), layout)  # a new buffer: `partial` may still travel
        distance *= 2
    return partial


def _doubling_rows(port: sim.Port, source: np.ndarray, reduction: str) -> Generator:
    """Recursive doubling as rows (`collectives._doubling_rows.Folds`), row-major: one buffer holds what the
    per-message loop allocates as its inbox and then the member's partial results before its last step, the
    own operand first; the last is a buffer of its own, the result (written member by member: a buffer
    apart costs less to allocate than a joint row saves)."""
    n, size = port.group.size, source.size
    count = n.bit_length() - 1
    folds = port.once(("rows", "recursive-doubling"), lambda: doubling_loops.swapped(port, count, size, reduction,
                                                                                   source.dtype))
    buffer = joint(port, "recursive doubling", source.dtype, ((count + 1) * size,))
    result = port.memory.alloc_view(source.dtype, source.shape)  # written one member at a time at the end
    buffer[size:2 * size] = source.reshape(-1)  # folded into the identity by `folds` before it is read
    yield from folds.join(port, [buffer[size:], result.reshape(-1)])
    return result


def _rabenseifner(port: sim.Port, args: AllReduceArgs) -> Generator:
    """Recursive halving, then recursive doubling, in row-major order (`collectives._halving`)."""
    source = port.memory.view(args.buffer)
    flat = (yield from row_major(port, source, phase="operand")).reshape(-1)
    n, size = port.group.size, flat.size  # numpy.array_split's bounds, worked out once per call
    bounds = port.once(("rabenseifner bounds", size), lambda: chunk_bounds([len(c) for c in split(flat, n)]))
    if n > 1 and ring_steps.by_tables(port, "recursive-halving", flat, args.reduction) \
            and doubling_rows.by_rows(port, flat.dtype):
        out = yield from rabenseifner_rows(port, flat, bounds, args.reduction)
    else:
        mine = yield from halving_reduce_scatter(port, flat, bounds, args.reduction)
        out = joint(port, "rabenseifner", flat.dtype, flat.shape)  # rows of one array: a step's copies at once
        yield from doubling_all_gather(port, mine, out, bounds)
    return (yield from laid_out(port, out.reshape(source.shape), args.out_layout, phase="result"))


def _fresh(port: sim.Port, value: np.ndarray, layout: Layout) -> np.ndarray:
    """`value` written into a new buffer of this member's memory laid out with `layout`, as a view."""
    return port.memory.view(port.memory.store(np.asarray(value), layout))


# ---------------------------------------------------------------------------------------------- the records


def _per_axis_steps(shape: tuple[int, ...], b: float) -> list[Step]:
    """A ring all-reduce along each grid axis, the minor axis first: 2(s - 1) steps of b/s on an axis of s."""
    return [(Pattern("shift", 1, axis), b / shape[axis], 2 * (shape[axis] - 1)) for axis in reversed(range(len(shape)))]


def _share(p: int) -> float:
    return (p - 1) / p


DIRECT = Algorithm(
    "direct", "direct: every member sends its whole operand to every member (itself included) in one step; each "
              "member folds the arrivals in group order, so every member computes the same bits.",
    pairs(whole_operand), lambda shape: math.prod(shape) - 1, 1, reorders=False, adds=added(lambda p: p - 1))
RING = Algorithm(
    "ring", "ring: the operand is cut into n chunks. Reduce-scatter: in each of n - 1 steps every member passes one "
            "partial chunk to the next member, which adds its own term, so member c ends with chunk c complete. "
            "All-gather: in n - 1 more steps the complete chunks travel around the ring. Each message is 1/n of "
            "the operand: 2(n - 1) small steps instead of one big one.",
    on_group(lambda p, b: [(Pattern("shift", 1), b / p, 2 * (p - 1))]), lambda shape: 2 * (math.prod(shape) - 1), 2,
    reorders=True, bound=SUM_BOUND,
    closed_form=lambda p, n, a, b: 2 * (p - 1) * a + 2 * _share(p) * n * b, adds=added(_share))
RECURSIVE_DOUBLING = Algorithm(
    "recursive_doubling", "recursive doubling: in step s every member exchanges its partial result with the member "
                          "whose group index differs in bit s (index XOR 2^s) and combines the two, lower index "
                          "first; after log2(n) steps every member holds the whole reduction.",
    on_group(lambda p, b: [(Pattern("xor", 1 << k), b, 1) for k in range(lg(p))]), lambda shape: lg(math.prod(shape)),
    1, reorders=True, bound=SUM_BOUND, power_of_two=True, closed_form=lambda p, n, a, b: lg(p) * (a + n * b),
    adds=added(lg))
BIDIRECTIONAL_RING = Algorithm(
    "bidirectional_ring", "bidirectional ring: the operand is cut into n chunks. Reduce-scatter: chunk c is folded "
                          "along two chains that end at member c, one clockwise from member c - n // 2 and one "
                          "counter-clockwise from member c + n // 2, every member passing partial sums both ways at "
                          "each step; all-gather: each complete chunk travels from its member both ways round. "
                          "2 (n // 2) steps (about n, not 2(n - 1)) of two messages of 1/n.",
    on_group(lambda p, b: bidirectional_steps(p, b / p, half_first=True) + bidirectional_steps(p, b / p)),
    lambda shape: 2 * bidirectional_messages(math.prod(shape)), 2, reorders=True, bound=SUM_BOUND,
    closed_form=lambda p, n, a, b: 2 * bidirectional_form(p, n / p, a, b), adds=added(_share))
RABENSEIFNER = Algorithm(
    "rabenseifner", "Rabenseifner: a reduce-scatter by recursive halving (at distance n/2, n/4, ..., 1 each member "
                    "keeps the half of its chunks that holds its own and sends the other half to index XOR "
                    "distance), then an all-gather by recursive doubling: 2 log2(n) steps.",
    on_group(lambda p, b: halving(p, b) + doubling(p, b / p)), lambda shape: 2 * lg(math.prod(shape)), 2,
    reorders=True, bound=SUM_BOUND, power_of_two=True,
    closed_form=lambda p, n, a, b: 2 * lg(p) * a + 2 * _share(p) * n * b, adds=added(_share))
PER_AXIS = Algorithm(
    "per_axis", "per axis: the ring algorithm along each named mesh axis in turn, the last named first (over one "
                "axis: the ring algorithm).",
    _per_axis_steps, lambda shape: sum(2 * (s - 1) for s in shape), 2, reorders=True, bound=SUM_BOUND, grid=True,
    inner=RING, adds=lambda shape, b: sum(_share(s) * b for s in shape))
MULTI_AXIS = Algorithm(
    "multi_axis", "multi axis: a reduce-scatter, then an all-gather, each with the operand cut into one part per "
                  "named mesh axis and the parts moving at the same time, part r along the axes in the r-th "
                  "rotation of their order (reversed for the reduce-scatter), each phase a bidirectional ring "
                  "along one axis (over one axis: the bidirectional ring).",
    multi_axis.reduce_schedule, lambda shape: 2 * multi_axis.ring_messages(shape), 5, reorders=True,
    bound=SUM_BOUND, grid=True, inner=BIDIRECTIONAL_RING, closed_form=BIDIRECTIONAL_RING.closed_form,
    adds=added(_share))
HIERARCHICAL = hierarchical.ALL_REDUCE
TREE = tree.ALL_REDUCE
ALGORITHMS = (DIRECT, RING, RECURSIVE_DOUBLING, BIDIRECTIONAL_RING, RABENSEIFNER, PER_AXIS, MULTI_AXIS, HIERARCHICAL,
              TREE, IN_NETWORK)
ALGORITHMS += (auto_of(ALGORITHMS),)

_PROTOCOLS: dict[Algorithm, Callable[[sim.Port, AllReduceArgs], Generator]] = {
    DIRECT: _direct, RING: _ring, RECURSIVE_DOUBLING: _recursive_doubling, BIDIRECTIONAL_RING: _bidirectional_ring,
    RABENSEIFNER: _rabenseifner, PER_AXIS: _per_axis, HIERARCHICAL: _hierarchical, TREE: _tree,
    MULTI_AXIS: _multi_axis,
    IN_NETWORK: lambda port, args: in_network_all_reduce(port, args.buffer, args.reduction, args.out_layout),
}
