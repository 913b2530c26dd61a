"""all_to_all's algorithms besides 'direct': pairwise exchange, Bruck's, and one mesh axis at a time.

Each member starts from its chunks (`chunks[j]` goes to member j) and writes the chunk from member s at
block s of its result (`blocks`, a view with the blocks along `concat_axis` leading). Every chunk travels
unchanged, so every algorithm gives 'direct''s bytes.

- 'pairwise' (n - 1 steps): at step k member i sends its chunk for member i + k and receives the chunk of
  member i - k, waiting for it before the next step; its own chunk is a message to itself first.
- 'bruck' (ceil(log2(n)) steps, any n): the chunks are rotated so that slot k holds the one for member
  i + k; at step k every slot whose index has bit k set travels, packed into one message, to member
  i + 2^k (a timed pack and unpack); a last rotation puts the chunk from member s at block s. Positions
  i go round the topology's ring where that crosses fewer links (`collectives._hop_order.cyclic_order`).
- 'per_axis' (one step per named mesh axis): slots form the grid of the axes; along axis k each member
  sends the slots whose coordinate k is t to the member whose coordinate k is t, who stores them at its
  own coordinate (after every axis, slot s holds the chunk from member s).
- 'multi_axis' (one phase per named mesh axis): every slot cut into one part per axis, the parts exchanged
  at the same time, part r along the axes in the r-th rotation of their order (`collectives._multi_axis`).
"""

from __future__ import annotations

import math
from collections.abc import Generator

import numpy as np

import sim
from collectives import _multi_axis as multi_axis
from collectives._algorithm import Algorithm, Pattern, Step, auto_of, lg, on_group, pairs, part
from collectives._algorithms import Team, axis_teams
from collectives._common import pack_slice, unpack_into, unpack_values
from collectives._hop_order import cyclic_order
from layouts import Layout


def exchange(port: sim.Port, algorithm: Algorithm, chunks: list[np.ndarray], layout: Layout, blocks: np.ndarray,
             rows: list[tuple[int, int]], shape: tuple[int, ...]) -> Generator:
    """Fill `blocks[s]` with member s's chunk for this member by `algorithm` ('pairwise', 'bruck', 'per_axis').

    `layout` is the operand's (chunks are views of it); `rows[j]` is where the caller's chunk lands at
    member j along `concat_axis` (recorded on pairwise messages, which go straight to their receivers)."""
    if algorithm is PAIRWISE:
        yield from _pairwise(port, chunks, layout, blocks, rows)
        return
    slots = _alloc(port, blocks.shape, blocks.dtype)
    n = port.group.size
    team = _bruck_team(port) if algorithm is BRUCK else None
    place = list(range(n)) if team is None else list(team.order or range(n))  # group index at each position
    order = [place[(team.index + k) % n] for k in range(n)] if team is not None else list(range(n))
    for slot, j in enumerate(order):
        values, _ = yield from pack_slice(port, chunks[j], Layout.row_major(chunks[j].ndim), chunk=j)
        slots[slot, ...] = values.reshape(blocks.shape[1:])
    if algorithm is BRUCK:
        slots = yield from _bruck(port, team, slots)
        position = {g: i for i, g in enumerate(place)}
        slots = slots[[(team.index - position[s]) % n for s in range(n)]]
    elif algorithm is MULTI_AXIS:
        slots = yield from multi_axis.exchange(port, slots, shape)
    else:
        slots = yield from _per_axis(port, slots, shape)
    yield from unpack_values(port, slots, tuple(range(slots.ndim)), blocks, phase="result")


def _alloc(port: sim.Port, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return port.memory.view(port.memory.alloc(dtype, shape))


def _pairwise(port: sim.Port, chunks: list[np.ndarray], layout: Layout, blocks: np.ndarray,
              rows: list[tuple[int, int]]) -> Generator:
    members, me, n = port.group.members, port.group.index, port.group.size
    for k in range(n):
        dst, src = (me + k) % n, (me - k) % n
        payload, header = yield from pack_slice(port, chunks[dst], layout, slice=dst)
        port.send(members[dst], payload, tag=("pairwise", k), header=header, step=k, slice=dst, rows=rows[dst])
        message = yield port.recv(members[src], tag=("pairwise", k))
        yield from unpack_into(port, message, blocks[src, ...], slice=src)


def _runs(indices: list[int]) -> int:
    """How many runs of consecutive slots `indices` (ascending) make."""
    return sum(1 for k, i in enumerate(indices) if k == 0 or indices[k - 1] != i - 1)


def _bruck_team(port: sim.Port) -> Team:
    """The group in the order Bruck's steps go round (`collectives._hop_order.cyclic_order`)."""
    members = port.group.members
    order = port.once("bruck order", lambda: cyclic_order(port.mesh, members))
    return Team(tuple(members[g] for g in order), order.index(port.group.index), order)


def _bruck(port: sim.Port, team: Team, slots: np.ndarray) -> Generator:
    """Bruck's steps on the rotated slots round `team`; slot j ends holding the chunk from position i - j."""
    n = team.size
    step, distance = 0, 1
    while distance < n:
        moving = [j for j in range(n) if j & distance]
        payload = np.ascontiguousarray(slots[moving])  # Bruck packs the travelling slots into one message
        yield from sim.copy_step(port, "pack", payload.nbytes, _runs(moving), step=step)
        port.send(team.at(distance), payload, tag=("bruck", step), header={}, phase="bruck", step=step,
                  slots=len(moving))
        message = yield port.recv(team.at(-distance), tag=("bruck", step))
        yield from sim.copy_step(port, "unpack", payload.nbytes, _runs(moving), step=step)
        slots[moving] = message.payload  # the sent slots left as a packed copy: overwriting them is safe
        step, distance = step + 1, distance * 2
    return slots


def _at(k: int, t: int) -> tuple:
    """The index of the slots whose grid coordinate k is t."""
    return (slice(None),) * k + (t, ...)


def _per_axis(port: sim.Port, slots: np.ndarray, shape: tuple[int, ...]) -> Generator:
    """One direct exchange along each axis of the grid `shape`, the minor axis first."""
    grid = slots.reshape(shape + slots.shape[1:])
    for k, team in axis_teams(port, shape):
        fresh = _alloc(port, grid.shape, grid.dtype)
        for t, dst in enumerate(team.members):
            if t == team.index:
                fresh[_at(k, t)] = grid[_at(k, t)]
                continue
            payload, header = yield from pack_slice(port, grid[_at(k, t)], Layout.row_major(grid.ndim - 1), grid_axis=k)
            port.send(dst, payload, tag=("per-axis", k), header=header, phase=f"axis {k}", peer=t)
        for t, src in enumerate(team.members):
            if t != team.index:
                message = yield port.recv(src, tag=("per-axis", k))
                yield from unpack_into(port, message, fresh[_at(k, t)], grid_axis=k)
        grid = fresh
    return grid.reshape(slots.shape)


# ---------------------------------------------------------------------------------------------- the records


def _bruck_steps(p: int, b: float) -> list[Step]:
    """Bruck: step k sends the blocks whose index has bit k set, to index + 2^k."""
    return [(Pattern("shift", 1 << k), b / p * sum(1 for j in range(p) if j >> k & 1), 1) for k in range(lg(p))]


def _per_axis_steps(shape: tuple[int, ...], b: float) -> list[Step]:
    """One direct exchange along each grid axis, the minor axis first, 1/s of the operand to each member."""
    return [(Pattern("pairs", 0, axis), b / shape[axis], 1) for axis in reversed(range(len(shape)))]


def _pairwise_form(p: int, n: float, a: float, b: float) -> float:
    return (p - 1) * a + (p - 1) / p * n * b


def _fixed(messages: bool, count):
    """`count` as the messages a member sends, or None where the call's arguments decide (ragged's sizes)."""
    return count if messages else None


def direct(text: str, messages: bool = True) -> Algorithm:
    """'direct' for an exchange: every member sends each member its share at once (`text` says how); a member
    sends n - 1 messages, or (`messages=False`) as many as the call's arguments say."""
    return Algorithm("direct", text, pairs(part), _fixed(messages, lambda shape: math.prod(shape) - 1), 1,
                     reorders=False)


def pairwise(text: str, messages: bool = True) -> Algorithm:
    """'pairwise' for an exchange: p - 1 steps, to i + k and from i - k (`text` says what travels; `messages`
    as for `direct`)."""
    return Algorithm("pairwise", text, lambda shape, b: [(Pattern("shifts"), b / math.prod(shape), 1)],
                     _fixed(messages, lambda shape: math.prod(shape) - 1), 1, reorders=False,
                     closed_form=_pairwise_form)


def _with_bit(p: int, k: int) -> int:
    """How many of the slots 0 .. p - 1 have bit k set: the chunks Bruck's step k sends (p/2 for p a power of
    two, which gives its closed form lg(p)a + (n/2)lg(p)b)."""
    return (p >> (k + 1) << k) + max(0, p % (1 << (k + 1)) - (1 << k))


DIRECT = direct("direct: every member sends chunk j of its operand to member j, all at once: one step.")
PAIRWISE = pairwise("pairwise: in step k member i sends its chunk for member i + k and receives member i - k's.")
BRUCK = Algorithm(
    "bruck", "Bruck: the chunks are rotated, then in step k every slot whose index has bit k set travels, packed "
             "into one message, to member i + 2^k; a last rotation puts them in place: ceil(log2(n)) steps.",
    on_group(_bruck_steps), lambda shape: lg(math.prod(shape)), 1, reorders=False,
    closed_form=lambda p, n, a, b: lg(p) * a + n / p * sum(_with_bit(p, k) for k in range(lg(p))) * b)
PER_AXIS = Algorithm(
    "per_axis", "per axis: the exchange runs along each named mesh axis in turn, the last named first (over one "
                "axis: the direct algorithm).",
    _per_axis_steps, lambda shape: sum(s - 1 for s in shape), 2, reorders=False, grid=True, inner=DIRECT)
MULTI_AXIS = Algorithm(
    "multi_axis", "multi axis: every chunk is cut into one part per named mesh axis and the parts are exchanged at "
                  "the same time, part r directly along the axes in the r-th rotation of their order, so every "
                  "axis's links carry one part at a time (over one axis: the direct algorithm).",
    multi_axis.exchange_schedule, multi_axis.exchange_messages, 3, reorders=False, grid=True, inner=DIRECT)
ALGORITHMS = (DIRECT, PAIRWISE, BRUCK, PER_AXIS, MULTI_AXIS)
ALGORITHMS += (auto_of(ALGORITHMS),)
