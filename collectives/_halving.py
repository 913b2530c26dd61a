"""Recursive halving and doubling over chunks of a flat row-major vector (group sizes that are powers of two).

The vector is cut into n chunks (the sizes of `numpy.array_split`, or the scatter chunks of psum_scatter);
chunk c runs over elements `bounds[c]:bounds[c + 1]`, so any run of consecutive chunks is one contiguous
slice and travels as one message.

- `halving_reduce_scatter`: at distances n/2, n/4, ..., 1 member i keeps the half of its current run of
  chunks that holds chunk i, sends the other half to member i XOR distance, and folds what that member
  sends back as `partial(lower index) op partial(higher index)`. After log2(n) steps it holds chunk i
  reduced over every member (a balanced tree, like recursive doubling's).
- `doubling_all_gather`: at distances 1, 2, ..., n/2 member i swaps its run of complete chunks with member
  i XOR distance, doubling the run, until it holds all n.

'rabenseifner' (all-reduce) is the two in turn; psum_scatter's 'recursive_halving' is the first alone.
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np

import sim
from collectives import _doubling_loops as doubling_loops
from collectives import _doubling_rows as doubling_rows
from collectives import _ring_steps as ring_steps
from collectives._arithmetic import combine, started
from collectives._common import pack_slice, received, unpack_into
from collectives._joint import joint
from layouts import Layout


def _fresh(port: sim.Port, dtype: np.dtype, size: int) -> np.ndarray:
    return port.memory.view(port.memory.alloc(dtype, (size,)))


def halving_reduce_scatter(port: sim.Port, terms: np.ndarray, bounds: list[int], reduction: str) -> Generator:
    """This member's chunk of the reduction of every member's flat `terms` (a new 1-D buffer)."""
    members, me, n = port.group.members, port.group.index, port.group.size
    count = n.bit_length() - 1
    tables = n > 1 and ring_steps.by_tables(port, "recursive-halving", terms, reduction)
    if tables and doubling_rows.by_rows(port, terms.dtype):
        return (yield from _halving_rows(port, terms, bounds, reduction))
    partial = _fresh(port, terms.dtype, terms.size)
    partial[...] = started(reduction, terms)
    if tables:
        halving = _Halving(port, partial, bounds, reduction)
        yield from ring_steps.per_member(port, "recursive-halving", count, [me ^ (n >> (s + 1)) for s in range(count)],
                                         halving)
        return halving.partial
    lo, distance = 0, n // 2  # `partial` holds chunks lo .. lo + 2 * distance - 1
    while distance >= 1:
        partner, step = me ^ distance, n.bit_length() - 1 - distance.bit_length()
        mid = lo + distance
        keep, give = ((mid, mid + distance), (lo, mid)) if me & distance else ((lo, mid), (mid, mid + distance))
        base = bounds[lo]
        payload = partial[bounds[give[0]] - base:bounds[give[1]] - base]
        port.send(members[partner], payload, tag=("halving", step), header={}, phase="recursive-halving",
                  step=step, chunks=give)
        message = yield port.recv(members[partner], tag=("halving", step))
        mine = partial[bounds[keep[0]] - base:bounds[keep[1]] - base]
        theirs = received(message)
        yield from sim.add_step(port, mine.nbytes, step=step)
        low, high = (mine, theirs) if me < partner else (theirs, mine)
        partial = _fresh(port, terms.dtype, mine.size)  # a new buffer: the old one may still travel
        partial[...] = combine(reduction, low, high)
        lo, distance = keep[0], distance // 2
    return partial


def doubling_all_gather(port: sim.Port, mine: np.ndarray, out: np.ndarray, bounds: list[int]) -> Generator:
    """Fill the flat `out` with every member's complete chunk, this member's `mine` first."""
    members, me, n = port.group.members, port.group.index, port.group.size
    out[bounds[me]:bounds[me + 1]] = mine
    if n > 1 and ring_steps.by_tables(port, "recursive-doubling", out):
        count = n.bit_length() - 1
        if doubling_rows.by_rows(port, out.dtype):
            copies = port.once(("rows", "recursive-doubling"),
                               lambda: doubling_rows.Copies(port, bounds, "chunks", out.dtype.itemsize))
            yield from copies.join(port, out)
            return
        yield from ring_steps.per_member(port, "recursive-doubling", count, [me ^ (1 << s) for s in range(count)],
                                         _Doubling(out, bounds, me))
        return
    distance = 1
    while distance < n:
        partner, step = me ^ distance, distance.bit_length() - 1
        held, theirs = me & ~(distance - 1), partner & ~(distance - 1)
        payload, header = yield from pack_slice(port, out[bounds[held]:bounds[held + distance]], Layout.row_major(1))
        port.send(members[partner], payload, tag=("doubling", step), header=header, phase="recursive-doubling",
                  step=step, chunks=(held, held + distance))
        message = yield port.recv(members[partner], tag=("doubling", step))
        yield from unpack_into(port, message, out[bounds[theirs]:bounds[theirs + distance]], step=step)
        distance *= 2


def _halving_rows(port: sim.Port, terms: np.ndarray, bounds: list[int], reduction: str) -> Generator:
    """`halving_reduce_scatter` as rows (`collectives._doubling_rows.Folds`): the member's partial results
    are segments of one buffer of its memory, its terms first; returns the last (its chunk)."""
    me = port.group.index
    folds, ends = port.once(("rows", "recursive-halving"),
                            lambda: doubling_loops.halved(port, bounds, reduction, terms.dtype))
    row = doubling_rows.apart(port, "recursive-halving", terms.dtype, ends)
    row[:terms.size] = terms  # folded into the identity by `folds` before it is read
    yield from folds.join(port, [row])
    start = int(folds.segments[me, -1])
    return row[start:int(ends[me])]


def rabenseifner_rows(port: sim.Port, terms: np.ndarray, bounds: list[int], reduction: str) -> Generator:
    """`halving_reduce_scatter` and then `doubling_all_gather` of the flat `terms` as one loop of rows
    (`collectives._doubling_loops.Joined`): the last fold of each member writes its complete chunk into its
    all-gather buffer; returns that buffer (every member's reduction)."""
    def make() -> tuple[doubling_loops.Joined, np.ndarray]:
        folds, ends = doubling_loops.halved(port, bounds, reduction, terms.dtype, into=True)
        copies = doubling_rows.Copies(port, bounds, "chunks", terms.dtype.itemsize, alone=False)
        return doubling_loops.Joined(port, folds, copies), ends
    loop, ends = port.once(("rows", "rabenseifner"), make)
    row = doubling_rows.apart(port, "recursive-halving", terms.dtype, ends)
    row[:terms.size] = terms  # folded into the identity by the loop before it is read
    out = joint(port, "rabenseifner", terms.dtype, terms.shape)  # rows of one array: a step's copies at once
    yield from loop.join(port, [row, out], out)
    return out


class _Halving:
    """`halving_reduce_scatter`'s messages of one member, for `collectives._ring_steps.PerMember`."""

    def __init__(self, port: sim.Port, partial: np.ndarray, bounds: list[int], reduction: str) -> None:
        self.port, self.partial, self.bounds, self.reduction = port, partial, bounds, reduction
        self.me, self.n = port.group.index, port.group.size
        self.lo = 0

    def _split(self, step: int) -> tuple[tuple[int, int], tuple[int, int]]:
        distance, lo = self.n >> (step + 1), self.lo
        mid = lo + distance
        return ((mid, mid + distance), (lo, mid)) if self.me & distance else ((lo, mid), (mid, mid + distance))

    def _run(self, chunks: tuple[int, int]) -> np.ndarray:
        base = self.bounds[self.lo]
        return self.partial[self.bounds[chunks[0]] - base:self.bounds[chunks[1]] - base]

    def send(self, step: int, way: int) -> tuple[np.ndarray, dict]:
        give = self._split(step)[1]
        return self._run(give), {"phase": "recursive-halving", "step": step, "chunks": give}

    def receive(self, step: int, way: int, theirs: np.ndarray) -> None:
        keep = self._split(step)[0]
        mine = self._run(keep)
        low, high = (mine, theirs) if self.me < self.me ^ (self.n >> (step + 1)) else (theirs, mine)
        self.partial = _fresh(self.port, mine.dtype, mine.size)
        self.partial[...] = combine(self.reduction, low, high)
        self.lo = keep[0]


class _Doubling:
    """`doubling_all_gather`'s messages of one member, for `collectives._ring_steps.PerMember`."""

    def __init__(self, out: np.ndarray, bounds: list[int], me: int) -> None:
        self.out, self.bounds, self.me = out, bounds, me

    def send(self, step: int, way: int) -> tuple[np.ndarray, dict]:
        distance = 1 << step
        held = self.me & ~(distance - 1)
        return self.out[self.bounds[held]:self.bounds[held + distance]], {
            "phase": "recursive-doubling", "step": step, "chunks": (held, held + distance)}

    def receive(self, step: int, way: int, payload: np.ndarray) -> None:
        distance = 1 << step
        theirs = (self.me ^ distance) & ~(distance - 1)
        self.out[self.bounds[theirs]:self.bounds[theirs + distance]] = payload


class SwappedPartials:
    """The all-reduce's recursive doubling (`collectives._allreduce`) of one member, for
    `collectives._ring_steps.PerMember`: at step k it sends its partial result to the member whose index
    differs in bit k and folds the one it gets back, lower index first, into a new buffer in `layout`
    (row-major operands and results: nothing to pack or unpack)."""

    def __init__(self, port: sim.Port, partial: np.ndarray, inbox: np.ndarray, reduction: str, layout: Layout) -> None:
        self.port, self.partial, self.inbox, self.reduction, self.layout = port, partial, inbox, reduction, layout

    def send(self, step: int, way: int) -> tuple[np.ndarray, dict]:
        return self.partial, {"phase": "recursive-doubling", "step": step}

    def receive(self, step: int, way: int, payload: np.ndarray) -> None:
        me = self.port.group.index
        self.inbox[...] = payload
        low, high = (self.partial, self.inbox) if me < me ^ (1 << step) else (self.inbox, self.partial)
        self.partial = self.port.memory.view(self.port.memory.store(np.asarray(combine(self.reduction, low, high)),
                                                                  self.layout))


def chunk_bounds(sizes: list[int]) -> list[int]:
    """Where each chunk of the given sizes starts in the flat vector, and where the last ends."""
    return np.concatenate([[0], np.cumsum(np.asarray(sizes, np.int64))]).astype(np.int64).tolist()

