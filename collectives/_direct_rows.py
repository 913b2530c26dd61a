"""A direct phase's pieces as rows of one array, so that a run of receives is one copy or one sum.

In a direct phase (`collectives._direct_steps`) each member's pieces are cut from one flat buffer alike
(`Pieces`: piece v for team position t at `at[t * V + v]`, `sizes[...]` elements). Once every member has
joined, `Joint.of` takes one snapshot of all members' buffers as the rows of a (members, elements) array:
what a message carries is read there (a member's terms and its own gathered units do not change while the
phase runs, so the snapshot holds what each message would carry when it arrives). A reduce-scatter keeps
its running sums as rows of one array too, and folds a run of receives with one `combine`; a gather
writes a member's places from the snapshot when its last message has arrived (no one reads them before).

Worked example (two members of a team of 2, one float each per position, flats [a0, a1] and [b0, b1]):
the snapshot is [[a0, a1], [b0, b1]]; member 0 receives member 1's piece of position 0, b0, at
`snapshot.flat[1 * 2 + 0]`, and its running sum of position 0 is `sums.flat[0 * 2 + 0]`.

>>> pieces = singles(np.arange(5.0), 3)
>>> [[part.tolist() for part in row] for row in pieces], pieces.at.tolist(), pieces.sizes.tolist()
([[[0.0, 1.0]], [[2.0, 3.0]], [[4.0]]], [0, 2, 4], [2, 2, 1])
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

import sim
from collectives._arithmetic import combine, identity
from collectives._joint import JOINT_MAX_BYTES, Rows, ragged

__all__ = ["Joint", "Pieces", "blocks", "singles"]


class Pieces(Sequence):
    """Pieces by team position (`self[t][v]`, `per` of them per position, views made when read) cut from
    the C-contiguous 1-D buffer `flat`: piece q = t * per + v is `flat[at[q]:at[q] + sizes[q]]`, reshaped
    to `shape` where given."""

    def __init__(self, flat: np.ndarray, at: np.ndarray, sizes: np.ndarray, per: int,
                 shape: tuple[int, ...] | None = None) -> None:
        self.flat, self.at, self.sizes = flat, np.asarray(at, np.int64), np.asarray(sizes, np.int64)
        self.per, self.shape = per, shape
        self._at, self._sizes = self.at.tolist(), self.sizes.tolist()

    def __len__(self) -> int:
        return len(self._at) // self.per

    def __getitem__(self, t):  # type: ignore[override]
        if isinstance(t, slice):
            return [self[i] for i in range(*t.indices(len(self)))]
        t = range(len(self))[t]
        views = [self.flat[a:a + n] for a, n in zip(self._at[t * self.per:(t + 1) * self.per],
                                                     self._sizes[t * self.per:(t + 1) * self.per])]
        return views if self.shape is None else [view.reshape(self.shape) for view in views]

    @staticmethod
    def of_views(rows: Sequence[Sequence[np.ndarray]]) -> Pieces | None:
        """`rows` (as many 1-D C-contiguous pieces per position, one dtype) as `Pieces` of the one buffer
        they lie in, trimmed to the run they span; None where they do not lie in one buffer."""
        per = len(rows[0]) if len(rows) else 0
        views = [view for row in rows for view in row]
        if not per or any(len(row) != per for row in rows) or any(view.ndim != 1 for view in views):
            return None
        found = Rows.of(views, writable=False)
        if found is None:
            return None
        sizes = np.array([view.size for view in views], np.int64)
        low, high = int(found.starts.min()), int((found.starts + sizes).max())
        return Pieces(found.flat[low:high], found.starts - low, sizes, per)

    def nbytes(self, q: np.ndarray) -> np.ndarray:
        """The bytes of pieces `q`."""
        return self.sizes[q] * self.flat.dtype.itemsize


def singles(flat: np.ndarray, k: int) -> Pieces:
    """`[[part] for part in numpy.array_split(flat, k)]` of a 1-D C-contiguous array (the same views)."""
    q, r = divmod(len(flat), k)
    bounds = np.minimum(np.arange(k + 1), r) + np.arange(k + 1) * q
    return Pieces(flat, bounds[:-1], np.diff(bounds), 1)


def blocks(work: np.ndarray, order: Sequence[int], nodes: int, k: int) -> Pieces:
    """`[[work[order[v * k + t]] for v in range(nodes)] for t in range(k)]` of a C-contiguous `work`
    (blocks along its first axis), with where each block lies in `work`'s flat buffer."""
    per = math.prod(work.shape[1:])
    index = np.asarray(order, np.int64).reshape(nodes, k).T.reshape(-1)  # q = t * nodes + v
    return Pieces(work.reshape(-1), index * per, np.full(len(index), per, np.int64), nodes, work.shape[1:])


class Joint:
    """Every member's `Pieces` (cut alike) as the rows of one snapshot `rows` (members, elements); `sums`
    (made by `start_sums`) holds a reduce-scatter's running sums in the same places."""

    def __init__(self, rows: np.ndarray, at: np.ndarray, sizes: np.ndarray) -> None:
        self.rows, self.at, self.sizes = rows, at, sizes
        self.width = rows.shape[1]
        self.sums: np.ndarray | None = None

    @staticmethod
    def of(cuts: Sequence[object]) -> Joint | None:
        """The snapshot of every member's pieces (`cuts[j]`: member j's), or None where one is not `Pieces`,
        they are not cut alike or of one dtype, they are abstract, or the snapshot would be too large."""
        first = cuts[0]
        if not all(isinstance(c, Pieces) for c in cuts):
            return None
        dtype, width = first.flat.dtype, first.flat.size  # type: ignore[attr-defined]
        if (sim.memory.is_hollow(dtype) or dtype.hasobject or len(cuts) * width * dtype.itemsize > JOINT_MAX_BYTES
                or any(c.flat.dtype != dtype or c.flat.size != width or not np.array_equal(c.at, first.at)  # type: ignore[attr-defined]
                       or not np.array_equal(c.sizes, first.sizes) for c in cuts)):  # type: ignore[attr-defined]
            return None
        return Joint(np.stack([c.flat.reshape(-1) for c in cuts]), first.at, first.sizes)  # type: ignore[attr-defined]

    def runs(self, members: np.ndarray, pieces: np.ndarray) -> np.ndarray:
        """The flat indices of piece `pieces[i]` in row `members[i]`, one run after another."""
        return ragged(members * self.width + self.at[pieces], self.sizes[pieces])

    def start_sums(self, reduction: str, started: dict[int, list[np.ndarray]]) -> bool:
        """Running sums from the identity, but `started[j]` (member j's sums so far of pieces q, as (q,
        values) pairs) where given; False where the reduction does not keep the dtype (then no sums here)."""
        dtype = self.rows.dtype
        sample = combine(reduction, identity(reduction, dtype), self.rows.reshape(-1)[:1])
        if sample.dtype != dtype:
            return False
        self.sums = np.empty_like(self.rows)
        self.sums[...] = identity(reduction, dtype)
        for j, pairs in started.items():
            for q, values in pairs:
                a = int(self.at[q])
                self.sums[j, a:a + int(self.sizes[q])] = values.reshape(-1)
        return True

    def fold(self, reduction: str, receivers: np.ndarray, senders: np.ndarray, pieces: np.ndarray) -> None:
        """Running sum `pieces[i]` of member `receivers[i]` combined with that piece of member `senders[i]`."""
        put, take = self.runs(receivers, pieces), self.runs(senders, pieces)
        if put.size:
            flat = self.sums.reshape(-1)  # type: ignore[union-attr]
            flat[put] = combine(reduction, flat[put], self.rows.reshape(-1)[take])

    def sums_of(self, member: int, pieces: Sequence[int]) -> list[np.ndarray]:
        """Member `member`'s running sums of `pieces`, as views."""
        row = self.sums[member]  # type: ignore[index]
        return [row[a:a + n] for a, n in zip(self.at[list(pieces)].tolist(), self.sizes[list(pieces)].tolist())]

    def gather_into(self, flat: np.ndarray, sources: np.ndarray, pieces: np.ndarray) -> None:
        """Write piece `pieces[i]` of member `sources[i]`'s snapshot into the same place of `flat`."""
        put = ragged(self.at[pieces], self.sizes[pieces])
        if put.size:
            flat.reshape(-1)[put] = self.rows.reshape(-1)[self.runs(sources, pieces)]
