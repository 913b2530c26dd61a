"""The loops of recursive halving, Rabenseifner and the all-reduce's recursive doubling as rows: where each
member's partial results lie and which run it folds at each step, worked out once per call for all members
(`collectives._doubling_rows`: `Folds`, `Copies`).

- `swapped`: the all-reduce's recursive doubling, every member folding the whole of its partial result with
  its partner's at each step.
- `halved`: recursive halving, every member keeping half of its run of chunks at each step.
- `Joined`: Rabenseifner, the halving's `Folds` and then the all-gather's `Copies` as one `sim.engine.Steps`
  loop, each member's last fold written into its all-gather buffer.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import numpy as np

import sim
from collectives._arithmetic import identity
from collectives._doubling_rows import Copies, Folds


class Joined:
    """Two loops of one call run as one `Steps` loop (Rabenseifner: recursive halving, then an all-gather by
    recursive doubling): `first`'s steps, then `second`'s, each member going on to the second as soon as
    its part of the first ends, as it would from one loop to the next. A member joins with its state of
    each; a step's sizes, details and moves are each loop's own for the messages of its steps."""

    def __init__(self, port: sim.Port, first: Folds, second: Copies) -> None:
        self.parts, self.cut = (first, second), first.count
        self.to = np.concatenate([first.to, second.to], axis=1)
        self.of = sim.engine.Steps(port, first.count + second.count, self.sizes, self.details, self.move,
                                     timed=True, routes=self.to)
        for k, part in enumerate(self.parts):
            part.of, part.part = self.of, k

    def join(self, port: sim.Port, first: Sequence[np.ndarray], second: np.ndarray) -> Generator:
        """The caller's part (its states of `first` and `second`)."""
        me = port.group.index
        self.parts[0].pending[me] = True
        yield from self.of.join(port, self.to[me], me, (list(first), second))

    def _split(self, steps: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """The messages of each loop (a mask) and their steps in it."""
        early = steps < self.cut
        return [(early, steps[early]), (~early, steps[~early] - self.cut)]

    def sizes(self, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> np.ndarray:
        sizes = np.zeros(len(steps), np.int64)
        for part, (pick, own) in zip(self.parts, self._split(steps)):
            if len(own):
                sizes[pick] = part.sizes(senders[pick], own, ways[pick])
        return sizes

    def details(self, positions: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> dict[str, list]:
        """Each message's detail from its loop (both name the same keys), in the messages' order."""
        found = [(pick, part.details(positions[pick], own, ways[pick]))
                 for part, (pick, own) in zip(self.parts, self._split(steps)) if len(own)]
        if len(found) == 1:
            return found[0][1]
        merged = {key: [None] * len(steps) for key in found[0][1]}
        for pick, detail in found:
            places = np.flatnonzero(pick).tolist()
            for key, values in detail.items():
                column = merged[key]
                for i, value in zip(places, values):
                    column[i] = value
        return merged

    def move(self, receivers: np.ndarray, senders: np.ndarray, steps: np.ndarray, ways: np.ndarray) -> None:
        for part, (pick, own) in zip(self.parts, self._split(steps)):
            if len(own):
                part.move(receivers[pick], senders[pick], own, ways[pick])


def swapped(port: sim.Port, count: int, size: int, reduction: str, dtype: np.dtype) -> Folds:
    """The all-reduce's recursive doubling (`count` steps over `size` elements) as `Folds`: at step s every
    member folds the whole of its segment s with its partner's into segment s + 1 (segments 0 .. count - 1
    in its working buffer, one after another; segment `count` its result)."""
    n = port.group.size
    runs = np.full((n, count), size, np.int64)
    segments = np.concatenate([np.tile(np.arange(count, dtype=np.int64) * size, (n, 1)), np.zeros((n, 1), np.int64)],
                              axis=1)
    return Folds(port, "recursive-doubling", reduction, np.zeros_like(runs), runs, segments, [0] * count + [1],
                 dtype.itemsize, lambda member, step: member ^ (1 << step), (identity(reduction, dtype), size))


def halved(port: sim.Port, bounds: list[int], reduction: str, dtype: np.dtype, into: bool = False
           ) -> tuple[Folds, np.ndarray]:
    """The call's recursive halving over chunks `bounds` as `Folds`, and where each member's buffer of partial
    results ends (its size): segment 0 the whole vector, segment s + 1 the run kept at step s.
    For example, with n = 4 and chunks of 1, 2, 0 and 1 elements, member 2's segments are the 4 elements,
    then chunks 2..3 (1 element, at 3 in segment 0), then chunk 2 (none): its buffer holds 5 elements.
    With `into`, the last segment is written in a second buffer of each member's instead, at its chunk's
    place (Rabenseifner's all-gather buffer: `Joined`), and the folds are part of a `Joined` loop."""
    n = port.group.size
    count, b = n.bit_length() - 1, np.asarray(bounds, np.int64)
    member, d = np.arange(n)[:, None], n >> (np.arange(count) + 1)[None, :]
    kept = member & ~(d - 1)
    at, runs = b[kept] - b[member & ~(2 * d - 1)], b[kept + d] - b[kept]
    sizes = np.concatenate([np.full((n, 1), b[-1] - b[0]), runs], axis=1)
    segments = np.cumsum(sizes, axis=1) - sizes

    def chunks(senders: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d = n >> (steps + 1)
        give = (senders ^ d) & ~(d - 1)  # the run its partner keeps
        return give, give + d
    ends = segments[:, -1] + sizes[:, -1]  # the bytes the per-message loop allocates, the last segment's too
    if into:
        segments = np.concatenate([segments[:, :-1], b[:-1, None]], axis=1)  # member r ends with chunk r
    folds = Folds(port, "recursive-halving", reduction, at, runs, segments, [0] * count + [int(into)],
                  np.dtype(dtype).itemsize, lambda member, step: member ^ (n >> (step + 1)),
                  (identity(reduction, dtype), int(b[-1])), chunks, alone=not into)
    return folds, ends
