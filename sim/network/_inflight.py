"""`Flows`: the flows a `sim.network._flows.LinkState` has in flight, as columns; `posted_columns`: the
messages posted in one instant, as columns."""

from __future__ import annotations

import numpy as np


class Flows:
    """The flows in flight, as columns, and the intervals of links their routes cross.

    While every flow crosses one link (a fully connected network, a store-and-forward hop) and none is part
    of a split message, only `start` is kept: flow i crosses link `start[i]`; `flow_of`, `stop` and `whole`
    are made when a flow that needs them is added. Ids are stored as narrow as they fit, so a flow in
    flight costs about 56 bytes."""

    FLOATS = ("left", "t0", "rate", "finish", "latency")

    def __init__(self) -> None:
        self.sink = np.zeros(0, np.int64)
        self.slot = np.zeros(0, np.int32)
        for name in self.FLOATS:
            setattr(self, name, np.zeros(0))
        self.start = np.zeros(0, np.int32)
        self._flow_of: np.ndarray | None = None  # None: flow i is interval i
        self._stop: np.ndarray | None = None  # None: every interval is one link
        self._whole: np.ndarray | None = None  # the `Parts` key of a message split over several flows, else -1

    def __len__(self) -> int:
        return len(self.sink)

    @property
    def simple(self) -> bool:
        """Whether flow i crosses exactly link `start[i]`."""
        return self._flow_of is None and self._stop is None

    @property
    def flow_of(self) -> np.ndarray:
        return np.arange(len(self.start), dtype=np.int64) if self._flow_of is None else self._flow_of

    @property
    def stop(self) -> np.ndarray:
        return self.start + 1 if self._stop is None else self._stop

    @property
    def whole(self) -> np.ndarray:
        return np.full(len(self), -1, np.int64) if self._whole is None else self._whole

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the flows where `mask` is True."""
        if self._flow_of is not None:
            renumber = np.cumsum(mask) - 1
            on = mask[self._flow_of]
            self._flow_of, self.start = renumber[self._flow_of[on]], self.start[on]
            if self._stop is not None:
                self._stop = self._stop[on]
        else:
            self.start = self.start[mask]
            if self._stop is not None:
                self._stop = self._stop[mask]
        if self._whole is not None:
            self._whole = self._whole[mask]
        for name in ("sink", "slot", *self.FLOATS):
            setattr(self, name, getattr(self, name)[mask])

    def extend(self, columns: dict[str, np.ndarray], flow_of: np.ndarray | None, start: np.ndarray,
               stop: np.ndarray | None, whole: np.ndarray | None) -> None:
        """Append flows (`columns` by name) crossing the intervals [start, stop) of flow `flow_of` (numbered
        from 0 among the new flows; None: interval i is flow i's; `stop` None: one link each), `whole`
        keying split messages' parts (None: none is split)."""
        first = len(self)
        if flow_of is not None and bool(np.array_equal(flow_of, np.arange(len(flow_of)))):
            flow_of = None  # each new flow is its own one interval
        if stop is not None and bool(np.all(stop - start == 1)):
            stop = None
        if flow_of is not None and self._flow_of is None:
            self._flow_of = np.arange(len(self.start), dtype=np.int64)
        if stop is not None and self._stop is None:
            self._stop = self.start.astype(np.int64) + 1
        if self._flow_of is not None:
            new_of = np.arange(len(start), dtype=np.int64) if flow_of is None else flow_of
            self._flow_of = np.concatenate([self._flow_of, new_of + first])
        if self._stop is not None:
            self._stop = np.concatenate([self._stop, start + 1 if stop is None else stop])
        if whole is not None and bool(np.any(whole >= 0)) and self._whole is None:
            self._whole = np.full(first, -1, np.int64)
        if self._whole is not None:
            self._whole = np.concatenate([self._whole, np.full(len(columns["sink"]), -1, np.int64)
                                          if whole is None else whole])
        self.start = _joined(self.start, start, _narrow(start))
        self.sink = _joined(self.sink, columns["sink"], np.int64)
        self.slot = _joined(self.slot, columns["slot"], np.int32)
        for name in self.FLOATS:
            setattr(self, name, _joined(getattr(self, name), columns[name], np.float64))


def _narrow(links: np.ndarray) -> type:
    """int32 for link indices that fit it, else int64."""
    return np.int32 if not len(links) or int(links.max()) < np.iinfo(np.int32).max else np.int64


def _joined(old: np.ndarray, new: np.ndarray, dtype: type) -> np.ndarray:
    if not len(old):
        return np.asarray(new, dtype)
    return np.concatenate([old, np.asarray(new, np.result_type(old.dtype, dtype))])


_ROW_MESSAGES = 64  # posts of at least this many messages on average are split row by row


def posted_columns(posted: list[tuple], placement: np.ndarray | None,
                   tabled: bool = False) -> tuple[tuple, tuple]:
    """The messages of `posted` rows `(src, dsts, sizes, sink id)` (one size per message or one for the row;
    one sender for the row or, when `tabled`, possibly one per message) as columns (topology src, dst, size,
    sink, slot) of those that become flows, and (src, dst, sink, slot) of those that arrive at once (to
    oneself, or empty), both in posting order."""
    if not tabled and sum(len(p[1]) for p in posted) >= _ROW_MESSAGES * len(posted):
        return _by_rows(posted, placement)
    counts = np.array([len(dsts) for _, dsts, _, _ in posted], np.int64)
    if tabled:
        src = np.concatenate([np.broadcast_to(np.asarray(p[0], np.int64), (len(p[1]),)) for p in posted])
    else:
        src = np.repeat(np.array([p[0] for p in posted], np.int64), counts)
    dst = np.concatenate([np.asarray(p[1], np.int64) for p in posted])
    size = np.concatenate([np.broadcast_to(np.asarray(p[2], np.float64), len(p[1])) for p in posted])
    sink = np.repeat(np.array([p[3] for p in posted], np.int64), counts)
    slot = np.arange(len(dst), dtype=np.int64)
    slot -= np.repeat(np.cumsum(counts) - counts, counts)
    if placement is not None:
        src, dst = placement[src], placement[dst]
    instant = (src == dst) | (size == 0)
    if not instant.any():
        return (src, dst, size, sink, slot), (np.zeros(0, np.int64),) * 4
    now = tuple(column[instant] for column in (src, dst, sink, slot))
    keep = ~instant
    return tuple(column[keep] for column in (src, dst, size, sink, slot)), now


def _by_rows(posted: list[tuple], placement: np.ndarray | None) -> tuple[tuple, tuple]:
    """`posted_columns` of long rows: each row's instant messages found in the row, so no mask or gather
    runs over all messages at once."""
    kept, now = [], []
    for src, dsts, sizes, sink in posted:
        dsts, sizes = np.asarray(dsts, np.int64), np.asarray(sizes, np.float64)
        if placement is not None:
            src, dsts = int(placement[src]), placement[dsts]
        instant = (dsts == src) | (sizes == 0)
        if instant.any():
            slots, keep = np.flatnonzero(instant), np.flatnonzero(~instant)
            now.append((src, dsts[slots], sink, slots))
            kept.append((src, dsts[keep], sizes if sizes.ndim == 0 else sizes[keep], sink, keep))
        else:
            kept.append((src, dsts, sizes, sink, None))
    return _joined_rows(kept), _instant(now)


def _instant(now: list[tuple]) -> tuple:
    if not now:
        return (np.zeros(0, np.int64),) * 4
    src, dst, _, sink, slot = _joined_rows([(s, d, 0.0, k, slots) for s, d, k, slots in now])
    return src, dst, sink, slot


def _joined_rows(rows: list[tuple]) -> tuple:
    """Columns (src, dst, size, sink, slot) of rows (src, dsts, sizes, sink, slots or None for all)."""
    if not rows:
        return (np.zeros(0, np.int64),) * 2 + (np.zeros(0),) + (np.zeros(0, np.int64),) * 2
    counts = np.array([len(row[1]) for row in rows], np.int64)
    src = np.repeat(np.array([row[0] for row in rows], np.int64), counts)
    dst = np.concatenate([row[1] for row in rows])
    size = np.concatenate([np.broadcast_to(row[2], len(row[1])) for row in rows]).astype(np.float64, copy=False)
    sink = np.repeat(np.array([row[3] for row in rows], np.int64), counts)
    slot = np.concatenate([np.arange(len(row[1]), dtype=np.int64) if row[4] is None else row[4] for row in rows])
    return src, dst, size, sink, slot
