"""The ring reduce-scatter and all-gather, over one ring or several at once (lanes): each step every lane
sends, then every lane receives.

Reduce-scatter: the flattened operand is cut into n chunks (the sizes of `numpy.array_split`: `split`);
chunk c is folded into the identity in the ring order c+1, c+2, ..., n-1, 0, 1, ..., c, each member passing
its partial sum of one chunk to the next member, which adds its own term, so member c ends with chunk c
complete. All-gather: the complete chunks travel around the ring in n - 1 more steps. Where one lane runs,
the steps go as tables when they may (`collectives._ring_steps`: the same messages). Used by psum's 'ring',
'per_axis' and 'hierarchical' and by psum_scatter.

Worked example, 3 members with terms [a0, a1, a2], [b0, b1, b2], [c0, c1, c2]: after the reduce-scatter
member 0 holds (id + b0 + c0) + a0, member 1 (id + c1 + a1) + b1, member 2 (id + a2 + b2) + c2; after the
all-gather every member holds all three.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from itertools import pairwise

import numpy as np

import sim
from collectives import _ring_steps as ring_steps
from collectives._algorithms import Team, ring_team
from collectives._arithmetic import combine, started
from collectives._common import pack_slice, received, row_major, unpack_into
from collectives._joint import Cut, cut, joint, staged
from layouts import Layout

__all__ = ["Lane", "reduce_scatter_lanes", "ring_all_gather", "ring_all_reduce", "ring_reduce_scatter", "split",
           "staging"]

Lane = tuple[Team, np.ndarray, str]  # (the ring's members in order, this member's flat terms, a phase prefix)


def ring_all_reduce(port: sim.Port, lanes: list[Lane], reduction: str) -> Generator:
    """Ring reduce-scatter then ring all-gather of every lane at once; the lanes' results joined, flat."""
    n = lanes[0][0].size
    pieces = [cut(terms, n) for _, terms, _ in lanes]
    mine = yield from reduce_scatter_lanes(
        port, [(team, parts, phase) for (team, _, phase), parts in zip(lanes, pieces)], reduction)
    total = sum(terms.size for _, terms, _ in lanes)
    # keyed by the lanes' phases: a call that runs several passes ('per_axis') gets a new buffer for each
    flat = joint(port, ("all-gather", *(phase for _, _, phase in lanes)), lanes[0][1].dtype, (total,))
    bounds = np.cumsum([0] + [terms.size for _, terms, _ in lanes])
    gathers = [(team, m, cut(flat[bounds[k]:bounds[k + 1]], n), phase)
               for k, ((team, _, phase), m) in enumerate(zip(lanes, mine))]
    yield from ring_all_gather(port, gathers)
    return flat


def ring_reduce_scatter(port: sim.Port, parts: Sequence[np.ndarray], reduction: str) -> Generator:
    """Fold chunk c of every member's `parts` around the group's ring so that member c ends with it complete.

    `parts[c]` is this member's own term for chunk c, a view of its memory, read in row-major order
    (packed first by a timed step where that order is strided). Returns the complete chunk of this
    member's index.
    """
    team = ring_team(port)
    arranged = parts if team.order is None else team.arrange(list(parts))  # a Cut stays one, uncut
    return (yield from reduce_scatter_lanes(port, [(team, arranged, "")], reduction))[0]


def reduce_scatter_lanes(port: sim.Port, lanes: Sequence[tuple[Team, list, str]], reduction: str) -> Generator:
    """`ring_reduce_scatter` over several rings at once (each step: every lane sends, then every lane receives).

    In each lane chunk c is folded into the identity in the ring order c+1, c+2, ..., c; each partial sum
    lives in its own row-major buffer, written once, so a view in flight is never overwritten. Returns each
    lane's complete chunk of the caller's ring position.
    """
    memory, states = port.memory, []
    for team, parts, phase in lanes:
        own = parts if isinstance(parts, Cut) else list(parts)  # a Cut's units are contiguous
        if not isinstance(own, Cut) and not all(part.flags.c_contiguous for part in own):
            own = []
            for c, part in enumerate(parts):  # a contiguous part is its own row-major values (no step, no copy)
                own.append(part if part.flags.c_contiguous else (yield from row_major(port, part, chunk=c)))
        partial = (len(lanes) == 1 and staged(port, phase + "partials", own)) or staging(memory, own)
        c = (team.index - 1) % team.size
        partial[c][...] = started(reduction, own[c])
        states.append([team, phase, own, partial, c])
    if len(lanes) == 1 and lanes[0][0].size > 1 and ring_steps.by_tables(port, phase + "reduce-scatter", own[0],
                                                                          reduction):
        yield from ring_steps.reduce_scatter(port, team, own, partial, reduction, phase + "reduce-scatter")
        return [partial[team.index]]
    for step in range(lanes[0][0].size - 1 if lanes else 0):
        for team, phase, _, partial, c in states:
            payload, header = yield from pack_slice(port, partial[c], Layout.row_major(partial[c].ndim))
            port.send(team.at(1), payload, tag=(phase + "reduce-scatter", step), header=header,
                      phase=phase + "reduce-scatter", step=step, chunk=c)
        for state in states:
            team, phase, own, partial, c = state
            state[4] = c = (c - 1) % team.size
            message = yield port.recv(team.at(-1), tag=(phase + "reduce-scatter", step))
            yield from sim.add_step(port, own[c].nbytes, step=step, chunk=c)
            partial[c][...] = combine(reduction, received(message), own[c])
    return [partial[c] for _, _, _, partial, c in states]


def ring_all_gather(port: sim.Port, lanes: list[tuple[Team, np.ndarray, list[np.ndarray], str]]) -> Generator:
    """Pass each lane's complete chunks around its ring into `chunks` (1-D row-major views), own chunk first."""
    for team, mine, chunks, _ in lanes:
        chunks[team.index][...] = mine
    if len(lanes) == 1 and lanes[0][0].size > 1:
        team, _, chunks, phase = lanes[0]
        if ring_steps.by_tables(port, phase + "all-gather", chunks[0]):
            order = list(range(team.size))
            yield from ring_steps.gather(port, team, chunks, order, phase + "all-gather", "chunk")
            return
    for step in range(lanes[0][0].size - 1):
        for team, _, chunks, phase in lanes:
            c = (team.index - step) % team.size
            payload, header = yield from pack_slice(port, chunks[c], Layout.row_major(1))
            port.send(team.at(1), payload, tag=(phase + "all-gather", step), header=header,
                      phase=phase + "all-gather", step=step, chunk=c)
        for team, _, chunks, phase in lanes:
            c = (team.index - 1 - step) % team.size
            message = yield port.recv(team.at(-1), tag=(phase + "all-gather", step))
            yield from unpack_into(port, message, chunks[c], chunk=c)


def split(flat: np.ndarray, n: int) -> list[np.ndarray]:
    """`numpy.array_split(flat, n)` of a 1-D array: the same views, made by plain slicing.

    >>> [part.tolist() for part in split(np.arange(5), 3)]
    [[0, 1], [2, 3], [4]]
    """
    q, r = divmod(len(flat), n)
    bounds = np.minimum(np.arange(n + 1), r) + np.arange(n + 1) * q
    return [flat[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


def staging(memory: sim.LocalMemory, like: Sequence[np.ndarray]) -> list[np.ndarray] | np.ndarray:
    """Zeroed buffers of the shapes of `like`, as views of one new row-major array of `memory` (the bytes
    of one allocation per chunk, in one allocation). One allocation each where their dtypes differ."""
    dtypes = {part.dtype for part in like}
    if len(dtypes) != 1:
        return [memory.view(memory.alloc(part.dtype, part.shape)) for part in like]
    sizes = [part.size for part in like]
    flat = memory.view(memory.alloc(dtypes.pop(), (sum(sizes),)))
    if isinstance(like, np.ndarray):  # equal parts along the first axis
        return flat.reshape(like.shape)
    shapes = {part.shape for part in like}
    if len(shapes) == 1 and like[0].shape:  # rows of one array (0-d rows would be scalars)
        return list(flat.reshape((len(like), *like[0].shape)))
    bounds = np.cumsum([0, *sizes]).tolist()
    if all(len(shape) == 1 for shape in shapes):  # 1-D parts: plain slices
        return [flat[a:b] for a, b in pairwise(bounds)]
    return [flat[a:b].reshape(part.shape) for (a, b), part in zip(pairwise(bounds), like)]
