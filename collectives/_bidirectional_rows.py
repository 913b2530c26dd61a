"""The bidirectional reduce-scatter of one ring for every member at once, its partial sums folded over rows.

`collectives._bidirectional.reduce_scatter_lanes` folds chunk c along two chains that end at the member of
ring position c; member by member, each arrival (but those of the last step) becomes a new buffer holding
the member's own term of the chunk with the arrival added on the part the message carried. Here the
members' steps run as tables (`sim.engine.Steps`, two ways a step: clockwise, then counter-clockwise) and
a step's folds are made at once: every buffer a member's arrivals would become is a piece of one flat
buffer of its memory (allocated and charged when it joins, the bytes of those allocations), the members'
buffers are rows of one array, and a member's terms are read from one copy of them taken when it joins
(they do not change while its part of the call runs).

Worked example, n = 4 (r = 2 steps), one element per chunk: at step 0 the member at position 2 sends its
term of chunk 0 to position 3 (clockwise) and to position 1 (counter-clockwise; n is even, so each way
carries half of the chunk: here the clockwise half is the element, the other half empty); position 3 then
holds [x3[0] + x2[0]] as its step-0 buffer and sends it on at step 1 to position 0, the last step, whose
arrival `collectives._bidirectional._finish` folds into position 0's own term.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import numpy as np

import sim
from collectives._algorithms import Team, group_index
from collectives._arithmetic import combine, started
from collectives._joint import JOINT_MAX_BYTES, Cut, ragged

__all__ = ["fits", "reduce_scatter"]

_OFFSETS = np.array([1, -1])  # way 0 clockwise (to the next member), way 1 counter-clockwise


def fits(port: sim.Port, team: Team, own: Sequence[np.ndarray]) -> bool:
    """Whether the pass folds over rows: every chunk one dtype, all members' buffers within the joint
    limit (decided once per call from this member's chunks, which every member's match)."""
    def decide() -> bool:
        dtype = own[0].dtype
        if dtype.hasobject or any(type(part) is not np.ndarray or part.dtype != dtype for part in (own[0], own[-1])):
            return False
        total = sum(part.size for part in own) if not isinstance(own, Cut) else int(own.sizes.sum())
        # each member's arrival buffers hold about its whole operand, and so does the copy of its terms
        return 2 * port.group.size * total * dtype.itemsize <= JOINT_MAX_BYTES
    return port.once(("bidirectional rows", team.size), decide)


def reduce_scatter(port: sim.Port, team: Team, state, reduction: str, key: str,
                   names: Sequence[str]) -> Generator:
    """The caller's part (`state`: its `_Folding`, whose `arrived` this fills) of the pass over rows."""
    folds = port.once(("steps", key), lambda: _Folds(port, team.size, state.own, reduction, names))
    to = [[group_index(port, team.at(int(offset))) for offset in _OFFSETS]] * (team.size // 2)
    folds.enter(port, state)
    yield from folds.of.join(port, to, team.index, state)


class _Folds:
    """One pass's tables and rows (see the module docstring). `held[p]` is where the buffers of ring position
    p start in `rows`; `at[p, s, w]` where its step-s way-w buffer starts after that."""

    def __init__(self, port: sim.Port, n: int, own: Sequence[np.ndarray], reduction: str,
                 names: Sequence[str]) -> None:
        self.n, self.r, self.reduction, self.names = n, n // 2, reduction, list(names)
        self.sizes = (own.sizes.copy() if isinstance(own, Cut)
                      else np.array([part.size for part in own], np.int64))  # chunk sizes, by ring position
        self.dtype = own[0].dtype
        self.itemsize = self.dtype.itemsize
        steps = np.arange(max(self.r - 1, 0))
        chunks = (np.arange(n)[:, None, None] + _OFFSETS[None, None, :] * (self.r - 1 - steps)[None, :, None]) % n
        lengths = self.sizes[chunks].reshape(n, -1)  # the buffers each position's arrivals become, in order
        self.totals = lengths.sum(1)
        self.at = (np.cumsum(lengths, 1) - lengths).reshape(n, len(steps), 2)
        self.held = np.cumsum(self.totals) - self.totals
        self.rows = np.zeros(int(self.totals.sum()), self.dtype)
        self.chunk_at = np.cumsum(self.sizes) - self.sizes
        self.terms = np.zeros((port.group.size, int(self.sizes.sum())), self.dtype)
        self.states: list = [None] * port.group.size
        self.of = sim.engine.Steps(port, self.r, self._sizes, self._details, self._move, ways=2, timed=True)

    def enter(self, port: sim.Port, state) -> None:
        """Member `port.group.index` joins: its terms copied, its buffers allocated (and charged) in its memory."""
        j, p = port.group.index, state.team.index
        own = state.own
        if len(own):
            self.terms[j] = own.flat[int(own.at[0]):int(own.at[0] + self.sizes.sum())] if _consecutive(own) \
                else np.concatenate([part.reshape(-1) for part in own])
        self.states[j] = state
        total = int(self.totals[p])
        if total:
            region = self.rows[int(self.held[p]):int(self.held[p]) + total]
            port.memory.reserve(region)
            port.memory.alloc(self.dtype, (total,))
            for other in port.memory.release():  # nothing is left reserved that the allocation did not take
                if other is not region:
                    port.memory.reserve(other)

    def _chunk(self, positions: np.ndarray, steps: np.ndarray, ways: np.ndarray, ahead: int) -> np.ndarray:
        return (positions + _OFFSETS[ways] * (self.r - steps - ahead)) % self.n

    def _span(self, chunks: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The part [lo, hi) of each chunk a message carries (`collectives._bidirectional._lane`)."""
        sizes = self.sizes[chunks]
        if self.n % 2:
            return np.zeros(len(chunks), np.int64), sizes
        split, half = steps == 0, (sizes + 1) // 2  # numpy.array_split's first half goes clockwise
        return np.where(split & (ways == 1), half, 0), np.where(split & (ways == 0), half, sizes)

    def _sizes(self, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> np.ndarray:
        lo, hi = self._span(self._chunk(self.of.positions[senders], steps, ways, 0), steps, ways)
        return (hi - lo) * self.itemsize

    def _details(self, positions: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> dict[str, list]:
        names = self.names
        return {"phase": [names[w] for w in ways.tolist()], "step": steps.tolist(),
                "chunk": self._chunk(positions, steps, ways, 0).tolist()}

    def _source(self, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray,
                chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flat array, start) of what each message carries: the sender's term at step 0, else the buffer
        its arrival of the step before became."""
        positions = self.of.positions[senders]
        first = steps == 0
        terms_start = senders * self.terms.shape[1] + self.chunk_at[chunks]
        earlier = np.maximum(steps - 1, 0)
        held_start = self.held[positions] + self.at[positions, earlier, ways] if self.r > 1 else terms_start
        return first, np.where(first, terms_start, held_start)

    def _move(self, receivers: np.ndarray, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> None:
        positions = self.of.positions[receivers]
        chunks = self._chunk(positions, steps, ways, 1)
        last = steps == self.r - 1
        if not last.any() and not self.sizes[chunks].any():  # empty chunks: nothing to write
            return
        lo, hi = self._span(chunks, steps, ways)
        first, start = self._source(senders, steps, ways, chunks)
        terms = self.terms.reshape(-1)
        if last.any():
            for i in np.flatnonzero(last).tolist():
                where = terms if first[i] else self.rows
                span = slice(int(lo[i]), int(hi[i]))
                values = where[int(start[i] + lo[i]):int(start[i] + hi[i])]
                self.states[receivers[i]].arrived[int(_OFFSETS[ways[i]])] = (
                    span, started(self.reduction, values) if first[i] else values)
        keep = ~last
        if not keep.any():
            return
        if not keep.all():
            receivers, steps, ways, chunks, lo, hi, first, start = (
                v[keep] for v in (receivers, steps, ways, chunks, lo, hi, first, start))
        positions = self.of.positions[receivers]
        put = self.held[positions] + self.at[positions, steps, ways]
        own = receivers * self.terms.shape[1] + self.chunk_at[chunks]
        whole = self.sizes[chunks]
        rows, reduction = self.rows, self.reduction
        rows[_runs(put, whole)] = started(reduction, terms[_runs(own, whole)])
        carried = hi - lo
        for source, pick in ((terms, first), (rows, ~first)):
            if pick.any():
                theirs = source[_runs(start[pick] + lo[pick], carried[pick])]
                if source is terms:  # a chain's first term, folded into the identity as the loop's `_partial`
                    theirs = started(reduction, theirs)
                rows[_runs(put[pick] + lo[pick], carried[pick])] = combine(
                    reduction, theirs, terms[_runs(own[pick] + lo[pick], carried[pick])])


def _runs(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """`collectives._joint.ragged(starts, lengths)`: the starts themselves where every run is one long."""
    if len(lengths) and lengths.min() == 1 == lengths.max():
        return starts
    return ragged(starts, lengths)


def _consecutive(own: Sequence[np.ndarray]) -> bool:
    """Whether `own` is a `Cut` whose units follow one another in its flat buffer."""
    return isinstance(own, Cut) and bool(np.all(own.at[1:] == own.at[:-1] + own.sizes[:-1]))
