"""Bidirectional rings of n // 2 steps (ceil((n - 1) / 2)): every link carries traffic both ways at each step.

On a team of n members, r = n // 2:

- all-gather: member i's block goes clockwise to members i + 1 .. i + r and counter-clockwise to members
  i - 1 .. i - r, relayed hop by hop: at step s every member forwards clockwise the block it received from
  its previous member at step s - 1 (its own at step 0), and counter-clockwise the one it received from its
  next member. Where n is even, the block of the member n/2 away would arrive both ways: its first half
  (`numpy.array_split`) travels clockwise, its second half counter-clockwise. So each direction of a link
  carries (n - 1)/2 blocks in all, and a block is r hops from its farthest reader, not n - 1.
- reduce-scatter, its transpose: member c's chunk is folded along two chains that end at c, the clockwise
  one starting at member c - r and the counter-clockwise one at member c + r; at each step a member adds
  its own term to the partial sum it received and passes it on (the first receiver of a chain folds the
  term it got into the identity first, so every chain starts as 'direct''s fold does). Where n is even,
  the member n/2 away starts both chains, with the first half of its term clockwise and the second half
  counter-clockwise. Member c adds its own term to the clockwise partial, then the counter-clockwise one:
  each element is n - 1 additions in another binary tree than the group-order fold (`SUM_BOUND`).

Worked example, n = 4 (r = 2): all-gather, member 0 sends block 0 to member 1 and block 0 to member 3
(step 0); at step 1 member 1 forwards the first half of block 0 to member 2, member 3 its second half.
Reduce-scatter, chunk 0: member 2 sends the first half of its chunk-0 term to member 3 and the second half
to member 1 (step 0); at step 1 member 3 sends (its term + that half) to member 0, member 1 likewise the
other way, and member 0 folds in its own term.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

import numpy as np

import sim
from collectives import _bidirectional_rows as bidirectional_rows
from collectives import _ring_steps as ring_steps
from collectives._algorithms import Team, group_index
from collectives._arithmetic import combine, started
from collectives._common import pack_slice, received, unpack_into
from collectives._joint import Cut, Decided, UnitRows, hollow
from layouts import Layout

_WAYS = ((1, "clockwise"), (-1, "counter-clockwise"))  # (the offset a message goes to, the direction's name)


def _phase(way: str, phase: str) -> str:
    return f"{way} {phase}" if phase else way


def steps(n: int) -> int:
    """How many steps a bidirectional ring of n members takes for one phase: ceil((n - 1) / 2)."""
    return n // 2


def _lane(flat: np.ndarray, offset: int, n: int, split: bool) -> slice:
    """The part of a block (flat) one direction carries: all of it, or where n is even and `split` its half
    (the first half clockwise, offset +1; the second half counter-clockwise)."""
    if not split or n % 2:
        return slice(0, flat.size)
    half = len(np.array_split(np.empty(flat.size, np.int8), 2)[0])
    return slice(0, half) if offset == 1 else slice(half, flat.size)


def all_gather(port: sim.Port, team: Team, units: Sequence[np.ndarray], phase: str) -> Generator:
    """Fill `units` (flat contiguous views, one per team position, the caller's own already filled) with every
    member's block, each forwarded both ways round `team` for `steps(n)` steps."""
    yield from all_gather_lanes(port, [(team, units, phase)])


Lane = tuple[Team, Sequence[np.ndarray], str]  # (a ring, this member's flat units or terms, the phase's name)


def all_gather_lanes(port: sim.Port, lanes: Sequence[Lane]) -> Generator:
    """`all_gather` round several rings at once (lanes with distinct phase names): at each step every lane
    still running sends both ways, then receives both ways; a lane of a smaller ring stops earlier."""
    if len(lanes) == 1 and lanes[0][0].size > 1:
        team, units, phase = lanes[0]
        # units of several sizes let the members drift apart (a table then holds fewer members), but a
        # step's copies are still one over the members' rows
        if (_even(port, "bidirectional " + phase, units) or isinstance(units, Cut)) and ring_steps.by_tables(
                port, "bidirectional " + phase, units[0]):
            gathering = port.once(("steps", "bidirectional " + phase), lambda: _Gather(port, units, phase))
            to = [[group_index(port, team.at(offset)) for offset, _ in _WAYS]] * steps(team.size)
            yield from gathering.of.join(port, to, team.index, units)
            return
    for step in range(max((steps(team.size) for team, _, _ in lanes), default=0)):
        running = [lane for lane in lanes if step < steps(lane[0].size)]
        for team, units, phase in running:
            n, me, last = team.size, team.index, step == steps(team.size) - 1
            for offset, way in _WAYS:
                c = (me - offset * step) % n
                part = units[c][_lane(units[c], offset, n, last)]
                name = _phase(way, phase)
                port.send(team.at(offset), part, tag=(name, step), header={}, phase=name, step=step, block=c)
        for team, units, phase in running:
            n, me, last = team.size, team.index, step == steps(team.size) - 1
            for offset, way in _WAYS:
                c = (me - offset * (step + 1)) % n
                message = yield port.recv(team.at(-offset), tag=(_phase(way, phase), step))
                yield from unpack_into(port, message, units[c][_lane(units[c], offset, n, last)], block=c)


def _even(port: sim.Port, phase: str, units: Sequence[np.ndarray]) -> bool:
    """Whether the units of a pass are all of one size (decided once per call and phase). Units of several
    sizes make the members' messages of one step arrive at different times, so the members drift apart
    and a table path would post a member at a time: those passes go member by member."""
    return port.once(("even", phase), lambda: len({units[k].nbytes for k in range(len(units))}) <= 1)


class _Gather:
    """`all_gather_lanes` of one lane for every member at once (`sim.engine.Steps`, two ways a step: the
    clockwise message, then the counter-clockwise one). A member's `Steps` state is its units."""

    def __init__(self, port: sim.Port, units: Sequence[np.ndarray], phase: str) -> None:
        n = self.n = len(units)
        self.names = [_phase(way, phase) for _, way in _WAYS]
        self.offsets = np.array([offset for offset, _ in _WAYS])
        self.r = steps(n)
        self.bytes = np.array([[[units[c][_lane(units[c], offset, n, last)].nbytes for last in (False, True)]
                                for offset, _ in _WAYS] for c in range(n)], np.int64)  # [unit, way, last step]
        self.of = sim.engine.Steps(port, self.r, self.sizes, self.details, self.move, ways=2, timed=True)
        self.lanes: dict[tuple[int, int, bool], slice] = {}  # (unit size, way, last step) -> the part it carries
        self.moves = Decided()

    def _sent(self, positions: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> np.ndarray:
        return (positions - self.offsets[ways] * steps) % self.n

    def sizes(self, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> np.ndarray:
        units = self._sent(self.of.positions[senders], steps, ways)
        return self.bytes[units, ways, (steps == self.r - 1).astype(np.int64)]

    def details(self, positions: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> dict[str, list]:
        names = self.names
        return {"phase": [names[w] for w in ways.tolist()], "step": steps.tolist(),
                "block": self._sent(positions, steps, ways).tolist()}

    def move(self, receivers: np.ndarray, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> None:
        n, states, offsets, lanes = self.n, self.of.states, self.offsets.tolist(), self.lanes
        if hollow(states[receivers[0]]):  # abstract payloads: nothing to copy
            return
        units = self._sent(self.of.positions[senders], steps, ways)
        if not self.bytes[units, ways, (steps == self.r - 1).astype(np.int64)].any():  # nothing carried
            return
        rows = self._rows()
        # a step writes units (or their halves) no message in flight reads, each once
        if rows is not None and rows.move(receivers, units, senders, units, self._spans(rows, units, steps, ways)):
            return
        for r, j, c, w, s in zip(receivers.tolist(), senders.tolist(), units.tolist(), ways.tolist(), steps.tolist()):
            target = states[r][c]
            key = (target.size, w, s == self.r - 1)
            lane = lanes.get(key)
            if lane is None:
                lane = lanes[key] = _lane(target, offsets[w], n, key[2])
            target[lane] = states[j][c][lane]

    def _spans(self, rows: UnitRows, units: np.ndarray, steps: np.ndarray,
               ways: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The elements [lo, hi) of each unit a message carries (`_lane`); None where all carry whole units."""
        if self.n % 2 or not np.any(steps == self.r - 1):
            return None
        sizes = rows.sizes[units]
        half = (sizes + 1) // 2  # numpy.array_split's first half
        split = steps == self.r - 1
        lo = np.where(split & (ways == 1), half, 0)
        hi = np.where(split & (ways == 0), half, sizes)
        return lo, hi

    def _rows(self) -> UnitRows | None:
        """The members' units as rows of one array, decided once all have joined (None until then, or
        where they are not)."""
        return self.moves.get(self.of.states, lambda states: UnitRows.of([(units, None) for units in states]))


def reduce_scatter(port: sim.Port, team: Team, parts: Sequence[np.ndarray], reduction: str, phase: str) -> Generator:
    """Fold chunk c of every member's `parts` (this member's terms, one per team position, any shape, read in
    row-major order: packed first by a timed step where strided) so that team position c ends with it complete.

    Returns a new flat buffer of this member's memory holding its own position's complete chunk.
    """
    return (yield from reduce_scatter_lanes(port, [(team, parts, phase)], reduction))[0]


def reduce_scatter_lanes(port: sim.Port, lanes: Sequence[Lane], reduction: str) -> Generator:
    """`reduce_scatter` round several rings at once (lanes with distinct phase names), stepping as
    `all_gather_lanes` does; returns each lane's complete chunk of the caller's position."""
    states = []
    for team, parts, phase in lanes:
        # a Cut's units are contiguous: their row-major values are its flat units, with no pack
        own = Cut(parts.flat, parts.at, parts.sizes) if isinstance(parts, Cut) else []
        for c, part in enumerate(parts if not isinstance(own, Cut) else ()):
            values, _ = yield from pack_slice(port, part, Layout.row_major(part.ndim), chunk=c)
            own.append(values.reshape(-1))
        r = steps(team.size)
        states.append(_Folding(team, phase, own, {offset: own[(team.index + offset * r) % team.size]
                                                   for offset, _ in _WAYS}, {}))
    key = "bidirectional reduce-scatter " + (states[0].phase if states else "")
    if (len(states) == 1 and states[0].team.size > 1 and ring_steps.by_tables(port, key, states[0].own[0], reduction)
            and bidirectional_rows.fits(port, states[0].team, states[0].own)):
        names = [_phase(way, states[0].phase) for _, way in _WAYS]
        yield from bidirectional_rows.reduce_scatter(port, states[0].team, states[0], reduction, key, names)
        return [_finish(port, states[0], reduction)]
    if (len(states) == 1 and states[0].team.size > 1 and _even(port, key, states[0].own)
            and ring_steps.by_tables(port, key, states[0].own[0], reduction)):
        team = states[0].team
        to = [[group_index(port, team.at(offset)) for offset, _ in _WAYS]] * steps(team.size)
        yield from ring_steps.per_member(port, key, steps(team.size), to, _Folder(port, states[0], reduction), ways=2)
        return [_finish(port, states[0], reduction)]
    for step in range(max((steps(state.team.size) for state in states), default=0)):
        running = [state for state in states if step < steps(state.team.size)]
        for state in running:
            _send_partials(port, state, step)
        added = 0  # bytes received this step on every lane, both ways, added once all have arrived
        for state in running:
            added += yield from _receive_partials(port, state, step, reduction)
        yield from sim.add_step(port, added, step=step)
    return [_finish(port, state, reduction) for state in states]


@dataclass
class _Folding:
    """One lane of a bidirectional reduce-scatter: its ring, phase name, own terms, the partial sum each
    direction sends next, and the last arrivals (span, values) per direction."""

    team: Team
    phase: str
    own: list[np.ndarray]
    held: dict[int, np.ndarray]
    arrived: dict[int, tuple[slice, np.ndarray]]


class _Folder:
    """One member's messages of a one-lane `reduce_scatter_lanes`, for `collectives._ring_steps.PerMember`
    (way 0 clockwise, way 1 counter-clockwise, as `_send_partials` and `_receive_partials` go)."""

    def __init__(self, port: sim.Port, state: _Folding, reduction: str) -> None:
        self.port, self.state, self.reduction = port, state, reduction

    def send(self, step: int, way: int) -> tuple[np.ndarray, dict]:
        state, (offset, name) = self.state, _WAYS[way]
        n, r = state.team.size, steps(state.team.size)
        c = (state.team.index + offset * (r - step)) % n
        payload = state.held[offset][_lane(state.own[c], offset, n, step == 0)]
        return payload, {"phase": _phase(name, state.phase), "step": step, "chunk": c}

    def receive(self, step: int, way: int, payload: np.ndarray) -> None:
        state, offset = self.state, _WAYS[way][0]
        n, r = state.team.size, steps(state.team.size)
        c = (state.team.index + offset * (r - step - 1)) % n
        span = _lane(state.own[c], offset, n, step == 0)
        partial = _partial(payload, step, self.reduction)
        if step == r - 1:
            state.arrived[offset] = (span, partial)
        else:
            state.held[offset] = _fold(self.port, state.own[c], span, partial, self.reduction)


def _send_partials(port: sim.Port, state: _Folding, step: int) -> None:
    n, me, r = state.team.size, state.team.index, steps(state.team.size)
    for offset, way in _WAYS:
        c = (me + offset * (r - step)) % n
        payload = state.held[offset][_lane(state.own[c], offset, n, step == 0)]
        name = _phase(way, state.phase)
        port.send(state.team.at(offset), payload, tag=_fold_tag(name, step), header={}, phase=name, step=step,
                  chunk=c)


def _receive_partials(port: sim.Port, state: _Folding, step: int, reduction: str) -> Generator:
    """Take one lane's two arrivals of `step` (folding them unless it is the last); returns their bytes."""
    n, me, r = state.team.size, state.team.index, steps(state.team.size)
    added = 0
    for offset, way in _WAYS:
        c = (me + offset * (r - step - 1)) % n
        message = yield port.recv(state.team.at(-offset), tag=_fold_tag(_phase(way, state.phase), step))
        span = _lane(state.own[c], offset, n, step == 0)
        added += state.own[c][span].nbytes
        partial = _partial(received(message), step, reduction)
        if step == r - 1:
            state.arrived[offset] = (span, partial)
        else:
            state.held[offset] = _fold(port, state.own[c], span, partial, reduction)
    return added


def _fold_tag(name: str, step: int) -> tuple:
    """A reduce-scatter message's tag: never an all-gather's of the same lane name (multi_axis's all-reduce
    runs both passes under one name per part and axis, and a call's mailbox holds one message per tag)."""
    return ("reduce-scatter", name, step)


def _finish(port: sim.Port, state: _Folding, reduction: str) -> np.ndarray:
    """The caller's own chunk: its term, the clockwise arrival folded before it, the counter-clockwise after."""
    me = state.team.index
    mine = _fold(port, state.own[me], slice(0, 0), state.own[me][:0], reduction)
    for offset, _ in _WAYS:
        if offset in state.arrived:
            span, values = state.arrived[offset]
            mine[span] = combine(reduction, mine[span], values) if offset == -1 else combine(reduction, values,
                                                                                        mine[span])
    return mine


def _partial(payload: np.ndarray, step: int, reduction: str) -> np.ndarray:
    """An arrival of `step` as a partial sum: at step 0 it is the sender's own term, which starts its chain,
    so it is folded into the identity here, where every fold starts (a NaN never becomes a max's accumulator)."""
    return started(reduction, payload) if step == 0 else payload


def _fold(port: sim.Port, own: np.ndarray, span: slice, values: np.ndarray, reduction: str) -> np.ndarray:
    """A new flat buffer holding `own` (folded into the identity) with the partial sum `values` added on `span`."""
    out = port.memory.view(port.memory.alloc(own.dtype, own.shape))
    out[...] = started(reduction, own)
    out[span] = combine(reduction, values, own[span])
    return out
