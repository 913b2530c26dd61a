"""all_gather's algorithms besides 'direct': blocks passed round rings, doubled, or gathered one axis at a time.

Each works on a row-major buffer of the group's blocks in group order (shape (n, *x.shape)): the result's
own memory when its blocks lie there as one contiguous run (gathering along axis 0 into a row-major
result), else a buffer whose blocks are unpacked into the result at the end by one timed step. The own
block enters it packed into row-major order (a timed step where the operand is laid out otherwise).

- 'ring' (n - 1 steps): at step s member i sends block i - s to member i + 1 and receives block i - 1 - s.
- 'bidirectional_ring' (n // 2 steps, `collectives._bidirectional`): each block goes clockwise to the next
  n // 2 members and counter-clockwise to the previous ones, relayed hop by hop in both directions at
  once; where n is even the block of the member opposite comes half each way round.
- 'recursive_doubling' (log2(n) steps, n a power of two): at step k member i swaps the 2^k blocks it holds
  (a contiguous run) with member i XOR 2^k.
- 'hierarchical' (`collectives._hierarchical`): round a ring of the members of the same local rank across
  nodes, then every block held to every member of the node in one step (without nodes: as 'direct').
- 'per_axis': a ring along each named mesh axis in turn, the minor one first; after the axis k step a
  member holds every block whose index differs from its own only along axes k.. (one contiguous run).
- 'multi_axis': the blocks cut into one part per named axis, the parts gathered at the same time, each by
  bidirectional rings along the axes in its own rotation (`collectives._multi_axis`).

Every block travels unchanged, so every algorithm gives 'direct''s bytes.
"""

from __future__ import annotations

import math
from collections.abc import Generator

import numpy as np

import sim
from collectives import _bidirectional as bidirectional
from collectives import _direct_rows as direct_rows
from collectives import _doubling_rows as doubling_rows
from collectives import _hierarchical as hierarchical
from collectives import _multi_axis as multi_axis
from collectives import _ring_steps as ring_steps
from collectives._algorithm import (
    Algorithm,
    Pattern,
    Step,
    auto_of,
    bidirectional_form,
    bidirectional_messages,
    bidirectional_steps,
    doubling,
    lg,
    on_group,
    pairs,
)
from collectives._algorithm import whole as whole_operand
from collectives._algorithms import Team, axis_teams, blocks_of, ring_team
from collectives._common import pack_slice, unpack_into, unpack_values
from collectives._joint import Cut, joint
from layouts import Layout


def gather_blocks(port: sim.Port, source: np.ndarray, result: np.ndarray, axis: int, tiled: bool,
                  algorithm: Algorithm, shape: tuple[int, ...]) -> Generator:
    """Fill `result` (this member's output view) with every member's `source` by `algorithm`."""
    n = port.group.size
    target = blocks_of(result, axis, n, tiled)
    work = target if target.flags.c_contiguous else _alloc(port, (n, *source.shape), source.dtype)
    own, _ = yield from pack_slice(port, source, Layout.row_major(source.ndim), phase="operand")
    work[port.group.index, ...] = own
    if algorithm is RING:
        team = ring_team(port)
        yield from ring(port, team, work, "ring")
    elif algorithm is BIDIRECTIONAL_RING:
        team = ring_team(port)
        yield from bidirectional.all_gather(port, team, Cut.blocks(work, team.order), "")
    elif algorithm is RECURSIVE_DOUBLING:
        yield from _doubling(port, work)
    elif algorithm is HIERARCHICAL:
        yield from _hierarchical(port, work)
    elif algorithm is MULTI_AXIS:
        yield from multi_axis.all_gather(port, work.reshape(n, -1), shape)
    else:
        grid = work.reshape((*shape, *source.shape))
        for k, team in axis_teams(port, shape):
            coords = np.unravel_index(port.group.index, shape)
            yield from ring(port, team, grid[tuple(coords[:k])], f"axis {k}")
    if work is not target:
        yield from unpack_values(port, work, tuple(range(work.ndim)), target, phase="result")
    return result


def result_buffer(port: sim.Port, dtype: np.dtype, shape: tuple[int, ...], layout: Layout | None) -> np.ndarray:
    """The member's result buffer: row-major (`layout` None or row-major), a row of one array shared by the
    call's members (`collectives._joint.joint`), so a step's blocks move as one copy; else a plain allocation."""
    if layout is None or layout == Layout.row_major(len(shape)):
        return joint(port, "result", dtype, shape)
    return port.memory.view(port.memory.alloc(dtype, shape, layout))


def _alloc(port: sim.Port, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return joint(port, "blocks", dtype, shape)


def ring(port: sim.Port, team: Team, blocks: np.ndarray, phase: str) -> Generator:
    """Pass the blocks round `team`: team position t holds `blocks[team.order[t]]` (`blocks[t]` when the team
    has no order), the caller's own already filled; each block is contiguous."""
    n, me = team.size, team.index
    order = list(range(n)) if team.order is None else list(team.order)
    if n > 1 and ring_steps.by_tables(port, phase, blocks[order[0]]):
        yield from ring_steps.gather(port, team, blocks, order, phase, "block")
        return
    units = [blocks[g, ...] for g in order]
    for step in range(n - 1):
        c = (me - step) % n
        port.send(team.at(1), units[c], tag=(phase, step), header={}, phase=phase, step=step, block=c)
        c = (me - 1 - step) % n
        message = yield port.recv(team.at(-1), tag=(phase, step))
        yield from unpack_into(port, message, units[c], block=c)


def _hierarchical(port: sim.Port, work: np.ndarray) -> Generator:
    """Round a ring of the members of the caller's local rank across nodes, then every block held to every
    member of the node in one direct step (`collectives._hierarchical`)."""
    order, (nodes, k) = hierarchical.grid(port)
    node, across = hierarchical.node_teams(port)
    yield from ring(port, across, work, "inter-node")
    units = direct_rows.blocks(work, order, nodes, k)
    yield from hierarchical.all_gather(port, node, units, "intra-node")


def _doubling(port: sim.Port, work: np.ndarray) -> Generator:
    """Swap the held run of blocks with the member whose index differs in bit k, k = 0, 1, ..."""
    members, me, n = port.group.members, port.group.index, port.group.size
    if n > 1 and ring_steps.by_tables(port, "recursive-doubling", work[0]):
        count = n.bit_length() - 1
        if doubling_rows.by_rows(port, work.dtype):  # the blocks as chunks of the flat buffer
            block = work[0].size
            copies = port.once(("rows", "recursive-doubling"), lambda: doubling_rows.Copies(
                port, np.arange(n + 1) * block, "blocks", work.dtype.itemsize))
            yield from copies.join(port, work.reshape(-1))
            return
        yield from ring_steps.per_member(port, "recursive-doubling", count, [me ^ (1 << s) for s in range(count)],
                                         _Doubling(work, me))
        return
    distance = 1
    while distance < n:
        partner, step = me ^ distance, distance.bit_length() - 1
        mine, theirs = me & ~(distance - 1), partner & ~(distance - 1)
        port.send(members[partner], work[mine:mine + distance], tag=("doubling", step), header={},
                  phase="recursive-doubling", step=step, blocks=(mine, mine + distance))
        message = yield port.recv(members[partner], tag=("doubling", step))
        yield from unpack_into(port, message, work[theirs:theirs + distance], step=step)
        distance *= 2


class _Doubling:
    """`_doubling`'s messages of one member, for `collectives._ring_steps.PerMember`."""

    def __init__(self, work: np.ndarray, me: int) -> None:
        self.work, self.me = work, me

    def send(self, step: int, way: int) -> tuple[np.ndarray, dict]:
        distance = 1 << step
        mine = self.me & ~(distance - 1)
        return self.work[mine:mine + distance], {"phase": "recursive-doubling", "step": step,
                                                  "blocks": (mine, mine + distance)}

    def receive(self, step: int, way: int, payload: np.ndarray) -> None:
        distance = 1 << step
        theirs = (self.me ^ distance) & ~(distance - 1)
        self.work[theirs:theirs + distance] = payload


# ---------------------------------------------------------------------------------------------- the records


def _per_axis_steps(shape: tuple[int, ...], b: float) -> list[Step]:
    """A ring along each grid axis, the minor axis first, passing the blocks gathered so far."""
    steps, held = [], b
    for axis in reversed(range(len(shape))):
        steps.append((Pattern("shift", 1, axis), held, shape[axis] - 1))
        held *= shape[axis]
    return steps


def _ring_form(p: int, n: float, a: float, b: float) -> float:
    return (p - 1) * a + (p - 1) / p * n * b


DIRECT = Algorithm(
    "direct", "direct: every member sends its whole operand to every member (itself included) in one step; the "
              "block of member k lands at position k of every member's result.",
    pairs(whole_operand), lambda shape: math.prod(shape) - 1, 1, reorders=False)
RING = Algorithm(
    "ring", "ring: in each of n - 1 steps every member passes one block to the next member.",
    on_group(lambda p, b: [(Pattern("shift", 1), b, p - 1)]), lambda shape: math.prod(shape) - 1, 2,
    reorders=False, closed_form=_ring_form)
BIDIRECTIONAL_RING = Algorithm(
    "bidirectional_ring", "bidirectional ring: every member's block goes clockwise to the next n // 2 members and "
                          "counter-clockwise to the previous ones, each member forwarding both ways at each step "
                          "what it received the step before: n // 2 steps (ceil((n - 1) / 2)); for even n the "
                          "block of the member opposite comes half each way round.",
    on_group(lambda p, b: bidirectional_steps(p, b)), lambda shape: bidirectional_messages(math.prod(shape)), 2,
    reorders=False, closed_form=lambda p, n, a, b: bidirectional_form(p, n / p, a, b))
RECURSIVE_DOUBLING = Algorithm(
    "recursive_doubling", "recursive doubling: in step s every member swaps all the blocks it holds with the "
                          "member whose group index differs in bit s; log2(n) steps.",
    on_group(doubling), lambda shape: lg(math.prod(shape)), 1, reorders=False, power_of_two=True,
    closed_form=lambda p, n, a, b: lg(p) * a + (p - 1) / p * n * b)
PER_AXIS = Algorithm(
    "per_axis", "per axis: the blocks travel round a ring along each named mesh axis in turn, the last named "
                "first (over one axis: the ring algorithm).",
    _per_axis_steps, lambda shape: sum(s - 1 for s in shape), 2, reorders=False, grid=True, inner=RING)
MULTI_AXIS = Algorithm(
    "multi_axis", "multi axis: every block is cut into one part per named mesh axis and the parts travel at the "
                  "same time, part r through the axes in the r-th rotation of their order, each phase a "
                  "bidirectional ring along one axis, so every axis's links carry one part at a time (over one "
                  "axis: the bidirectional ring).",
    multi_axis.gather_schedule, multi_axis.ring_messages, 3, reorders=False, grid=True, inner=BIDIRECTIONAL_RING,
    closed_form=BIDIRECTIONAL_RING.closed_form)
HIERARCHICAL = hierarchical.ALL_GATHER
ALGORITHMS = (DIRECT, RING, BIDIRECTIONAL_RING, RECURSIVE_DOUBLING, PER_AXIS, MULTI_AXIS, HIERARCHICAL)
ALGORITHMS += (auto_of(ALGORITHMS),)
