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

`ring_reduce_scatter` is shared with `psum_scatter`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generator, Sequence

import numpy as np

import sim
from collectives._arithmetic import combine, identity
from collectives._common import pack

ALGORITHMS = ("direct", "ring", "recursive_doubling")


@dataclass(frozen=True)
class AllReduceArgs:
    """One member's part of an all-reduce: its operand, the element operation and the algorithm."""

    buffer: sim.Buffer
    reduction: str
    algorithm: str


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
    payload = pack(source)
    for dst in port.group.members:
        port.send(dst, payload, step=0)
    out = port.memory.view(port.memory.alloc(source.dtype, source.shape))
    out[...] = identity(args.reduction, source.dtype)
    for src in port.group.members:
        message = yield port.recv(src)
        out[...] = combine(args.reduction, out, message.payload)
    return out


def _ring(port: sim.Port, args: AllReduceArgs) -> Generator:
    source = port.memory.view(args.buffer)
    n = port.group.size
    out = port.memory.view(port.memory.alloc(source.dtype, source.shape))
    mine = yield from ring_reduce_scatter(port, np.array_split(pack(source).reshape(-1), n), args.reduction)
    yield from _ring_all_gather(port, mine, np.array_split(out.reshape(-1), n))
    return out


def ring_reduce_scatter(port: sim.Port, parts: Sequence[np.ndarray], reduction: str) -> Generator:
    """Fold chunk c of every member's `parts` around the ring so that member c ends with it complete.

    `parts[c]` is this member's own term for chunk c. Each partial sum lives in its own buffer, written
    once, so a view in flight is never overwritten. Returns the complete chunk of this member's index.
    """
    n, me, members = port.group.size, port.group.index, port.group.members
    memory = port.memory
    partial = [memory.view(memory.alloc(p.dtype, p.shape)) for p in parts]
    c = (me - 1) % n
    partial[c][...] = combine(reduction, identity(reduction, parts[c].dtype), parts[c])
    for step in range(n - 1):
        port.send(members[(me + 1) % n], pack(partial[c]), tag=("reduce-scatter", step),
                  phase="reduce-scatter", step=step, chunk=c)
        c = (c - 1) % n
        message = yield port.recv(members[(me - 1) % n], tag=("reduce-scatter", step))
        partial[c][...] = combine(reduction, message.payload, parts[c])
    return partial[c]


def _ring_all_gather(port: sim.Port, mine: np.ndarray, chunks: list[np.ndarray]) -> Generator:
    """Pass the complete chunks around the ring into `chunks` (views of the output), own chunk first."""
    n, me, members = port.group.size, port.group.index, port.group.members
    chunks[me][...] = mine
    c = me
    for step in range(n - 1):
        port.send(members[(me + 1) % n], pack(chunks[c]), tag=("all-gather", step),
                  phase="all-gather", step=step, chunk=c)
        c = (c - 1) % n
        message = yield port.recv(members[(me - 1) % n], tag=("all-gather", step))
        chunks[c][...] = message.payload


def _recursive_doubling(port: sim.Port, args: AllReduceArgs) -> Generator:
    source = port.memory.view(args.buffer)
    me, members = port.group.index, port.group.members
    partial = _fresh(port, combine(args.reduction, identity(args.reduction, source.dtype), source))
    distance = 1
    while distance < port.group.size:
        partner = me ^ distance
        port.send(members[partner], partial, tag=distance, phase="recursive-doubling", step=distance.bit_length() - 1)
        message = yield port.recv(members[partner], tag=distance)
        low, high = (partial, message.payload) if me < partner else (message.payload, partial)
        partial = _fresh(port, combine(args.reduction, low, high))  # a new buffer: `partial` may still travel
        distance *= 2
    return partial


def _fresh(port: sim.Port, value: np.ndarray) -> np.ndarray:
    """`value` written into a new buffer of this member's memory, as a view."""
    return port.memory.view(port.memory.store(np.asarray(value)))


_PROTOCOLS: dict[str, Callable[[sim.Port, AllReduceArgs], Generator]] = {
    "direct": _direct, "ring": _ring, "recursive_doubling": _recursive_doubling,
}
