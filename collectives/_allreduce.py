"""All-reduce as message protocols: three algorithms, the same integer bytes, different times and float orders.

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

Layouts change times, never values. Payloads leave memory through `pack_slice` (a timed "pack" when
they are not one contiguous run); an arrival whose order differs from the buffer it is folded into or
written to is first unpacked into that buffer's layout (a timed "unpack"); the arithmetic is free. So
'direct' unpacks every arrival when the result's layout (`out_layout`) differs from the operands';
'recursive_doubling' keeps its partial results in the result's layout, the own operand copied into it
first; 'ring' works in row-major order: an operand laid out otherwise is packed into that order first,
and a result laid out otherwise is unpacked from it at the end.

`ring_reduce_scatter`, `fold_arrivals` and `laid_out` are shared with `psum_scatter`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import numpy as np

import sim
from collectives._arithmetic import accumulator, combine, convert, fold, identity, widen
from collectives._common import header_of, pack_slice, received, row_major_everywhere, unpack_into, unpack_values
from layouts import Layout

ALGORITHMS = ("direct", "ring", "recursive_doubling")


@dataclass(frozen=True)
class AllReduceArgs:
    """One member's part of an all-reduce: its operand, the element operation, the algorithm, the result's layout."""

    buffer: sim.Buffer
    reduction: str
    algorithm: str
    out_layout: Layout


def check_algorithm(op: str, device: int, algorithm: str, group_size: int, allowed: Sequence[str] = ALGORITHMS) -> None:
    """Raise unless `algorithm` is one of `allowed` and fits a group of `group_size` members."""
    if algorithm not in allowed:
        raise sim.InvalidArgumentError(
            f"device {device}: {op}: algorithm={algorithm!r} must be one of {tuple(allowed)}")
    if algorithm == "recursive_doubling" and group_size & (group_size - 1):
        raise sim.InvalidArgumentError(
            f"device {device}: {op}: algorithm='recursive_doubling' needs a group size that is a power of two, "
            f"got {group_size}; use algorithm='ring' or 'direct'")


def all_reduce_protocol(port: sim.Port, args: AllReduceArgs) -> Generator:
    """The member's part of the all-reduce with the chosen algorithm; returns its result (a memory view)."""
    return (yield from _PROTOCOLS[args.algorithm](port, args))


def _direct(port: sim.Port, args: AllReduceArgs) -> Generator:
    source = port.memory.view(args.buffer)
    if _in_place(port):
        # nothing to pack or unpack: one row of identical messages each, folded in group order at once
        g = port.group.size
        port.send_each([source] * g, [header_of(args.buffer.layout.major_to_minor)] * g, step=[0] * g)
        messages = yield from port.recv_each()
        out = port.memory.view(port.memory.alloc(source.dtype, source.shape, args.out_layout))
        out[...] = fold(args.reduction, np.stack([m.payload for m in messages]))
        return out
    payload, header = yield from pack_slice(port, source, args.buffer.layout)
    for dst in port.group.members:
        port.send(dst, payload, header=header, step=0)
    return (yield from fold_arrivals(port, args.reduction, source.dtype, source.shape, args.out_layout))


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
        acc = combine(reduction, acc, widen(inbox))
    out[...] = convert(acc, dtype)
    return out


def _ring(port: sim.Port, args: AllReduceArgs) -> Generator:
    source = port.memory.view(args.buffer)
    n = port.group.size
    terms = yield from _row_major(port, source, phase="operand")
    mine = yield from ring_reduce_scatter(port, np.array_split(terms.reshape(-1), n), args.reduction)
    flat = port.memory.view(port.memory.alloc(source.dtype, (source.size,)))
    yield from _ring_all_gather(port, mine, np.array_split(flat, n))
    return (yield from laid_out(port, flat.reshape(source.shape), args.out_layout, phase="result"))


def ring_reduce_scatter(port: sim.Port, parts: Sequence[np.ndarray], reduction: str) -> Generator:
    """Fold chunk c of every member's `parts` around the ring so that member c ends with it complete.

    `parts[c]` is this member's own term for chunk c, a view of its memory, read in row-major order
    (packed first by a timed step where that order is strided). Each partial sum lives in its own
    row-major buffer, written once, so a view in flight is never overwritten. Returns the complete
    chunk of this member's index.
    """
    n, me, members = port.group.size, port.group.index, port.group.members
    memory = port.memory
    own = []
    for c, part in enumerate(parts):
        own.append((yield from _row_major(port, part, chunk=c)))
    partial = [memory.view(memory.alloc(p.dtype, p.shape)) for p in own]
    c = (me - 1) % n
    partial[c][...] = combine(reduction, identity(reduction, own[c].dtype), own[c])
    for step in range(n - 1):
        payload, header = yield from pack_slice(port, partial[c], Layout.row_major(partial[c].ndim))
        port.send(members[(me + 1) % n], payload, tag=("reduce-scatter", step), header=header,
                  phase="reduce-scatter", step=step, chunk=c)
        c = (c - 1) % n
        message = yield port.recv(members[(me - 1) % n], tag=("reduce-scatter", step))
        partial[c][...] = combine(reduction, received(message), own[c])
    return partial[c]


def _ring_all_gather(port: sim.Port, mine: np.ndarray, chunks: list[np.ndarray]) -> Generator:
    """Pass the complete chunks around the ring into `chunks` (1-D row-major views), own chunk first."""
    n, me, members = port.group.size, port.group.index, port.group.members
    chunks[me][...] = mine
    c = me
    for step in range(n - 1):
        payload, header = yield from pack_slice(port, chunks[c], Layout.row_major(1))
        port.send(members[(me + 1) % n], payload, tag=("all-gather", step), header=header,
                  phase="all-gather", step=step, chunk=c)
        c = (c - 1) % n
        message = yield port.recv(members[(me - 1) % n], tag=("all-gather", step))
        yield from unpack_into(port, message, chunks[c], chunk=c)


def _recursive_doubling(port: sim.Port, args: AllReduceArgs) -> Generator:
    source = port.memory.view(args.buffer)
    me, members, layout = port.group.index, port.group.members, args.out_layout
    inbox = port.memory.view(port.memory.alloc(source.dtype, source.shape, layout))
    yield from unpack_values(port, source, args.buffer.layout.major_to_minor, inbox, term="own")
    partial = _fresh(port, combine(args.reduction, identity(args.reduction, source.dtype), inbox), layout)
    distance = 1
    while distance < port.group.size:
        partner, step = me ^ distance, distance.bit_length() - 1
        payload, header = yield from pack_slice(port, partial, layout)
        port.send(members[partner], payload, tag=distance, header=header, phase="recursive-doubling", step=step)
        message = yield port.recv(members[partner], tag=distance)
        yield from unpack_into(port, message, inbox, step=step)
        low, high = (partial, inbox) if me < partner else (inbox, partial)
        partial = _fresh(port, combine(args.reduction, low, high), layout)  # a new buffer: `partial` may still travel
        distance *= 2
    return partial


def _row_major(port: sim.Port, view: np.ndarray, **detail) -> Generator:
    """`view`'s values in row-major order: the memory itself when that is one contiguous run, else packed."""
    values, _ = yield from pack_slice(port, view, Layout.row_major(view.ndim), **detail)
    return values


def laid_out(port: sim.Port, values: np.ndarray, layout: Layout, **detail) -> Generator:
    """`values` (row-major) copied into a new buffer laid out with `layout`, a timed unpack where strided."""
    out = port.memory.view(port.memory.alloc(values.dtype, values.shape, layout))
    yield from unpack_values(port, values, tuple(range(values.ndim)), out, **detail)
    return out


def _fresh(port: sim.Port, value: np.ndarray, layout: Layout) -> np.ndarray:
    """`value` written into a new buffer of this member's memory laid out with `layout`, as a view."""
    return port.memory.view(port.memory.store(np.asarray(value), layout))


_PROTOCOLS: dict[str, Callable[[sim.Port, AllReduceArgs], Generator]] = {
    "direct": _direct, "ring": _ring, "recursive_doubling": _recursive_doubling,
}
