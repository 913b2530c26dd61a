"""Ring passes run for every member of a call at once (`sim.engine.Steps`): one table per step.

A ring pass is n - 1 steps round a team of n members; at step s the member at ring position p sends
its unit of position p - s (a gather) or its partial sum of position p - 1 - s (a reduce-scatter) to the
next member, and receives from the previous one. The member-by-member loops (`collectives._gathering.ring`,
`collectives._ring_lanes.reduce_scatter_lanes`, `ring_all_gather`) keep the same messages for the runs
`sim.engine.steps_fit` refuses and for units laid out in strided memory; these classes say, for all members
at once, what the messages carry (their bytes, their trace details) and what each receiver writes, read
from the senders' memory when the messages arrive.

Each member's `Steps` state is (units, order): its unit of ring position k is `units[order[k]]`, a
contiguous view of its memory (an array indexed along its first axis, or a list of arrays).

`PerMember` runs the loops whose members each work out their own messages (recursive doubling and
halving, the bidirectional reduce-scatter): one Python call per message, but still one table and one
wake event per step for all members.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import numpy as np

import sim
from collectives._algorithms import Team, group_index
from collectives._arithmetic import combine
from collectives._joint import Cut, Decided, FoldRows, UnitRows, hollow


def by_tables(port: sim.Port, phase: str, unit: np.ndarray, reduction: str | None = None) -> bool:
    """Whether the call's ring pass `phase` runs as tables: the run allows it (`sim.engine.steps_fit`), a
    unit (`unit`, every member's alike) is one contiguous run (no timed pack or unpack), and adding is free
    where the pass adds. Decided once per call and phase, so every member takes the same path."""
    def decide() -> bool:
        adds_free = reduction is None or port.transport.costs.reduce_s(1) <= 0
        return sim.engine.steps_fit(port) and adds_free and unit.flags.c_contiguous
    return port.once(("by tables", phase), decide)


def gather(port: sim.Port, team: Team, units: Sequence[np.ndarray] | np.ndarray, order: Sequence[int],
           phase: str, key: str) -> Generator:
    """Pass the units round `team` (the caller's own, position `team.index`, already filled); each message's
    trace detail names its unit under `key`."""
    n = team.size
    steps = port.once(("steps", phase), lambda: _Gather(port, n, phase, key))
    steps.bytes[port.group.index] = (units[0].nbytes if isinstance(units, np.ndarray)  # equal blocks
                                     else units.nbytes()[order] if isinstance(units, Cut)
                                     else [units[g].nbytes for g in order])
    yield from steps.of.join(port, [group_index(port, team.at(1))] * (n - 1), team.index, (units, order))


def reduce_scatter(port: sim.Port, team: Team, own: list[np.ndarray], partial: list[np.ndarray], reduction: str,
                   phase: str) -> Generator:
    """Fold partial sums round `team`: `own[k]` is the caller's term of ring position k, `partial[k]` the
    buffer its partial sum of position k is written to (that of position `team.index - 1` already holds its
    own term). Afterwards `partial[team.index]` holds the complete sum of the caller's position."""
    n = team.size
    steps = port.once(("steps", phase), lambda: _ReduceScatter(port, n, phase, reduction))
    steps.bytes[port.group.index] = own.nbytes() if isinstance(own, Cut) else [part.nbytes for part in own]
    yield from steps.of.join(port, [group_index(port, team.at(1))] * (n - 1), team.index, (own, partial))


class _Gather:
    """A gathering ring pass: the member at position p sends unit p - s at step s, writes unit p - 1 - s."""

    def __init__(self, port: sim.Port, n: int, phase: str, key: str) -> None:
        self.n, self.phase, self.key = n, phase, key
        self.bytes = np.zeros((port.group.size, n), np.int64)  # bytes[j, k]: member j's unit of position k
        self.of = sim.engine.Steps(port, n - 1, self.sizes, self.details, self.move, timed=True)
        self.moves = Decided()

    def sizes(self, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> np.ndarray:
        return self.bytes[senders, (self.of.positions[senders] - steps) % self.n]

    def details(self, positions: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> dict[str, list]:
        return {"phase": [self.phase] * len(steps), "step": steps.tolist(),
                self.key: ((positions - steps) % self.n).tolist()}

    def move(self, receivers: np.ndarray, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> None:
        if hollow(self.of.states[receivers[0]][0]):  # abstract payloads: nothing to copy
            return
        positions = self.of.positions
        into, out = (positions[receivers] - 1 - steps) % self.n, (positions[senders] - steps) % self.n
        rows = self._rows()
        # the units a step writes are ones no member has sent yet, so none is read by a move
        if rows is not None and rows.move(receivers, into, senders, out):
            return
        states = self.of.states
        carrying = self.bytes[senders, out] > 0  # an empty unit moves nothing
        receivers, into, senders, out = receivers[carrying], into[carrying], senders[carrying], out[carrying]
        for r, a, j, b in zip(receivers.tolist(), into.tolist(), senders.tolist(), out.tolist()):
            units, order = states[r]
            source, source_order = states[j]
            units[order[a]][...] = source[source_order[b]]

    def _rows(self) -> UnitRows | None:
        """The members' units as rows of one array (`collectives._joint.UnitRows`), decided once all have
        joined; None where they are not, or not all have joined yet."""
        return self.moves.get(self.of.states, UnitRows.of)


class _ReduceScatter:
    """A reduce-scatter ring pass: the member at position p sends its partial sum p - 1 - s at step s, and
    writes partial sum p - 2 - s: the one received plus its own term."""

    def __init__(self, port: sim.Port, n: int, phase: str, reduction: str) -> None:
        self.n, self.phase, self.reduction = n, phase, reduction
        self.bytes = np.zeros((port.group.size, n), np.int64)  # bytes[j, k]: member j's term of position k
        self.of = sim.engine.Steps(port, n - 1, self.sizes, self.details, self.move, timed=True)
        self.joined: tuple[list, list] | None = None
        self.folds = Decided()

    def sizes(self, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> np.ndarray:
        return self.bytes[senders, (self.of.positions[senders] - 1 - steps) % self.n]

    def details(self, positions: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> dict[str, list]:
        return {"phase": [self.phase] * len(steps), "step": steps.tolist(),
                "chunk": ((positions - 1 - steps) % self.n).tolist()}

    def move(self, receivers: np.ndarray, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> None:
        """Each receiver's partial sum: the one received plus its own term. The sums of terms of one shape
        are taken together (the operation is elementwise: the same bits); each partial sum is written once
        and read only after, so none read here is written here."""
        positions, states = self.of.positions, self.of.states
        into, out = (positions[receivers] - 2 - steps) % self.n, (positions[senders] - 1 - steps) % self.n
        rows = self._rows()
        if rows is not None and rows.fold(receivers, into, senders, out):
            return
        adding = self.bytes[receivers, into] > 0  # an empty term adds nothing
        receivers, into, senders, out = (v[adding].tolist() for v in (receivers, into, senders, out))
        rows = list(zip(receivers, into, senders, out))
        if not rows:
            return
        terms, partials = self._columns()
        owns = [terms[r][a] for r, a in zip(receivers, into)]
        shape = owns[0].shape
        if all(own.shape == shape for own in owns):
            targets = [partials[r][a] for r, a in zip(receivers, into)]
            theirs = [partials[j][b] for j, b in zip(senders, out)]
            _add_into(self.reduction, targets, theirs, owns)
            return
        alike: dict[tuple, list] = {}
        for (r, a, j, b), own in zip(rows, owns):
            alike.setdefault(own.shape, []).append((states[r][1][a], states[j][1][b], own))
        for sums in alike.values():
            _add_into(self.reduction, *(list(column) for column in zip(*sums)))

    def _rows(self) -> FoldRows | None:
        """The members' partial sums and terms as rows (`collectives._joint.FoldRows`), decided once all have
        joined; None where they are not, or not all have joined yet."""
        reduction = self.reduction
        return self.folds.get(self.of.states, lambda states: FoldRows.of(
            states, lambda theirs, owns: combine(reduction, theirs, owns)))

    def _columns(self) -> tuple[list, list]:
        """Every member's terms and partial sums (lists by ring position), once all have joined."""
        if self.joined is not None:
            return self.joined
        states = self.of.states
        columns = [state and state[0] for state in states], [state and state[1] for state in states]
        if all(state is not None for state in states):
            self.joined = columns
        return columns


def _add_into(reduction: str, targets: list, theirs: list, owns: list) -> None:
    """`targets[i][...] = theirs[i] op owns[i]` for every i (arrays of one shape), the sums taken together."""
    if sim.memory.is_hollow(targets[0].dtype):  # abstract payloads: sums without values, nothing to write
        return
    total = combine(reduction, _stacked(theirs), _stacked(owns))
    for target, values in zip(targets, total):
        target[...] = values


def _stacked(arrays: list[np.ndarray]) -> np.ndarray:
    """`numpy.stack(arrays)` of arrays of one shape (joined along their first axis where they have one)."""
    if arrays[0].ndim == 0:
        return np.stack(arrays)
    return np.concatenate(arrays).reshape((len(arrays), *arrays[0].shape))


class PerMember:
    """A loop whose members each decide their own messages (recursive doubling and halving: a partner per
    step, partial results that change each step), for every member at once. A member's `Steps` state has
    `send(step, way) -> (payload, detail)`, called when it posts (the payload is a view of its memory, read
    when the message arrives), and `receive(step, way, payload)`, called when the message arrives."""

    def __init__(self, port: sim.Port, count: int, ways: int = 1) -> None:
        self.ways = ways
        self.sent: dict[tuple[int, int], np.ndarray] = {}  # (sender, message) -> payload in flight
        self.posting: list[dict] = []  # the details of the messages being posted (`sizes`, then `details`)
        self.of = sim.engine.Steps(port, count, self.sizes, self.details, self.move, ways)

    def sizes(self, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> np.ndarray:
        states, sizes, self.posting = self.of.states, [], []
        for j, s, w in zip(senders.tolist(), steps.tolist(), ways.tolist()):
            payload, detail = states[j].send(s, w)
            self.sent[(j, s * self.ways + w)] = payload
            sizes.append(payload.nbytes)
            self.posting.append(detail)
        return np.array(sizes, np.int64)

    def details(self, positions: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> dict[str, list]:
        posting = self.posting
        return {key: [detail[key] for detail in posting] for key in posting[0]}

    def move(self, receivers: np.ndarray, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> None:
        states = self.of.states
        for r, j, s, w in zip(receivers.tolist(), senders.tolist(), steps.tolist(), ways.tolist()):
            states[r].receive(s, w, self.sent.pop((j, s * self.ways + w)))


def per_member(port: sim.Port, phase: str, count: int, to: list, state: object, ways: int = 1) -> Generator:
    """Run the caller's part of a `PerMember` loop of `count` steps of `ways` messages (`to[s]`: the group
    index of each message's receiver, or of its one partner)."""
    loop = port.once(("steps", phase), lambda: PerMember(port, count, ways))
    yield from loop.of.join(port, to, port.group.index, state)
