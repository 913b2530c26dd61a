"""Recursive doubling and halving for every member at once: a step's copies and folds as numpy operations.

In these loops member r's partner at step s is r XOR d (d = 2^s doubling, n / 2^(s+1) halving), and what a
message carries is fixed by (sender, step) and the chunk bounds: the messages' bytes, their trace details
and what each receiver writes are worked out for all the members of a step table (`sim.engine.Steps`) at
once, instead of one Python call per message (`collectives._ring_steps.PerMember`). Each member's buffers
lie in its own memory (allocated and charged there, the bytes the per-member loop allocates), as rows of
one array (`collectives._joint.Rows`), so a step's copies are one fancy-indexed copy and its folds one
`combine` over the gathered operands (elementwise: the same bits as one call per message).

- `Copies` (an all-gather by recursive doubling): at step s member j sends chunks [m, m + d) of its flat
  buffer, m = j & ~(d - 1), and its partner writes them at the same place of its own.
- `Folds` (recursive halving, and the all-reduce's recursive doubling): member r's
  partial results are segments, segment 0 its own terms; at step s it keeps a run of segment s (all of it
  when doubling), receives the same run of its partner's segment s, and writes `low op high` (the lower
  group index's run first) as its segment s + 1. Where a step's runs are of one length and the rows equally
  spaced, the runs are taken by slices of one 2-D view of the rows (`grid`), else by their indices.

The loops of the algorithms are made of these in `collectives._doubling_loops`.

Worked example (n = 2, one float each, all-reduce by recursive doubling, sum): member 0's segment 0 is
[x0], member 1's [x1]; in the one step each reads its partner's segment 0 and writes x0 + x1 as its
segment 1 (its result buffer), member 0 adding its own first, member 1 its partner's.

Where the rows are not of one array (a buffer that took an earlier reservation, more than
`collectives._joint.JOINT_MAX_BYTES`) or not every member has joined yet, the same writes are made one
message at a time from each member's own buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence

import numpy as np

import sim
from collectives._arithmetic import combine
from collectives._joint import JOINT_MAX_BYTES, Decided, Rows, ragged

_RUN_MAX = 256  # longest run copied by fancy indexing (an index per element); longer ones are sliced
_BLOCKS_MAX = 8  # most blocks of rows a step folds one after another (else by the indices of every run)


def by_rows(port: sim.Port, dtype: np.dtype) -> bool:
    """Whether this call's doubling or halving loop runs as rows: the payloads are concrete (abstract ones
    carry no values to fold), decided once per call so every member takes one path."""
    return port.once("doubling rows", lambda: not sim.memory.is_hollow(np.dtype(dtype)))


def apart(port: sim.Port, key: str, dtype: np.dtype, sizes: np.ndarray) -> np.ndarray:
    """A zeroed flat buffer of `sizes[j]` elements of `dtype` in member j's memory (the caller's: j its group
    index), the members' buffers cut one after another from one array shared by the call (each allocated
    and charged in its own memory, as any allocation; the memory's earlier reservations are left for later
    allocations); past `JOINT_MAX_BYTES` in all, an allocation like any other."""
    memory, dtype, me = port.memory, np.dtype(dtype), port.group.index
    size = int(sizes[me])
    ends = np.cumsum(sizes)
    if not size or int(ends[-1]) * dtype.itemsize > JOINT_MAX_BYTES:
        return memory.view(memory.alloc(dtype, (size,)))
    whole = port.once(("apart", key), lambda: np.zeros(int(ends[-1]), dtype))
    earlier = memory.release()
    memory.reserve(whole[int(ends[me]) - size:int(ends[me])])
    view = memory.view(memory.alloc(dtype, (size,)))
    for region in earlier:
        memory.reserve(region)
    return view


class Copies:
    """An all-gather by recursive doubling over chunks: chunk c of a member's flat buffer is elements
    `bounds[c]:bounds[c + 1]`; the messages' trace details name their chunks under `key`. A member's
    `Steps` state is its flat buffer (its own chunk already written)."""

    def __init__(self, port: sim.Port, bounds: Sequence[int] | np.ndarray, key: str, itemsize: int,
                 alone: bool = True) -> None:
        n = port.group.size
        self.bounds, self.key, self.itemsize = np.asarray(bounds, np.int64), key, itemsize
        self.count = n.bit_length() - 1
        self.to = np.arange(n)[:, None] ^ (1 << np.arange(self.count))  # to[j, s]: member j's partner at step s
        self.of, self.part = (sim.engine.Steps(port, self.count, self.sizes, self.details, self.move, timed=True,
                                                 routes=self.to)
                              if alone else None), None  # not alone: part of a `Joined` loop
        self.rows = Decided()

    def states(self) -> list:
        """What each member joined with (None until it has), its part where the loop is `Joined`."""
        return self.of.states if self.part is None else [s and s[self.part] for s in self.of.states]

    def join(self, port: sim.Port, flat: np.ndarray) -> Generator:
        """The caller's part: swap its run of chunks with the member whose index differs in bit s, s = 0, 1, ..."""
        me = port.group.index
        yield from self.of.join(port, self.to[me], me, flat)

    def _runs(self, members: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The first chunk each member holds before step s, and the chunks' first element."""
        held = members & ~((1 << steps) - 1)
        return held, self.bounds[held]

    def sizes(self, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> np.ndarray:
        held, start = self._runs(senders, steps)
        return (self.bounds[held + (1 << steps)] - start) * self.itemsize

    def details(self, positions: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> dict[str, list]:
        held = positions & ~((1 << steps) - 1)
        return {"phase": ["recursive-doubling"] * len(steps), "step": steps.tolist(),
                self.key: list(zip(held.tolist(), (held + (1 << steps)).tolist()))}

    def move(self, receivers: np.ndarray, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> None:
        """Each receiver writes its sender's run where the sender holds it (no member reads a run being
        written at this step: a step writes the chunks its receiver did not hold)."""
        held, start = self._runs(senders, steps)
        lengths = self.bounds[held + (1 << steps)] - start
        states = self.states()
        rows = self.rows.get(states, lambda states: Rows.of(list(states)))
        if rows is not None:
            copy_runs(rows.flat, rows.starts[receivers] + start, rows.starts[senders] + start, lengths)
            return
        for r, j, a, length in zip(receivers.tolist(), senders.tolist(), start.tolist(), lengths.tolist()):
            states[r][a:a + length] = states[j][a:a + length]


class Folds:
    """Partial results folded pairwise (see the module docstring). `at[r, s]` and `runs[r, s]`: where in
    member r's segment s the run it keeps at step s starts, and its length (its partner's run lies at the
    same place of the partner's segment s); `segments[r, k]`: where member r's segment k starts in its
    buffer `home[k]` (0: its working buffer, 1: a result buffer of its own). `partner(members, steps)` is
    each member's partner at a step (group indices, arrays or ints); `chunks(senders, steps)` the chunks each
    message carries for its trace detail, or None for none.

    A member joins with its own terms as segment 0 (`first` elements); they are folded into the reduction's
    `identity` (`combine(reduction, identity, terms)`, as the per-message loop's first partial result) before
    any message reads them, for every member joined by then at once."""

    def __init__(self, port: sim.Port, phase: str, reduction: str, at: np.ndarray, runs: np.ndarray,
                 segments: np.ndarray, home: Sequence[int], itemsize: int, partner: Callable,
                 first: tuple[np.ndarray, int],
                 chunks: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None,
                 alone: bool = True) -> None:
        self.phase, self.reduction, self.itemsize, self.chunks = phase, reduction, itemsize, chunks
        self.partner, (self.identity, self.first) = partner, first
        self.pending = np.zeros(at.shape[0], bool)  # members whose terms are not folded into the identity yet
        self.to = partner(np.arange(at.shape[0])[:, None], np.arange(at.shape[1])[None, :])  # [j, s]
        self.at, self.runs, self.segments, self.home = at, runs, segments, list(home)
        self.n, self.count = at.shape
        self.of, self.part = (sim.engine.Steps(port, self.count, self.sizes, self.details, self.move, timed=True,
                                                 routes=self.to)
                              if alone else None), None  # not alone: part of a `Joined` loop
        self.rows = [Decided() for _ in range(max(self.home) + 1)]

    def states(self) -> list:
        """What each member joined with (None until it has), its part where the loop is `Joined`."""
        return self.of.states if self.part is None else [s and s[self.part] for s in self.of.states]

    def join(self, port: sim.Port, buffers: Sequence[np.ndarray]) -> Generator:
        """The caller's part (its flat buffers by `home` index, segment 0 written)."""
        me = port.group.index
        self.pending[me] = True
        yield from self.of.join(port, self.to[me], me, list(buffers))

    def segment(self, member: int, k: int, states: Sequence[Sequence[np.ndarray]]) -> np.ndarray:
        """Member `member`'s segment k (to its end for the working buffer)."""
        buffer = states[member][self.home[k]]
        return buffer[int(self.segments[member, k]):]

    def sizes(self, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> np.ndarray:
        return self.runs[self.partner(senders, steps), steps] * self.itemsize  # the run its partner keeps

    def details(self, positions: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> dict[str, list]:
        detail = {"phase": [self.phase] * len(steps), "step": steps.tolist()}
        if self.chunks is not None:
            first, last = self.chunks(positions, steps)
            detail["chunks"] = list(zip(first.tolist(), last.tolist()))
        return detail

    def move(self, receivers: np.ndarray, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> None:
        """Each receiver's next segment: `low op high` of its run and its sender's (lower index first). A step
        writes segments no message of this step reads (each member's next), so the writes are taken together."""
        if self.pending.any():
            self._start()
        for step in np.unique(steps).tolist():
            pick = steps == step
            self._fold(receivers[pick], senders[pick], step)

    def _rows(self, home: int) -> tuple[Rows, np.ndarray | None] | None:
        """The members' buffers `home` as rows of one array and, where equally spaced, as one 2-D array
        (`grid`); None where they are not rows or not every member has joined."""
        def make(states: Sequence[Sequence[np.ndarray]]) -> tuple[Rows, np.ndarray | None] | None:
            buffers = [state[home] for state in states]
            rows, sizes = Rows.of(buffers), {buffer.size for buffer in buffers}
            return None if rows is None else (rows, grid(rows, sizes.pop()) if len(sizes) == 1 else None)
        return self.rows[home].get(self.states(), make)

    def _fold(self, receivers: np.ndarray, senders: np.ndarray, step: int) -> None:
        source, target = self._rows(self.home[step]), self._rows(self.home[step + 1])
        if source is None:
            self._fold_apart(receivers, senders, step)
        elif not (source[1] is not None and self._fold_blocks(source[1], target, receivers, senders, step)):
            self._fold_runs(source[0], target, receivers, senders, step)

    def _fold_blocks(self, source: np.ndarray, target: tuple[Rows, np.ndarray | None] | None, receivers: np.ndarray,
                     senders: np.ndarray, step: int) -> bool:
        """`_fold` over the members' rows as one 2-D array, a block of rows at a time, where every run is of
        one length and the partners' runs lie at the same column: the runs taken by slices, not indices.
        False (nothing written) where they do not, or lie at many columns."""
        lengths, segments = self.runs[receivers, step], self.segments[:, step]
        if np.any(lengths != lengths[0]) or np.any(segments[senders] != segments[receivers]):
            return False
        places = np.stack([segments[receivers] + self.at[receivers, step], self.segments[receivers, step + 1]], 1)
        columns, which = np.unique(places, axis=0, return_inverse=True)
        if len(columns) > _BLOCKS_MAX:
            return False
        low, high, length = np.minimum(receivers, senders), np.maximum(receivers, senders), int(lengths[0])
        for k, (column, put) in enumerate(columns.tolist()):
            pick = which.reshape(-1) == k
            total = combine(self.reduction, source[low[pick], column:column + length],
                            source[high[pick], column:column + length])
            if target is not None and target[1] is not None:
                target[1][receivers[pick], put:put + length] = total
            else:
                self._write(target, receivers[pick], step, total)
        return True

    def _fold_runs(self, source: Rows, target: tuple[Rows, np.ndarray | None] | None, receivers: np.ndarray,
                   senders: np.ndarray, step: int) -> None:
        """`_fold` over the members' rows by the indices of every run."""
        at, lengths = self.at[receivers, step], self.runs[receivers, step]
        mine = source.starts[receivers] + self.segments[receivers, step] + at
        theirs = source.starts[senders] + self.segments[senders, step] + at
        low, high = np.where(receivers < senders, mine, theirs), np.where(receivers < senders, theirs, mine)
        total = combine(self.reduction, source.flat[spans(low, lengths)], source.flat[spans(high, lengths)])
        self._write(target, receivers, step, total)

    def _write(self, target: tuple[Rows, np.ndarray | None] | None, receivers: np.ndarray, step: int,
               total: np.ndarray) -> None:
        """Write each receiver's run of `total` (the receivers' runs one after another) as its segment
        step + 1: by indices where the segments are rows of one array, else one receiver at a time."""
        lengths = self.runs[receivers, step]
        if target is not None:
            rows = target[0]
            rows.flat[spans(rows.starts[receivers] + self.segments[receivers, step + 1], lengths)] = total.reshape(-1)
            return
        ends, states, flat = np.cumsum(lengths), self.states(), total.reshape(-1)
        for r, end, length in zip(receivers.tolist(), ends.tolist(), lengths.tolist()):
            self.segment(r, step + 1, states)[:length] = flat[end - length:end]

    def _start(self) -> None:
        """Fold the terms of every member joined so far into the identity (their segment 0), at once."""
        states, home = self.states(), self.home[0]
        found = self._rows(home)
        members = np.flatnonzero(self.pending & np.array([state is not None for state in states]))
        self.pending[members] = False
        if found is not None:
            rows, block = found
            if block is not None and np.all(self.segments[:, 0] == self.segments[0, 0]):
                at = int(self.segments[0, 0])
                block[members, at:at + self.first] = combine(self.reduction, self.identity,
                                                             block[members, at:at + self.first])
                return
            terms = spans(rows.starts[members] + self.segments[members, 0], np.full(len(members), self.first))
            rows.flat[terms] = combine(self.reduction, self.identity, rows.flat[terms])
            return
        for j in members.tolist():
            terms = self.segment(j, 0, states)[:self.first]
            terms[...] = combine(self.reduction, self.identity, terms)

    def _fold_apart(self, receivers: np.ndarray, senders: np.ndarray, step: int) -> None:
        """`_fold` one message at a time, from each member's own buffers."""
        states = self.states()
        for r, j in zip(receivers.tolist(), senders.tolist()):
            a, length = int(self.at[r, step]), int(self.runs[r, step])
            mine = self.segment(r, step, states)[a:a + length]
            theirs = self.segment(j, step, states)[a:a + length]
            low, high = (mine, theirs) if r < j else (theirs, mine)
            self.segment(r, step + 1, states)[:length] = combine(self.reduction, low, high)


def grid(rows: Rows, size: int) -> np.ndarray | None:
    """Members' rows of `size` elements each as one 2-D array (member, element), a view of their memory, where
    they are equally spaced (member j's row starting at least `size` elements after member j - 1's, always
    as far); else None."""
    starts, flat = rows.starts, rows.flat
    stride = int(starts[1] - starts[0]) if len(starts) > 1 else 0
    if stride < size or not size or np.any(np.diff(starts) != stride) or int(starts[-1]) + size > len(flat):
        return None
    return np.lib.stride_tricks.as_strided(flat[int(starts[0]):], (len(starts), size),
                                           (stride * flat.itemsize, flat.itemsize))


def spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices of the runs [starts[i], starts[i] + lengths[i]), one after another (a block of them where
    every run has one length)."""
    if len(lengths) and np.all(lengths == lengths[0]):
        return (starts[:, None] + np.arange(int(lengths[0]))).reshape(-1)
    return ragged(starts, lengths)


def copy_runs(flat: np.ndarray, put: np.ndarray, take: np.ndarray, lengths: np.ndarray) -> None:
    """`flat[put[i]:put[i] + lengths[i]] = flat[take[i]:...]` for every i (runs apart from each other): short
    runs by one fancy-indexed copy, long ones by slices."""
    short = lengths <= _RUN_MAX
    if short.any():
        flat[spans(put[short], lengths[short])] = flat[spans(take[short], lengths[short])]
    for a, b, length in zip(take[~short].tolist(), put[~short].tolist(), lengths[~short].tolist()):
        flat[b:b + length] = flat[a:a + length]
