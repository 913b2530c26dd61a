"""Members' buffers as rows of one array, so that a step's copies between members are one copy.

A multi-step algorithm moves, at each step, one unit (a block, a chunk, a partial sum) from each member's
memory to another member's. Where every member's buffer is its own allocation those are one numpy copy
per message; where they lie in one array's memory, a step's messages move as one fancy-indexed copy of
that memory. `joint` allocates a call's per-member buffers that way (each still a buffer of its own
member's memory, allocated and charged there as any other), `Cut` is a flat buffer cut into units, and
`Rows` finds the members' flat buffers in their common memory and makes a step's copies and sums.

Worked example (two members, a buffer of 3 floats each, cut [0:1] and [1:3]): `Rows.of([f0, f1], cuts)`
over two rows of one (2, 3) array; `rows.copy(dst=[1], dst_units=[0], src=[0], src_units=[0])` writes
f1[0:1] = f0[0:1], as `f1[0:1] = f0[0:1]` one message at a time would.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import numpy as np

import sim

__all__ = ["JOINT_MAX_BYTES", "Cut", "FoldRows", "Rows", "UnitRows", "cut", "joint", "staged", "units_of"]

JOINT_MAX_BYTES = 64 << 20  # past this the messages carry enough bytes that one copy each costs little more
_RUN_MAX = 256  # longest unit moved by fancy indexing (an index per element); longer ones are sliced


class Cut(Sequence):
    """A flat buffer cut into units: `self[k]` is `flat[bounds[k]:bounds[k + 1]]` (reshaped to `shapes[k]`
    where given), made when read, so that cutting costs nothing per unit."""

    def __init__(self, flat: np.ndarray, bounds: Sequence[int] | np.ndarray,
                 shapes: Sequence[tuple[int, ...]] | None = None) -> None:
        self.flat, self.bounds, self.shapes = flat, np.asarray(bounds, np.int64), shapes
        self._edges = self.bounds.tolist()

    def __len__(self) -> int:
        return len(self._edges) - 1

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        k = range(len(self))[k]
        view = self.flat[self._edges[k]:self._edges[k + 1]]
        return view if self.shapes is None else view.reshape(self.shapes[k])

    def nbytes(self) -> np.ndarray:
        """Each unit's bytes."""
        return np.diff(self.bounds) * self.flat.dtype.itemsize


def cut(flat: np.ndarray, n: int) -> Cut:
    """`numpy.array_split(flat, n)` of a 1-D array as a `Cut` (the same views).

    >>> [part.tolist() for part in cut(np.arange(5), 3)]
    [[0, 1], [2, 3], [4]]
    """
    q, r = divmod(len(flat), n)
    return Cut(flat, np.minimum(np.arange(n + 1), r) + np.arange(n + 1) * q)


def joint(port: sim.Port, key: Hashable, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A zeroed row-major buffer of `dtype` and `shape` in the caller's memory (allocated and charged there),
    which every member of the call that asks under `key` gets as one row of one shared array. Beyond
    `JOINT_MAX_BYTES` in all, or when an earlier reservation of the memory takes the allocation, the buffer
    is an allocation like any other."""
    memory, dtype, shape = port.memory, np.dtype(dtype), tuple(shape)
    size_bytes = math.prod(shape) * dtype.itemsize
    if not size_bytes or port.group.size * size_bytes > JOINT_MAX_BYTES:
        return memory.view(memory.alloc(dtype, shape))
    rows = port.once(("joint", key), lambda: np.zeros((port.group.size, *shape), dtype))
    region = rows[port.group.index]
    memory.reserve(region)
    view = memory.view(memory.alloc(dtype, shape))
    if _address(view) != _address(region):  # an earlier reservation of this shape was taken instead
        for other in memory.release():
            if other is not region:
                memory.reserve(other)
    return view


def staged(port: sim.Port, key: Hashable, like: Sequence[np.ndarray]) -> Cut | None:
    """Zeroed buffers of the shapes of `like` (one dtype) cut from one `joint` flat buffer, in order: the
    bytes of one allocation of them all; None where their dtypes differ."""
    if isinstance(like, Cut):
        bounds = like.bounds - like.bounds[0]
        return Cut(joint(port, key, like.flat.dtype, (int(bounds[-1]),)), bounds, like.shapes)
    dtypes = {part.dtype for part in like}
    if len(dtypes) != 1:
        return None
    bounds = np.cumsum([0, *(part.size for part in like)]).tolist()
    return Cut(joint(port, key, dtypes.pop(), (bounds[-1],)), bounds, [part.shape for part in like])


def units_of(units: object) -> tuple[np.ndarray, np.ndarray] | None:
    """A member's units as (flat buffer, element bounds of each unit), when they are a `Cut` or the rows of
    a C-contiguous array; else None."""
    if isinstance(units, Cut):
        return units.flat[units.bounds[0]:], units.bounds - units.bounds[0]
    if isinstance(units, np.ndarray) and units.ndim and units.flags.c_contiguous and type(units) is np.ndarray:
        per = math.prod(units.shape[1:])
        return units.reshape(-1), np.arange(len(units) + 1, dtype=np.int64) * per
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
        offsets = np.array([_address(f) for f in flats], np.int64) - _address(raw)
        if np.any(offsets % dtype.itemsize):
            return None
        return Rows(flat, offsets // dtype.itemsize)

    def copy(self, dst: np.ndarray, dst_at: np.ndarray, src: np.ndarray, src_at: np.ndarray,
             lengths: np.ndarray) -> bool:
        """Copy `lengths[i]` elements from element `src_at[i]` of member `src[i]` to element `dst_at[i]` of
        member `dst[i]`, for every i, as one copy after another would; False (nothing done) where a
        target overlaps another or a source, whose order would then matter."""
        at, into = self.starts[src] + src_at, self.starts[dst] + dst_at
        if not _apart(into, at, lengths):
            return False
        flat = self.flat
        for run, src_idx, dst_idx in _runs(at, into, lengths):
            flat[dst_idx] = flat[src_idx] if run else flat[src_idx[0]:src_idx[1]]
        return True

    def fold(self, combine: Callable, dst: np.ndarray, dst_at: np.ndarray, src: np.ndarray, src_at: np.ndarray,
             terms: np.ndarray, terms_at: np.ndarray, lengths: np.ndarray) -> bool:
        """`dst elements = combine(src elements, terms elements)` for each i (`terms`: a flat array,
        `terms_at` where each run starts in it); False (nothing done) where targets overlap sources."""
        at, into = self.starts[src] + src_at, self.starts[dst] + dst_at
        if not _apart(into, at, lengths):
            return False
        flat = self.flat
        for length in np.unique(lengths).tolist():
            if length == 0:
                continue
            pick = lengths == length
            span = np.arange(length)
            take, put, own = (v[pick][:, None] + span for v in (at, into, terms_at))
            flat[put] = combine(flat[take], terms[own])
        return True


class UnitRows:
    """Members' units in one array's memory: `states[j]` is member j's (units, order), its unit of
    position k being `units[order[k]]`; every member's units are cut alike (`units_of`) and ordered alike."""

    def __init__(self, rows: Rows, bounds: np.ndarray, order: np.ndarray) -> None:
        self.rows, self.bounds, self.order = rows, bounds, order
        sizes = np.diff(bounds)
        self.size = int(sizes[0]) if len(sizes) and np.all(sizes == sizes[0]) and 0 < sizes[0] <= _RUN_MAX else 0
        self.span = np.arange(self.size)

    @staticmethod
    def of(states: Sequence[tuple[object, Sequence[int]]]) -> UnitRows | None:
        """The members' units as rows of one array, or None where they are not (see the class)."""
        cuts = [units_of(units) for units, _ in states]
        if any(c is None for c in cuts):
            return None
        bounds, order = cuts[0][1], list(states[0][1])  # type: ignore[index]
        if any(not np.array_equal(c[1], bounds) for c in cuts) or any(list(o) != order for _, o in states):  # type: ignore[index]
            return None
        rows = Rows.of([c[0] for c in cuts])  # type: ignore[index]
        return None if rows is None else UnitRows(rows, bounds, np.asarray(order, np.int64))

    def move(self, receivers: np.ndarray, into: np.ndarray, senders: np.ndarray, out: np.ndarray,
             apart: bool = False) -> bool:
        """Copy unit of position `out[i]` of member `senders[i]` into that of position `into[i]` of member
        `receivers[i]`, for each i in order; False (nothing done) where that cannot be one copy.

        With `apart`, the caller knows no target overlaps another or a source (a ring's step writes units
        that no message in flight reads), and units of one short size move without a check."""
        a, b = self.order[into], self.order[out]
        if apart and self.size:
            rows, size = self.rows, self.size
            put, take = rows.starts[receivers] + a * size, rows.starts[senders] + b * size
            if size == 1:
                rows.flat[put] = rows.flat[take]
            else:
                span = self.span
                rows.flat[put[:, None] + span] = rows.flat[take[:, None] + span]
            return True
        bounds = self.bounds
        lengths = bounds[b + 1] - bounds[b]
        if not np.array_equal(lengths, bounds[a + 1] - bounds[a]):
            return False
        return self.rows.copy(receivers, bounds[a], senders, bounds[b], lengths)


class FoldRows:
    """A reduce-scatter's partial sums and terms as rows: `states[j]` is member j's (terms, partials), each a
    list by ring position cut alike (`units_of`); partial k of member r becomes partial k' of its sender
    plus its own term k. The terms are read where they lie when they share one array's memory, else from
    one copy of them all taken when every member has joined (a member's terms do not change while its
    part of the call runs)."""

    def __init__(self, partials: Rows, terms: Rows, bounds: np.ndarray, combine: Callable) -> None:
        self.partials, self.terms, self.bounds, self.combine = partials, terms, bounds, combine
        sizes = np.diff(bounds)
        self.size = int(sizes[0]) if len(sizes) and np.all(sizes == sizes[0]) and 0 < sizes[0] <= _RUN_MAX else 0

    @staticmethod
    def of(states: Sequence[tuple[object, object]], combine: Callable) -> FoldRows | None:
        """The members' partial sums and terms as rows, or None where the partial sums are not rows of one
        array cut alike, or a term is not cut as they are."""
        partials = [units_of(partial) for _, partial in states]
        if any(p is None for p in partials):
            return None
        bounds = partials[0][1]  # type: ignore[index]
        if any(not np.array_equal(p[1], bounds) for p in partials) or bounds[-1] > _RUN_MAX * len(bounds):  # type: ignore[index]
            return None
        rows = Rows.of([p[0] for p in partials])  # type: ignore[index]
        if rows is None or any(len(own) != len(bounds) - 1 for own, _ in states):  # type: ignore[arg-type]
            return None
        terms = _terms([own for own, _ in states], bounds, rows.flat.dtype)  # type: ignore[misc]
        return None if terms is None else FoldRows(rows, terms, bounds, combine)

    def fold(self, receivers: np.ndarray, into: np.ndarray, senders: np.ndarray, out: np.ndarray) -> bool:
        """Partial `into[i]` of member `receivers[i]` = partial `out[i]` of member `senders[i]` combined with the
        receiver's term `into[i]`, for every i (each partial written once, read only after it was written,
        so none read here is written here); False (nothing done) where the units differ in size."""
        bounds = self.bounds
        lengths = bounds[into + 1] - bounds[into]
        if not np.array_equal(lengths, bounds[out + 1] - bounds[out]):
            return False
        put = self.partials.starts[receivers] + bounds[into]
        take = self.partials.starts[senders] + bounds[out]
        own = self.terms.starts[receivers] + bounds[into]
        flat, terms = self.partials.flat, self.terms.flat
        for length in [self.size] if self.size else np.unique(lengths).tolist():
            if length == 0:
                continue
            pick = slice(None) if self.size else lengths == length
            span = np.arange(length)
            flat[put[pick][:, None] + span] = self.combine(flat[take[pick][:, None] + span],
                                                           terms[own[pick][:, None] + span])
        return True


def _terms(owns: Sequence[Sequence[np.ndarray]], bounds: np.ndarray, dtype: np.dtype) -> Rows | None:
    """Every member's terms as rows cut at `bounds`: where they lie, or a copy of them all."""
    sizes = np.diff(bounds)
    if any(own[k].dtype != dtype for own in owns for k in (0, -1)):
        return None
    cuts = [units_of(own) for own in owns]
    if all(c is not None and np.array_equal(c[1], bounds) for c in cuts):
        rows = Rows.of([c[0] for c in cuts], writable=False)  # type: ignore[index]
        if rows is not None:
            return rows
    if any(own[k].size != sizes[k] for own in owns for k in range(len(sizes))):
        return None
    copy = np.concatenate([part.reshape(-1) for own in owns for part in own]) if len(sizes) else np.zeros(0, dtype)
    return Rows(copy, np.arange(len(owns), dtype=np.int64) * int(bounds[-1]))


def _runs(at: np.ndarray, into: np.ndarray, lengths: np.ndarray):
    """(fancy?, source index, target index) per group of equal short lengths, or per long run."""
    for length in np.unique(lengths).tolist():
        if length == 0:
            continue
        pick = np.flatnonzero(lengths == length)
        if length <= _RUN_MAX:
            span = np.arange(length)
            yield True, at[pick][:, None] + span, into[pick][:, None] + span
            continue
        for a, b in zip(at[pick].tolist(), into[pick].tolist()):
            yield False, (a, a + length), slice(b, b + length)


def _apart(into: np.ndarray, at: np.ndarray, lengths: np.ndarray) -> bool:
    """Whether the runs [into, into + length) are pairwise apart and apart from every [at, at + length)."""
    keep = lengths > 0
    into, at, lengths = into[keep], at[keep], lengths[keep]
    if len(into) == 0:
        return True
    starts = np.concatenate([into, at])
    ends = starts + np.concatenate([lengths, lengths])
    is_target = np.concatenate([np.ones(len(into), bool), np.zeros(len(at), bool)])
    order = np.argsort(starts, kind="stable")
    starts, ends, is_target = starts[order], ends[order], is_target[order]
    reach = np.maximum.accumulate(ends)[:-1]  # the furthest end of any run starting earlier
    overlapping = starts[1:] < reach
    if not overlapping.any():
        return True
    # sources may overlap sources; any overlap that involves a target is refused
    prior_target_reach = np.maximum.accumulate(np.where(is_target, ends, starts))[:-1]
    return not np.any((starts[1:] < prior_target_reach) | (overlapping & is_target[1:]))


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _root(array: np.ndarray) -> np.ndarray:
    """The array that owns `array`'s memory (following views' bases)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array
