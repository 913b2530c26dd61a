"""Multi-axis algorithms: every named mesh axis busy at once, the data cut into one part per axis.

'per_axis' runs an operation along one mesh axis after another, so while it works along one axis the links
of the others sit idle. 'multi_axis' cuts each member's data into d parts (d named axes, `numpy.array_split`
of the flat block or chunk) and runs the parts at the same time, each going through the axes in its own
rotation, so that in every phase each axis carries exactly one part (How to Scale Your Model, "Sharded
Matrices": an AllGather over several axes takes V / (W_bidi d)). Part r gathers along the grid axes
`gather_orders(d)[r]`: the minor axis first for part 0 (as 'per_axis'), then each rotation of that order.
Each phase along an axis is a bidirectional ring (`collectives._bidirectional`) for all_gather and
reduce-scatter, a direct exchange for all_to_all.

- all_gather: part r of every block travels round the axes in its gather order; after its phase along
  axis k a member holds part r of every block whose index differs from its own only along the axes done.
  Part r lives in a buffer whose grid axes run from the last gathered (major) to the first (minor), so
  each phase's units are contiguous runs; the parts are copied into the result at the end.
- reduce-scatter: the transpose, each part reduced along its axes in the reverse order (the major axis
  of its buffer first), so that member j ends with part r of chunk j summed over the whole group.
  Each element is n - 1 additions in another binary tree (`SUM_BOUND`).
- all-reduce: the operand padded with the reduction's identity to n d q elements (q = ceil(size / (n d))),
  reduce-scattered as n chunks of d q, then all-gathered, both in the multi-axis form.
- all_to_all: slot s of a member (its chunk for member s) cut into d parts; part r is exchanged directly
  along each axis in its gather order, as 'per_axis' does with the whole slots.

Worked example, a 2 x 2 grid {'x': 2, 'y': 2}, all_gather of 4-element blocks: part 0 (elements 0:2)
gathers along y then x, part 1 (elements 2:4) along x then y. Phase 0: member (0, 0) sends its part 0 to
(0, 1) and its part 1 to (1, 0), both at once on different links; phase 1: it sends part 0 of the blocks
of (0, 0) and (0, 1) to (1, 0), and part 1 of the blocks of (0, 0) and (1, 0) to (0, 1). On a torus of d
axes of s members (N = s^d) with blocks of b bytes it takes d (s // 2) hop latencies and (N - 1) b / (2d)
bytes through each link direction, against (N - 1) b / 2 for a bidirectional ring round the whole group: the
bandwidth term falls d-fold.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from itertools import zip_longest

import numpy as np

import sim
from collectives import _bidirectional as bidirectional
from collectives._algorithm import Pattern, Step, bidirectional_messages, bidirectional_steps
from collectives._algorithms import axis_teams
from collectives._arithmetic import identity
from collectives._common import pack_slice, unpack_into, unpack_values
from layouts import Layout

Shape = tuple[int, ...]


def gather_orders(d: int) -> list[tuple[int, ...]]:
    """The grid axes each of the d parts goes through, in turn (rotations of minor-to-major order).

    >>> gather_orders(3)
    [(2, 1, 0), (1, 0, 2), (0, 2, 1)]
    """
    base = tuple(reversed(range(d)))
    return [base[r:] + base[:r] for r in range(d)]


def _bounds(size: int, d: int) -> list[int]:
    """Where each of d parts of `size` elements starts (`numpy.array_split`'s sizes), and the end."""
    return [int(b) for b in np.cumsum([0] + [len(p) for p in np.array_split(np.empty(size, np.int8), d)])]


def _alloc(port: sim.Port, shape: Shape, dtype: np.dtype) -> np.ndarray:
    return port.memory.view(port.memory.alloc(dtype, shape))


# ---------------------------------------------------------------------------------------------- protocols


def all_gather(port: sim.Port, work: np.ndarray, shape: Shape) -> Generator:
    """Fill `work` (row-major, one block per group index, the caller's own filled) with every member's block."""
    n, d, me = work.shape[0], len(shape), port.group.index
    flat, coords = work.reshape(n, -1), np.unravel_index(me, shape)
    bounds, orders, teams = _bounds(flat.shape[1], d), gather_orders(d), dict(axis_teams(port, shape))
    parts = []
    for r, order in enumerate(orders):
        perm = order[::-1]
        part = _alloc(port, (*(shape[k] for k in perm), bounds[r + 1] - bounds[r]), work.dtype)
        part[tuple(coords[k] for k in perm)] = flat[me, bounds[r]:bounds[r + 1]]
        parts.append(part)
    for i in range(d):
        lanes = []
        for r, order in enumerate(orders):
            held = parts[r][tuple(coords[k] for k in order[:i:-1])]  # the axes still to gather, at the caller's
            k = order[i]
            lanes.append((teams[k], [held[t].reshape(-1) for t in range(shape[k])], f"part {r} axis {k}"))
        yield from bidirectional.all_gather_lanes(port, lanes)
    grid = flat.reshape(*shape, flat.shape[1])
    for r, order in enumerate(orders):
        target = grid[..., bounds[r]:bounds[r + 1]].transpose(*order[::-1], d)
        yield from unpack_values(port, parts[r], tuple(range(d + 1)), target, phase="result", part=r)


def reduce_scatter(port: sim.Port, terms: np.ndarray, shape: Shape, reduction: str) -> Generator:
    """Reduce `terms` (n rows: row j this member's term for chunk j) so that this member ends with its own
    row reduced over the group; returns it as a new flat buffer."""
    d = len(shape)
    bounds, orders, teams = _bounds(terms.shape[1], d), gather_orders(d), dict(axis_teams(port, shape))
    grid, held = terms.reshape(*shape, terms.shape[1]), []
    for r, order in enumerate(orders):
        view = grid[..., bounds[r]:bounds[r + 1]].transpose(*order[::-1], d)
        values, _ = yield from pack_slice(port, view, Layout.row_major(d + 1), part=r)
        held.append(values)
    for i in range(d):
        lanes = []
        for r, order in enumerate(orders):
            k = order[d - 1 - i]
            lanes.append((teams[k], [held[r][t] for t in range(shape[k])], f"part {r} axis {k}"))
        mine = yield from bidirectional.reduce_scatter_lanes(port, lanes, reduction)
        held = [m.reshape(h.shape[1:]) for m, h in zip(mine, held)]
    out = _alloc(port, (terms.shape[1],), terms.dtype)
    for r in range(d):
        out[bounds[r]:bounds[r + 1]] = held[r]
    return out


def all_reduce(port: sim.Port, flat: np.ndarray, shape: Shape, reduction: str) -> Generator:
    """`flat` reduced over the group: padded with the identity to n chunks of d parts of q elements each,
    reduce-scattered, then all-gathered; returns a new flat buffer of `flat.size` elements."""
    n, d = math.prod(shape), len(shape)
    q = -(-flat.size // (n * d))
    padded = _alloc(port, (n, d * q), flat.dtype)
    padded[...] = identity(reduction, flat.dtype)
    padded.reshape(-1)[:flat.size] = flat
    mine = yield from reduce_scatter(port, padded, shape, reduction)
    work = _alloc(port, (n, d * q), flat.dtype)
    work[port.group.index] = mine
    yield from all_gather(port, work, shape)
    return work.reshape(-1)[:flat.size]


def exchange(port: sim.Port, slots: np.ndarray, shape: Shape) -> Generator:
    """all_to_all's slots (row-major, slot s this member's chunk for member s) exchanged so that slot s holds
    member s's chunk for this member; returns the new slots."""
    n, d = slots.shape[0], len(shape)
    flat = slots.reshape(n, -1)
    bounds, orders, teams = _bounds(flat.shape[1], d), gather_orders(d), dict(axis_teams(port, shape))
    grids = [flat[:, bounds[r]:bounds[r + 1]].reshape(*shape, bounds[r + 1] - bounds[r]) for r in range(d)]
    for i in range(d):
        moves = [(r, order[i], teams[order[i]]) for r, order in enumerate(orders)]
        for r, k, team in moves:
            for t, dst in enumerate(team.members):
                if t != team.index:
                    payload, header = yield from pack_slice(port, grids[r][_at(k, t)], Layout.row_major(d), part=r)
                    port.send(dst, payload, tag=("multi-axis", r, i), header=header, phase=f"part {r} axis {k}",
                              peer=t)
        fresh = []
        for r, k, team in moves:
            new = _alloc(port, grids[r].shape, slots.dtype)
            new[_at(k, team.index)] = grids[r][_at(k, team.index)]
            for t, src in enumerate(team.members):
                if t != team.index:
                    message = yield port.recv(src, tag=("multi-axis", r, i))
                    yield from unpack_into(port, message, new[_at(k, t)], part=r)
            fresh.append(new)
        grids = fresh
    out = _alloc(port, slots.shape, slots.dtype)
    for r in range(d):
        target = out.reshape(n, -1)[:, bounds[r]:bounds[r + 1]]
        yield from unpack_values(port, grids[r].reshape(n, -1), (0, 1), target, phase="result", part=r)
    return out


def _at(k: int, t: int) -> tuple:
    """The index of the grid entries whose coordinate k is t."""
    return (slice(None),) * k + (t, ...)


# ---------------------------------------------------------------------------------------------- schedules


def _lane(s: int, unit: float, axis: int, half_first: bool) -> list[tuple[Pattern, float]]:
    """One part's bidirectional phase along `axis` (s members, blocks of `unit` bytes), step by step."""
    found = []
    for pattern, each, repeat in bidirectional_steps(s, unit, half_first):
        found += [(Pattern(pattern.kind, pattern.k, axis), each)] * repeat
    return found


def concurrent(phases: Sequence[Sequence[list[tuple[Pattern, float]]]]) -> list[Step]:
    """Steps from phases of lanes (each lane step by step): the lanes' i-th steps run together, one pattern
    `alongside` the others; equal consecutive steps become one repeated step."""
    steps: list[Step] = []
    for lanes in phases:
        for together in zip_longest(*lanes):
            running = [x for x in together if x is not None]
            (first, each), rest = running[0], tuple(running[1:])
            pattern = Pattern(first.kind, first.k, first.axis, rest)
            if steps and steps[-1][0] == pattern and steps[-1][1] == each:
                steps[-1] = (pattern, each, steps[-1][2] + 1)
            else:
                steps.append((pattern, each, 1))
    return steps


def _above(shape: Shape, axes: Sequence[int]) -> int:
    return math.prod(shape[k] for k in axes)


def gather_schedule(shape: Shape, b: float) -> list[Step]:
    """all_gather of blocks of b bytes: part r's phase i along `gather_orders` axis, units b/d times the sizes
    of the axes it gathered before."""
    d, orders = len(shape), gather_orders(len(shape))
    return concurrent([[_lane(shape[o[i]], b / d * _above(shape, o[:i]), o[i], False) for o in orders]
                       for i in range(d)])


def scatter_schedule(shape: Shape, b: float) -> list[Step]:
    """Reduce-scatter of an operand of b bytes: part r reduced along its axes in reverse gather order."""
    d, orders = len(shape), gather_orders(len(shape))
    return concurrent([[_lane(shape[o[d - 1 - i]], b / d / _above(shape, o[d - 1 - i:]), o[d - 1 - i], True)
                        for o in orders] for i in range(d)])


def reduce_schedule(shape: Shape, b: float) -> list[Step]:
    """All-reduce of b bytes: the reduce-scatter, then the all-gather of the chunks (b / n each)."""
    return scatter_schedule(shape, b) + gather_schedule(shape, b / math.prod(shape))


def exchange_schedule(shape: Shape, b: float) -> list[Step]:
    """all_to_all of b bytes: part r exchanged directly along its axes, 1/s of the part to each of s members."""
    d, orders = len(shape), gather_orders(len(shape))
    return concurrent([[[(Pattern("pairs", 0, o[i]), b / d / shape[o[i]])] for o in orders] for i in range(d)])


def ring_messages(shape: Shape) -> int:
    """Messages a member sends in a multi-axis all-gather or reduce-scatter: each part's bidirectional
    phase on every axis."""
    return len(shape) * sum(bidirectional_messages(s) for s in shape)


def exchange_messages(shape: Shape) -> int:
    """Messages a member sends in a multi-axis all_to_all: each part to s - 1 members along every axis."""
    return len(shape) * sum(s - 1 for s in shape)
