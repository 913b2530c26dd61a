"""Members' buffers as rows of one array, so that a step's copies between members are one copy.

A multi-step algorithm moves, at each step, one unit (a block, a chunk, a partial sum) from each member's
memory to another member's. Where every member's buffer is its own allocation those are one numpy copy
per message; where they lie in one array's memory, a step's messages move as one fancy-indexed copy of
that memory. `joint` allocates a call's per-member buffers that way (each still a buffer of its own
member's memory, allocated and charged there as any other), `Cut` is a flat buffer cut into units, and
`UnitRows` / `FoldRows` find the members' units in their common memory and make a step's copies and sums.

Worked example (two members, 3 floats each, cut into units [0:1] and [1:3]): member 0's and member 1's
buffers are rows 0 and 1 of one (2, 3) array; moving unit 1 of member 0 into unit 1 of member 1 is
`rows.flat[[4, 5]] = rows.flat[[1, 2]]`, what `f1[1:3] = f0[1:3]` one message at a time writes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

import sim
from sim.memory._buffer import address_of

__all__ = ["JOINT_MAX_BYTES", "Cut", "Decided", "FoldRows", "Rows", "UnitRows", "cut", "joint", "ragged", "staged",
           "units_of"]

JOINT_MAX_BYTES = 64 << 20  # past this the messages carry enough bytes that one copy each costs little more
_RUN_MAX = 256  # longest unit moved by fancy indexing (an index per element); longer ones are sliced


class Cut(Sequence):
    """A flat buffer cut into units: `self[k]` is `flat[at[k]:at[k] + sizes[k]]` (reshaped to `shapes[k]`
    where given), made when read, so that cutting costs nothing per unit."""

    def __init__(self, flat: np.ndarray, at: Sequence[int] | np.ndarray, sizes: Sequence[int] | np.ndarray,
                 shapes: Sequence[tuple[int, ...]] | None = None, shape: tuple[int, ...] | None = None) -> None:
        self.flat, self.shapes, self.shape = flat, shapes, shape  # `shape`: every unit's, where all are alike
        self.at, self.sizes = np.asarray(at, np.int64), np.asarray(sizes, np.int64)
        self._at: list[int] | None = None  # `at` and `sizes` as lists, made on the first read of a unit
        self._sizes: list[int] = []

    @staticmethod
    def bounded(flat: np.ndarray, bounds: Sequence[int] | np.ndarray,
                shapes: Sequence[tuple[int, ...]] | None = None, shape: tuple[int, ...] | None = None) -> Cut:
        """Consecutive units: unit k is `flat[bounds[k]:bounds[k + 1]]`."""
        bounds = np.asarray(bounds, np.int64)
        return Cut(flat, bounds[:-1], np.diff(bounds), shapes, shape)

    @staticmethod
    def blocks(work: np.ndarray, order: Sequence[int] | None = None) -> Cut:
        """The blocks of `work` (C-contiguous, along its first axis) as flat units, unit k being block
        `order[k]` (the identity without an order)."""
        n, size = len(work), math.prod(work.shape[1:])
        index = np.arange(n, dtype=np.int64) if order is None else np.asarray(order, np.int64)
        return Cut(work.reshape(-1), index * size, np.full(n, size, np.int64))

    def __len__(self) -> int:
        return len(self.at)

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        k = range(len(self))[k]
        if self._at is None:  # a cut whose units are never read costs no list
            self._at, self._sizes = self.at.tolist(), self.sizes.tolist()
        a = self._at[k]
        view = self.flat[a:a + self._sizes[k]]
        if self.shape is not None:
            return view.reshape(self.shape)
        return view if self.shapes is None else view.reshape(self.shapes[k])

    def nbytes(self) -> np.ndarray:
        """Each unit's bytes."""
        return self.sizes * self.flat.dtype.itemsize


def cut(flat: np.ndarray, n: int) -> Cut:
    """`numpy.array_split(flat, n)` of a 1-D array as a `Cut` (the same views).

    >>> [part.tolist() for part in cut(np.arange(5), 3)]
    [[0, 1], [2, 3], [4]]
    """
    q, r = divmod(len(flat), n)
    return Cut.bounded(flat, np.minimum(np.arange(n + 1), r) + np.arange(n + 1) * q)


def joint(port: sim.Port, key: Hashable, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A zeroed row-major buffer of `dtype` and `shape` in the caller's memory (allocated and charged there),
    which every member of the call that asks under `key` gets as one row of one shared array. Beyond
    `JOINT_MAX_BYTES` in all, when an earlier reservation of the memory takes the allocation, or when the
    caller already holds its row of `key` (a second ask, as by a pass run once per mesh axis), the buffer is
    an allocation like any other: a row is never handed out twice, so a new buffer never aliases a live one
    whose messages may still be read."""
    memory, dtype, shape = port.memory, np.dtype(dtype), tuple(shape)
    size_bytes = math.prod(shape) * dtype.itemsize
    if not size_bytes or port.group.size * size_bytes > JOINT_MAX_BYTES:
        return memory.view(memory.alloc(dtype, shape))
    rows, taken = port.once(("joint", key, dtype, shape),
                            lambda: (np.zeros((port.group.size, *shape), dtype), set()))
    me = port.group.index
    view = None if me in taken else memory.alloc_in(rows[me])
    if view is None:  # a second ask, or an earlier reservation takes the allocation
        return memory.view(memory.alloc(dtype, shape))
    taken.add(me)
    return view


def staged(port: sim.Port, key: Hashable, like: Sequence[np.ndarray]) -> Cut | None:
    """Zeroed buffers of the shapes of `like` (one dtype), in order, cut from one `joint` flat buffer: the
    bytes of one allocation of them all; None where their dtypes differ."""
    if isinstance(like, Cut):
        bounds = np.concatenate([[0], np.cumsum(like.sizes)])
        return Cut.bounded(joint(port, key, like.flat.dtype, (int(bounds[-1]),)), bounds, like.shapes, like.shape)
    dtypes = {part.dtype for part in like}
    if len(dtypes) != 1:
        return None
    bounds = np.cumsum([0, *(part.size for part in like)])
    return Cut.bounded(joint(port, key, dtypes.pop(), (int(bounds[-1]),)), bounds, [part.shape for part in like])


def units_of(units: object) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """A member's units as (flat buffer, where each unit starts in it, its size), when they are a `Cut` or
    the rows of a C-contiguous array; else None."""
    if isinstance(units, Cut):
        return units.flat, units.at, units.sizes
    if isinstance(units, np.ndarray) and units.ndim and units.flags.c_contiguous and type(units) is np.ndarray:
        per = math.prod(units.shape[1:])
        return units.reshape(-1), np.arange(len(units), dtype=np.int64) * per, np.full(len(units), per, np.int64)
    return None


class Rows:
    """Members' flat buffers lying in one array's memory: member j's element e is `flat[starts[j] + e]`."""

    def __init__(self, flat: np.ndarray, starts: np.ndarray) -> None:
        self.flat, self.starts = flat, starts

    @staticmethod
    def of(flats: Sequence[np.ndarray], writable: bool = True) -> Rows | None:
        """The rows of `flats` (1-D, one dtype, contiguous), or None where they do not share one (with
        `writable`, writable) C-contiguous array's memory at whole elements."""
        first = flats[0]
        dtype, root = first.dtype, _root(first)
        if (type(root) is not np.ndarray or not root.flags.c_contiguous or (writable and not root.flags.writeable)
                or root.dtype.hasobject or dtype.hasobject):
            return None
        if any(f.dtype != dtype or f.ndim != 1 or not f.flags.c_contiguous or _root(f) is not root for f in flats):
            return None
        raw = root.reshape(-1).view(np.uint8)
        flat = raw[:len(raw) // dtype.itemsize * dtype.itemsize].view(dtype)
        offsets = np.array([address_of(f) for f in flats], np.int64) - address_of(raw)
        if np.any(offsets % dtype.itemsize):
            return None
        return Rows(flat, offsets // dtype.itemsize)


def _alike(cuts: list) -> tuple[Rows, np.ndarray, np.ndarray] | None:
    """The rows of members' units (`units_of` each) when all are cut alike; else None."""
    if any(c is None for c in cuts):
        return None
    _, at, sizes = cuts[0]
    if any(not (np.array_equal(c[1], at) and np.array_equal(c[2], sizes)) for c in cuts[1:]):
        return None
    rows = Rows.of([c[0] for c in cuts])
    return None if rows is None else (rows, at, sizes)


def _uniform(sizes: np.ndarray) -> int:
    """The one size of every unit when they are all of one short size (> 0), else 0."""
    return int(sizes[0]) if len(sizes) and 0 < sizes[0] <= _RUN_MAX and np.all(sizes == sizes[0]) else 0


class Decided:
    """What a step table's members make one array of (`UnitRows`, `FoldRows`), decided once every member has
    joined: `get(states, make)` is None until then, then `make(states)`, made once."""

    def __init__(self) -> None:
        self.decided, self.value = False, None

    def get(self, states: Sequence[Any], make: Callable[[Sequence[Any]], Any]) -> Any:
        if not self.decided:
            if any(state is None for state in states):
                return None
            self.decided, self.value = True, make(states)
        return self.value


def hollow(units: Cut | Sequence[np.ndarray]) -> bool:
    """Whether `units` are abstract (`sim.memory.is_hollow`): moves of theirs carry no values, so none is made
    (a copy of a hollow array still walks every element)."""
    first = units.flat if isinstance(units, Cut) else (units[0] if len(units) else None)
    return first is not None and sim.memory.is_hollow(first.dtype)


class UnitRows:
    """Members' units in one array's memory: `states[j]` is member j's (units, order), its unit of position
    k being `units[order[k]]`; every member's units are cut alike (`units_of`) and ordered alike."""

    def __init__(self, rows: Rows, at: np.ndarray, sizes: np.ndarray, order: np.ndarray | None) -> None:
        self.rows, self.order = rows, order
        self.at, self.sizes = (at, sizes) if order is None else (at[order], sizes[order])  # by position
        self.size = _uniform(sizes)
        self.span = np.arange(self.size)

    @staticmethod
    def of(states: Sequence[tuple[object, Sequence[int] | None]]) -> UnitRows | None:
        """The members' units as rows of one array, or None where they are not (see the class)."""
        found = _alike([units_of(units) for units, _ in states])
        if found is None:
            return None
        order = states[0][1]
        if order is not None:
            order = list(order)
            if any(o is None or list(o) != order for _, o in states):
                return None
        return UnitRows(*found, None if order is None else np.asarray(order, np.int64))

    def move(self, receivers: np.ndarray, into: np.ndarray, senders: np.ndarray, out: np.ndarray,
             lanes: tuple[np.ndarray, np.ndarray] | None = None) -> bool:
        """Copy unit of position `out[i]` of member `senders[i]` into that of position `into[i]` of member
        `receivers[i]` (or only elements [lo, hi) of both, `lanes` = (lo, hi)), for each i. The caller knows
        that units `into[i]` and `out[i]` are of one size (a ring pass writes the unit it reads: the same
        position of members cut alike) and that no target overlaps another or a source (a step writes units
        no message in flight reads)."""
        rows, at, sizes = self.rows, self.at, self.sizes
        if lanes is None and self.size:
            put, take = rows.starts[receivers] + at[into], rows.starts[senders] + at[out]
            if self.size == 1:
                rows.flat[put] = rows.flat[take]
            else:
                rows.flat[put[:, None] + self.span] = rows.flat[take[:, None] + self.span]
            return True
        lo, hi = (np.zeros(len(into), np.int64), sizes[into]) if lanes is None else lanes
        put, take = rows.starts[receivers] + at[into] + lo, rows.starts[senders] + at[out] + lo
        _copy(rows.flat, put, take, hi - lo)
        return True


class FoldRows:
    """A reduce-scatter's partial sums and terms as rows: `states[j]` is member j's (terms, partials), each a
    list by ring position cut alike (`units_of`); partial k of member r becomes partial k' of its sender
    combined with its own term k. The terms are read where they lie when they share one array's memory,
    else from one copy of them all taken when every member has joined (a member's terms do not change
    while its part of the call runs)."""

    def __init__(self, partials: Rows, at: np.ndarray, terms: Rows, terms_at: np.ndarray, sizes: np.ndarray,
                 combine: Callable) -> None:
        self.partials, self.at, self.terms, self.terms_at = partials, at, terms, terms_at
        self.sizes, self.combine = sizes, combine
        self.size = _uniform(sizes)
        self.span = np.arange(self.size)

    @staticmethod
    def of(states: Sequence[tuple[object, object]], combine: Callable) -> FoldRows | None:
        """The members' partial sums and terms as rows, or None where the partial sums are not rows of one
        array cut alike, units are long, or the terms are not cut as the partial sums are."""
        found = _alike([units_of(partial) for _, partial in states])
        if found is None:
            return None
        rows, at, sizes = found
        if sizes.sum() > _RUN_MAX * len(sizes):
            return None
        terms = _terms([own for own, _ in states], sizes, rows.flat.dtype)  # type: ignore[misc]
        return None if terms is None else FoldRows(rows, at, terms[0], terms[1], sizes, combine)

    def fold(self, receivers: np.ndarray, into: np.ndarray, senders: np.ndarray, out: np.ndarray) -> bool:
        """Partial `into[i]` of member `receivers[i]` = partial `out[i]` of member `senders[i]` combined with the
        receiver's term `into[i]`, for every i (each partial written once, read only after it was written,
        so none read here is written here). Always True (the caller may fall back on False)."""
        put = self.partials.starts[receivers] + self.at[into]
        take = self.partials.starts[senders] + self.at[out]
        own = self.terms.starts[receivers] + self.terms_at[into]
        flat, terms = self.partials.flat, self.terms.flat
        if self.size > 1:  # every unit of one size: a (messages, size) block of indices
            span = self.span
            put, take, own = put[:, None] + span, take[:, None] + span, own[:, None] + span
        elif not self.size:  # several sizes: the runs one after another
            sizes = self.sizes[into]  # those of `out` too: a ring pass folds one chunk from member to member
            put, take, own = (ragged(v, sizes) for v in (put, take, own))
        if put.size:
            flat[put] = self.combine(flat[take], terms[own])
        return True


def _terms(owns: Sequence[Sequence[np.ndarray]], sizes: np.ndarray, dtype: np.dtype) -> tuple[Rows, np.ndarray] | None:
    """Every member's terms as rows (and where each unit starts in a row): where they lie, or a copy."""
    cuts = [units_of(own) for own in owns]
    if all(c is not None and np.array_equal(c[2], sizes) and np.array_equal(c[1], cuts[0][1]) for c in cuts):
        rows = Rows.of([c[0] for c in cuts], writable=False)  # type: ignore[index]
        if rows is not None and rows.flat.dtype == dtype:
            return rows, cuts[0][1]  # type: ignore[index]
    if any(len(own) != len(sizes) or own[k].dtype != dtype or own[k].size != sizes[k]
           for own in owns for k in range(len(sizes))):
        return None
    copy = np.concatenate([part.reshape(-1) for own in owns for part in own]) if len(sizes) else np.zeros(0, dtype)
    at = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return Rows(copy, np.arange(len(owns), dtype=np.int64) * int(sizes.sum())), at


def _copy(flat: np.ndarray, put: np.ndarray, take: np.ndarray, lengths: np.ndarray) -> None:
    """`flat[put[i]:put[i] + lengths[i]] = flat[take[i]:...]` for every i (runs apart): short runs of one
    length by one fancy-indexed copy, long ones by slices."""
    for length in np.unique(lengths).tolist():
        if length == 0:
            continue
        pick = np.flatnonzero(lengths == length)
        if length <= _RUN_MAX:
            span = np.arange(length)
            flat[put[pick][:, None] + span] = flat[take[pick][:, None] + span]
            continue
        for a, b in zip(take[pick].tolist(), put[pick].tolist()):
            flat[b:b + length] = flat[a:a + length]


def ragged(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices of the runs [starts[i], starts[i] + lengths[i]), one after another.

    >>> ragged(np.array([10, 3]), np.array([2, 3])).tolist()
    [10, 11, 3, 4, 5]
    """
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]) if len(ends) else 0)


def _root(array: np.ndarray) -> np.ndarray:
    """The array that owns `array`'s memory (following views' bases)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array
