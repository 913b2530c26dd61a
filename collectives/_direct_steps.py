"""Direct exchanges inside teams run for every member of a call at once (`sim.engine.Steps`): one table per
member's row, one wake event per run of receives.

A direct phase of a hierarchical algorithm (`collectives._hierarchical`) sends, from each member of a team
(a node's members), V pieces to every other member of its team at once, dst by dst in team order, and then
receives the V pieces of every other member, src by src in team order: (k - 1) V messages each way on a
team of k. As a `Steps` loop it is one step of (k - 1) V ways, each member's message m going to the
receiver that takes it as its own message `received_as[m]` (the receiver's order is by sender, the
sender's by receiver). What a receive does is what the member-by-member loop does at that receive: a
gather copies the piece into its place; a reduce-scatter folds it into the piece's running sum, and folds
the member's own term in when the member before it in team order has been received (the fold runs in team
order, from the reduction's identity).

Worked example, a team of 3 (group indices 4, 5, 6), one piece each: member 5 (team position 1) sends to
4 then 6, and receives from 4 then 6; its message to 4 is 4's first receive (4 receives from 5, 6), its
message to 6 is 6's second (6 receives from 4, 5): `received_as` of member 5 is [0, 1].

>>> received_places(3, 1, 1).tolist()
[0, 1]
>>> received_places(3, 0, 2).tolist()
[0, 1, 0, 1]
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import numpy as np

import sim
from collectives import _ring_steps as ring_steps
from collectives._algorithms import Team
from collectives._arithmetic import combine, identity
from collectives._direct_rows import Joint, Pieces

__all__ = ["all_gather", "by_tables", "received_places", "reduce_scatter"]


def by_tables(port: sim.Port, phase: str, places: Sequence[Sequence[np.ndarray]]) -> bool:
    """Whether the call's direct phase `phase` runs as tables: where the call's step tables do
    (`collectives._ring_steps.by_tables`: the run allows them), every team position has as many pieces,
    and every place is one contiguous run (no timed unpack). Decided once per call and phase, so every
    member takes the same path."""
    def decide() -> bool:
        if isinstance(places, Pieces):  # slices of one C-contiguous buffer, as many per position
            return len(places) > 0 and places.per > 0
        counts = {len(row) for row in places}
        return len(counts) == 1 and counts.pop() > 0 and all(place.flags.c_contiguous for row in places
                                                               for place in row)
    first = next((row[0] for row in places if len(row)), None)
    return first is not None and ring_steps.by_tables(port, phase, first) and port.once(("direct tables", phase),
                                                                                         decide)


def _others(k: int, me: int) -> np.ndarray:
    """Team positions 0 .. k - 1 but `me`, in order."""
    others = np.arange(k - 1, dtype=np.int64)
    others[me:] += 1
    return others


def received_places(k: int, me: int, pieces: int) -> np.ndarray:
    """Where each of member `me`'s (k - 1) * pieces messages comes among its receiver's: the message of
    piece v to team position t is the receiver's receive (me or me - 1) * pieces + v."""
    others = _others(k, me)
    before = np.where(me < others, me, me - 1)
    return (np.repeat(before, pieces) * pieces + np.tile(np.arange(pieces), k - 1)).astype(np.int64)


def reduce_scatter(port: sim.Port, team: Team, pieces: Sequence[Sequence[np.ndarray]], reduction: str,
                   phase: str) -> Generator:
    """`collectives._hierarchical.reduce_scatter` as tables: the caller's folded pieces (not yet stored)."""
    fold = port.once(("direct steps", phase), lambda: _Fold(port, team.size, len(pieces[0]), phase, reduction))
    member = _Member(team, pieces if isinstance(pieces, Pieces) else Pieces.of_views(pieces) or pieces, None)
    if team.index == 0:
        member.fold_own(reduction)
    yield from fold.join(port, team, member)
    return member.sums


def all_gather(port: sim.Port, team: Team, units: Sequence[Sequence[np.ndarray]], phase: str) -> Generator:
    """`collectives._hierarchical.all_gather` as tables: every other member's units copied into `units`."""
    gather = port.once(("direct steps", phase), lambda: _Gather(port, team.size, len(units[0]), phase))
    yield from gather.join(port, team, _Member(team, units, None))


class _Member:
    """A member's part: its team, its pieces by team position (`rows[t][v]`), and its running sums."""

    __slots__ = ("index", "rows", "sums", "team")

    def __init__(self, team: Team, rows: Sequence[Sequence[np.ndarray]], sums: list | None) -> None:
        self.team, self.index, self.rows = team, team.index, rows
        self.sums: list = [None] * len(rows[team.index]) if sums is None else sums

    def fold_own(self, reduction: str) -> None:
        """Fold the member's own terms into its running sums (its turn in team order)."""
        for v, own in enumerate(self.rows[self.index]):
            self.sums[v] = combine(reduction, identity(reduction, own.dtype) if self.sums[v] is None
                                   else self.sums[v], own)


class _Direct:
    """One direct phase's `Steps` loop of (k - 1) * pieces ways; member j's message m carries piece
    m % pieces of its row for its (m // pieces)-th other team member (`carried`)."""

    def __init__(self, port: sim.Port, k: int, pieces: int, phase: str) -> None:
        self.k, self.pieces, self.phase = k, pieces, phase
        ways = (k - 1) * pieces
        self.bytes = np.zeros((port.group.size, ways), np.int64)  # bytes[j, m]: member j's message m
        self.of = sim.engine.Steps(port, 1, self.sizes, self.details, self.move, ways)
        self.decided, self.joint = False, None
        self.orders: dict[int, tuple] = {}  # id(team.order) -> (team.order, as an array)

    def rows(self) -> Joint | None:
        """Every member's pieces as rows of one snapshot (`collectives._direct_rows.Joint`), decided at the
        phase's first receive: where every member has joined by then and their pieces are cut alike; else
        None, and every receive of the phase is made on its own."""
        if not self.decided:
            self.decided = True
            states = self.of.states
            if all(state is not None for state in states):
                self.joint = Joint.of([state.rows for state in states])
                if self.joint is not None and not self.prepare(self.joint):
                    self.joint = None
        return self.joint

    def prepare(self, joint: Joint) -> bool:
        """Ready `joint` for this phase's receives; False where it cannot take them."""
        return True

    def join(self, port: sim.Port, team: Team, member: _Member) -> Generator:
        k, pieces, me = self.k, self.pieces, team.index
        others = _others(k, me)
        q = (others[:, None] * pieces + np.arange(pieces)).reshape(-1)  # the pieces sent, in order
        if isinstance(member.rows, Pieces):
            self.bytes[port.group.index] = member.rows.nbytes(self.sent(q, me))
        else:
            self.bytes[port.group.index] = [part.nbytes for t in others.tolist() for part in self.carried(member, t)]
        to = self.order_of(team)[q // pieces]
        yield from self.of.join(port, to, me, member, received_places(k, me, pieces))

    def sent(self, q: np.ndarray, me: int) -> np.ndarray:
        """The pieces (t * pieces + v) a member at position `me` sends as messages q, in order."""
        raise NotImplementedError

    def carried(self, member: _Member, t: int) -> Sequence[np.ndarray]:
        """What `member` sends to team position t, piece by piece."""
        raise NotImplementedError

    def sizes(self, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> np.ndarray:
        return self.bytes[senders, ways]

    def details(self, positions: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> dict[str, list]:
        return {"phase": [self.phase] * len(ways), "piece": (ways % self.pieces).tolist()}

    def order_of(self, team: Team) -> np.ndarray:
        """`team.order` as an array, made once per team of the call (a team's order is one tuple)."""
        found = self.orders.get(id(team.order))
        if found is None or found[0] is not team.order:
            found = self.orders[id(team.order)] = (team.order, np.asarray(team.order, np.int64))
        return found[1]

    def sources(self, receivers: np.ndarray, ways: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The team position each receive comes from, and its piece (`ways`: the receivers' own order)."""
        before, piece = np.divmod(ways, self.pieces)
        positions = self.of.positions[receivers]
        return before + (before >= positions), piece

    def move(self, receivers: np.ndarray, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> None:
        raise NotImplementedError


class _Gather(_Direct):
    """A direct all-gather: each member sends its own units; a receive copies one into its place."""

    def carried(self, member: _Member, t: int) -> Sequence[np.ndarray]:
        return member.rows[member.index]

    def sent(self, q: np.ndarray, me: int) -> np.ndarray:
        return me * self.pieces + q % self.pieces

    def move(self, receivers: np.ndarray, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> None:
        states = self.of.states
        joint = self.rows()
        if joint is not None:  # a member's places are written when its last message has arrived
            for r in receivers[ways == self.of.ways - 1].tolist():
                member = states[r]
                others = _others(self.k, member.index)
                q = (others[:, None] * self.pieces + np.arange(self.pieces)).reshape(-1)
                joint.gather_into(member.rows.flat, self.order_of(member.team)[q // self.pieces], q)
            return
        sources, pieces = self.sources(receivers, ways)
        for r, j, s, v in zip(receivers.tolist(), senders.tolist(), sources.tolist(), pieces.tolist()):
            source = states[j].rows[states[j].index][v]
            if source.size and not sim.memory.is_hollow(source.dtype):
                states[r].rows[s][v][...] = source


class _Fold(_Direct):
    """A direct reduce-scatter: each member sends team position t its terms `rows[t]`; a receive folds one
    into the running sum of its piece, and the member's own terms follow its predecessor's."""

    def __init__(self, port: sim.Port, k: int, pieces: int, phase: str, reduction: str) -> None:
        super().__init__(port, k, pieces, phase)
        self.reduction = reduction

    def carried(self, member: _Member, t: int) -> Sequence[np.ndarray]:
        return member.rows[t]

    def sent(self, q: np.ndarray, me: int) -> np.ndarray:
        return q

    def prepare(self, joint: Joint) -> bool:
        started = {j: [(state.index * self.pieces + v, values) for v, values in enumerate(state.sums)]
                   for j, state in enumerate(self.of.states) if state.sums[0] is not None}
        return joint.start_sums(self.reduction, started)

    def move(self, receivers: np.ndarray, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> None:
        states, reduction = self.of.states, self.reduction
        sources, pieces = self.sources(receivers, ways)
        joint = self.rows()
        if joint is not None:
            self.fold_rows(joint, receivers, senders, sources, pieces, ways)
            return
        alike: dict[tuple, list] = {}
        for r, j, v in zip(receivers.tolist(), senders.tolist(), pieces.tolist()):
            member = states[r]
            theirs = states[j].rows[member.index][v]
            alike.setdefault((theirs.shape, theirs.dtype), []).append((member, v, theirs))
        for (shape, dtype), folds in alike.items():
            _fold_together(reduction, folds, shape, dtype)
        last = (pieces == self.pieces - 1) & (sources == self.of.positions[receivers] - 1)
        for r in receivers[last].tolist():
            states[r].fold_own(reduction)


    def fold_rows(self, joint: Joint, receivers: np.ndarray, senders: np.ndarray, sources: np.ndarray,
                  pieces: np.ndarray, ways: np.ndarray) -> None:
        """`move` on the rows of `joint`: the run's receives in one sum, then the own terms of the
        receivers whose predecessor in team order has now been received, each piece."""
        V, positions = self.pieces, self.of.positions[receivers]
        joint.fold(self.reduction, receivers, senders, positions * V + pieces)
        last = (pieces == V - 1) & (sources == positions - 1)
        if last.any():
            own = np.repeat(receivers[last], V)
            joint.fold(self.reduction, own, own, (positions[last][:, None] * V + np.arange(V)).reshape(-1))
        states = self.of.states
        for r in receivers[ways == self.of.ways - 1].tolist():
            member = states[r]
            member.sums = joint.sums_of(r, [member.index * V + v for v in range(V)])


def _fold_together(reduction: str, folds: list, shape: tuple, dtype: np.dtype) -> None:
    """`member.sums[v] = combine(sums[v] or the identity, theirs)` for every (member, v, theirs) of one shape
    and dtype, the sums taken together (elementwise: the same bits as one by one)."""
    if len(folds) == 1 or sim.memory.is_hollow(dtype):  # abstract payloads: sums without values
        for member, v, theirs in folds:
            member.sums[v] = combine(reduction, identity(reduction, dtype) if member.sums[v] is None
                                     else member.sums[v], theirs)
        return
    start = identity(reduction, dtype)
    sums = np.stack([np.broadcast_to(start, shape) if member.sums[v] is None else member.sums[v]
                     for member, v, _ in folds])
    total = combine(reduction, sums, np.stack([theirs for _, _, theirs in folds]))
    for (member, v, _), values in zip(folds, total):
        member.sums[v] = values
