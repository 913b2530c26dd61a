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
from collectives._arithmetic import combine, identity
from collectives._common import pack_slice, received, unpack_into
from layouts import Layout


def _fresh(port: sim.Port, dtype: np.dtype, size: int) -> np.ndarray:
    return port.memory.view(port.memory.alloc(dtype, (size,)))


def halving_reduce_scatter(port: sim.Port, terms: np.ndarray, bounds: list[int], reduction: str) -> Generator:
    """This member's chunk of the reduction of every member's flat `terms` (a new 1-D buffer)."""
    members, me, n = port.group.members, port.group.index, port.group.size
    partial = _fresh(port, terms.dtype, terms.size)
    partial[...] = combine(reduction, identity(reduction, terms.dtype), terms)
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


def chunk_bounds(sizes: list[int]) -> list[int]:
    """Where each chunk of the given sizes starts in the flat vector, and where the last ends."""
    return [int(b) for b in np.cumsum([0, *sizes])]

