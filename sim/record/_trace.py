"""`Trace`: the record of every message a run exchanged, kept as columns.

Records arrive as plain tuples and are packed, a few thousand at a time, into numpy columns (device ids,
sizes, times, call numbers) beside object columns (collective name, detail, kind). A message's arrival is
known only when the network has carried it, so arrival times live in one growing array, filled in as
messages arrive. Routes are not stored per message: routing is a function of the sender and the receiver
(`sim.Mesh.route`), asked once per pair when records are made. `MessageRecord` objects are made only when
someone iterates, so a run of a million messages stores a few dozen bytes per message plus its detail.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

FIELDS = ("src", "dst", "size_bytes", "send_time_s", "start_time_s", "arrival_time_s", "collective", "call",
          "detail", "kind")
_NUMERIC = {"src": np.int64, "dst": np.int64, "size_bytes": np.int64, "send_time_s": np.float64,
            "start_time_s": np.float64, "arrival_time_s": np.float64, "call": np.int64}
_STORED = tuple(name for name in FIELDS if name != "arrival_time_s")  # the fields kept in chunks
_STAGE_ROWS = 8192


@dataclass(frozen=True)
class MessageRecord:
    """One message: who sent how many bytes to whom, when, for which collective call and slice.

    `send_time_s` is when the sender posted it, `start_time_s` when its first link began to carry it,
    `arrival_time_s` when the receiver had all of it. `detail` says which slice it carried and where the
    receiver wrote it (e.g. `{'slice': 1, 'rows': (0, 2)}`). `kind` is "message" for a message and names
    the step for a local copy ("pack", "unpack", "relayout"), which has `src == dst`. `route` is the links
    (hashable ids, see `sim.Mesh.route`) the message crossed, in order; empty for a device's message to
    itself and for a copy.
    """

    src: int
    dst: int
    size_bytes: int
    send_time_s: float
    start_time_s: float
    arrival_time_s: float
    collective: str
    call: int
    detail: dict = field(default_factory=dict)
    kind: str = "message"
    route: tuple = ()

    def to_dict(self) -> dict:
        """Plain JSON-ready fields."""
        record = asdict(self)
        record["detail"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.detail.items()}
        record["route"] = [list(link) for link in self.route]
        return record


@dataclass(frozen=True)
class CopyRecord(MessageRecord):
    """A local copy on one device (`src == dst`), shaped like a message so every trace reader times it.

    `kind` is "pack" (gathering a strided slice into a payload), "unpack" (scattering a payload into a
    strided region), or "relayout" (an array copied into another layout). `send_time_s == start_time_s`
    is when the copy began and `arrival_time_s` when it ended. `Trace.total_bytes`, which counts network
    bytes, leaves copies out.
    """

    kind: str = "pack"


@dataclass(frozen=True)
class CallRecord:
    """One device's part in one collective call, as the engine ran it.

    `enter_s` is when the device reached the call, `met_s` when the last member of its group did (the
    call's messages start no earlier), and `exit_s` when the device's part ended (its last message sent
    had arrived and it had what it receives). `enter_s <= met_s <= exit_s`. `call` numbers the calls
    over the same group, as in `MessageRecord.call`; `members` are the group's device ids. `algorithm` is
    the message pattern the call ran ('auto' resolved to its pick), None for a call without one.
    """

    device: int
    collective: str
    call: int
    members: tuple[int, ...]
    enter_s: float
    met_s: float
    exit_s: float
    algorithm: str | None = None


class Trace:
    """The messages of one run, in the order they were sent.

    `route(src, dst)` (e.g. `sim.Mesh.route`) gives each message's route; without it routes are empty.
    `trace[k]` is message k, made alone; `column`, `detail_column` and `detail_keys` read a field of every
    message without making a `MessageRecord` of any, so a reader of a million messages need not make them all.
    """

    def __init__(self, route: Callable[[int, int], tuple] | None = None) -> None:
        self._chunks: list[dict[str, np.ndarray]] = []
        self._starts: list[int] = []  # the index of each chunk's first record
        self._rows: list[tuple] = []
        self._records: list[MessageRecord] | None = None
        self._made: dict[int, MessageRecord] = {}  # records made one by one by `trace[k]`
        self._count = 0
        self._arrivals = np.zeros(1024)
        self._route = route
        self._routes: dict[tuple[int, int], tuple] = {}

    def __iter__(self) -> Iterator[MessageRecord]:
        return iter(self.messages)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> MessageRecord:
        """Message `index` (negative counts from the end), made on its own unless all have been made."""
        if self._records is not None:
            return self._records[index]
        if not -self._count <= index < self._count:
            raise IndexError(f"trace index {index} out of range for {self._count} messages")
        index %= self._count
        made = self._made.get(index)
        if made is None:
            made = self._made[index] = self._make(index)
        return made

    def _make(self, index: int) -> MessageRecord:
        """Record `index`, from its chunk's columns."""
        self._pack()
        at = bisect.bisect_right(self._starts, index) - 1
        chunk, k = self._chunks[at], index - self._starts[at]
        row = [_item(chunk[name], k) for name in _STORED]
        row.insert(FIELDS.index("arrival_time_s"), float(self._arrivals[index]))
        return _record(tuple(row), self._route_of(row[0], row[1], row[-1]))

    def column(self, name: str) -> np.ndarray:
        """One field of every record, in record order (`detail` as dicts: `detail_column` reads one key)."""
        if name == "arrival_time_s":
            return self._arrivals[:self._count].copy()
        self._pack()
        if not self._chunks:
            return np.zeros(0, _NUMERIC.get(name, object))
        return np.concatenate([_array(chunk[name]) for chunk in self._chunks])

    def detail_column(self, key: str) -> list:
        """Every record's `detail[key]`, None where its detail lacks `key`, without making the details."""
        self._pack()
        values: list = []
        for chunk in self._chunks:
            detail = chunk["detail"]
            if isinstance(detail, _Details):
                values += detail.values(key)
            else:
                values += [d.get(key) for d in detail]
        return values

    def detail_keys(self, kind: str | None = None) -> set[str]:
        """The keys any record's detail has (of records of `kind` only, when given)."""
        self._pack()
        keys: set[str] = set()
        for chunk in self._chunks:
            detail = chunk["detail"]
            if isinstance(detail, _Details):
                if detail.count and (kind is None or kind in _kinds(chunk["kind"])):
                    keys.update(detail.columns)
            else:
                kinds = chunk["kind"]
                keys.update(k for d, of in zip(detail, kinds) if kind is None or of == kind for k in d)
        return keys

    def append(self, src: int, dst: int, size_bytes: int, send_time_s: float, start_time_s: float,
               arrival_time_s: float, collective: str, call: int, detail: dict, kind: str = "message") -> int:
        """Record one message (or local copy, by `kind`) from its fields; returns its index (for
        `set_arrivals`, when the arrival is not known yet)."""
        self._rows.append((src, dst, size_bytes, send_time_s, start_time_s, collective, call, detail, kind))
        index = self._grow(1)
        self._arrivals[index] = arrival_time_s
        if len(self._rows) >= _STAGE_ROWS:
            self._pack()
        return index

    def append_batch(self, src: int, dsts: Sequence[int], sizes: Sequence[int] | int, send_time_s: float,
                     starts_s: Sequence[float] | float, arrivals_s: list[float] | None, collective: str, call: int,
                     details: dict[str, Any]) -> int:
        """Record messages from `src` to each of `dsts`, posted together; returns the first one's index
        (`arrivals_s` may be None, and the arrivals set later).

        `sizes` and `starts_s` are one value per message or one for all; `details` maps each detail key to
        its per-message values (a list or a range) or to `Same(value)`, one value for all. Values shared by
        the batch are kept once, so a recorded message costs a few bytes (its arrival time) plus what
        differs between messages; a message's detail is made only when it is read."""
        self._pack()
        count = len(dsts)
        self._starts.append(self._count)
        self._chunks.append({
            "src": _Same(src, count, np.int64), "dst": _Seq(dsts),
            "size_bytes": _column(sizes, count, np.int64), "send_time_s": _Same(send_time_s, count, np.float64),
            "start_time_s": _column(starts_s, count, np.float64),
            "collective": _Same(collective, count), "call": _Same(call, count, np.int64),
            "detail": _Details(details, count), "kind": _Same("message", count)})
        first = self._grow(count)
        if arrivals_s is not None:
            self._arrivals[first:first + count] = arrivals_s
        return first

    def arrivals(self, indices: np.ndarray) -> np.ndarray:
        """The arrival times of the records at `indices` (zero where not known yet)."""
        return self._arrivals[indices]

    def set_arrivals(self, indices: np.ndarray | int, arrivals_s: np.ndarray | float) -> None:
        """Set the arrival times of the records at `indices` (as `append` and `append_batch` numbered them)."""
        self._arrivals[indices] = arrivals_s
        self._forget()

    def _grow(self, count: int) -> int:
        """Room for `count` more records; the index of the first."""
        first = self._count
        self._count += count
        if self._count > len(self._arrivals):
            grown = np.zeros(max(2 * len(self._arrivals), self._count))
            grown[:first] = self._arrivals[:first]
            self._arrivals = grown
        self._forget()
        return first

    def _forget(self) -> None:
        """Drop the records made so far (a record changed or was added); cheap when none were made, as
        while a run records its messages."""
        self._records = None
        if self._made:
            self._made = {}

    def add(self, record: MessageRecord) -> None:
        """Record a `MessageRecord` (or `CopyRecord`)."""
        self.append(*(getattr(record, name) for name in FIELDS))

    @property
    def messages(self) -> list[MessageRecord]:
        """Every record as a `MessageRecord` (a `CopyRecord` for local copies), made on demand."""
        if self._records is None:
            self._records = [_record(row, self._route_of(row[0], row[1], row[-1])) for row in self._iter_rows()]
        return self._records

    def _route_of(self, src: int, dst: int, kind: str) -> tuple:
        """A message's route, asked once per (src, dst)."""
        if self._route is None or src == dst or kind != "message":
            return ()
        route = self._routes.get((src, dst))
        if route is None:
            route = self._routes[(src, dst)] = tuple(self._route(src, dst))
        return route

    def columns(self) -> dict[str, np.ndarray]:
        """Every field as one array (numeric fields as numbers, the rest as objects), in record order."""
        self._pack()
        if not self._chunks:
            return {name: np.zeros(0, _NUMERIC.get(name, object)) for name in FIELDS}
        columns = {name: np.concatenate([_array(chunk[name]) for chunk in self._chunks]) for name in _STORED}
        columns["arrival_time_s"] = self._arrivals[:self._count].copy()
        return {name: columns[name] for name in FIELDS}

    def select(self, collective: str | None = None, dst: int | None = None) -> list[MessageRecord]:
        """The messages of one collective and/or to one receiver."""
        return [
            m for m in self.messages
            if (collective is None or m.collective == collective) and (dst is None or m.dst == dst)
        ]

    @property
    def sent(self) -> list[MessageRecord]:
        """The messages alone, without local copy steps."""
        return [m for m in self.messages if m.kind == "message"]

    @property
    def total_bytes(self) -> int:
        """Bytes that crossed the network (messages a device sends itself are not counted)."""
        return int(self.column("size_bytes")[self.column("src") != self.column("dst")].sum())

    def to_json(self) -> list[dict]:
        return [m.to_dict() for m in self.messages]

    def _pack(self) -> None:
        """Move the staged rows into a chunk of columns: numbers as arrays, a value all rows share once,
        details as one column per key when every row's detail has the same keys."""
        if not self._rows:
            return
        values = list(zip(*self._rows))
        chunk: dict[str, Any] = {}
        for name, column in zip(_STORED, values):
            if name in _NUMERIC:
                chunk[name] = np.array(column, _NUMERIC[name])
            elif name == "detail":
                chunk[name] = _packed_details(column)
            elif column.count(column[0]) == len(column):
                chunk[name] = _Same(column[0], len(column))
            else:
                chunk[name] = np.empty(len(column), object)
                chunk[name][:] = column
        self._starts.append(self._count - len(self._rows))
        self._chunks.append(chunk)
        self._rows = []

    def _iter_rows(self) -> Iterator[tuple]:
        """Every record's fields, in `FIELDS` order."""
        self._pack()
        arrivals = iter(self._arrivals[:self._count].tolist())
        at = FIELDS.index("arrival_time_s")
        for chunk in self._chunks:
            columns = [_array(chunk[name]).tolist() for name in _STORED]
            for row in zip(*columns):
                yield row[:at] + (next(arrivals),) + row[at:]


@dataclass(frozen=True)
class Same:
    """One detail value shared by every message of a batch (`Trace.append_batch`), kept once."""

    value: Any


class _Same:
    """A chunk's column holding one value for all of its `count` records."""

    __slots__ = ("count", "dtype", "value")

    def __init__(self, value: Any, count: int, dtype: type | None = None) -> None:
        self.value = value if dtype is None else dtype(value).item()  # read back as the array's item would be
        self.count, self.dtype = count, dtype

    def array(self) -> np.ndarray:
        if self.dtype is not None:
            return np.full(self.count, self.value, self.dtype)
        return _constant(self.value, self.count)

    def item(self, k: int) -> Any:
        return self.value


class _Seq:
    """A chunk's column of device ids kept as the sequence it was given (a group's members, shared)."""

    __slots__ = ("values",)

    def __init__(self, values: Sequence[int]) -> None:
        self.values = values

    def array(self) -> np.ndarray:
        return np.asarray(self.values, np.int64)

    def item(self, k: int) -> int:
        return int(self.values[k])


def _column(values: Sequence | float | int, count: int, dtype: type) -> np.ndarray | _Same:
    if isinstance(values, (int, float, np.integer, np.floating)):
        return _Same(values, count, dtype)
    return np.array(values, dtype)


class _Details:
    """A batch's detail column, kept as one sequence (or one `Same` value) per key until someone reads it."""

    def __init__(self, columns: dict[str, Any], count: int) -> None:
        self.columns, self.count = columns, count

    def __len__(self) -> int:
        return self.count

    def values(self, key: str) -> list:
        """Every record's value of `key` (None for all when no record has it)."""
        column = self.columns.get(key)
        if column is None:
            return [None] * self.count
        if isinstance(column, Same):
            return [column.value] * self.count
        if isinstance(column, np.ndarray):
            return column.tolist() if column.ndim == 1 else [tuple(row) for row in column.tolist()]
        return list(column)

    def item(self, k: int) -> dict:
        return {key: _value(column, k) for key, column in self.columns.items()}

    def dicts(self) -> np.ndarray:
        keys = list(self.columns)
        rows = zip(*(self.values(key) for key in keys)) if keys else ((),) * self.count
        values = np.empty(self.count, object)
        values[:] = [dict(zip(keys, row)) for row in rows]
        return values


def _value(column: Any, k: int) -> Any:
    """Record k's value in one key's detail column."""
    if isinstance(column, Same):
        return column.value
    if isinstance(column, np.ndarray):
        return column[k].item() if column.ndim == 1 else tuple(column[k].tolist())
    return column[k]


_SHARED = (int, str, type(None))  # values a column may keep once when all are equal (not floats: -0.0 == 0.0)


def _packed_details(details: tuple[dict, ...]) -> Any:
    """Staged rows' details as one column per key (each as compact as its values allow) when every
    detail has the same keys in the same order; else one dict per row."""
    keys = tuple(details[0])
    if any(len(d) != len(keys) or tuple(d) != keys for d in details):
        column = np.empty(len(details), object)
        column[:] = details
        return column
    return _Details({key: _compact([d[key] for d in details]) for key in keys}, len(details))


def _compact(values: list) -> Any:
    """One key's values: `Same` when all are one plain value, an array when all are ints (or floats, or
    tuples of as many ints), else the list."""
    first = values[0]
    kind = type(first)
    if kind in _SHARED and values.count(first) == len(values) and all(type(v) is kind for v in values):
        return Same(first)
    if kind in (int, float) and all(type(v) is kind for v in values):
        with contextlib.suppress(OverflowError):
            return np.array(values, np.int64 if kind is int else np.float64)
    if kind is tuple and all(type(v) is tuple and len(v) == len(first) and all(type(e) is int for e in v)
                             for v in values) and first:
        with contextlib.suppress(OverflowError):
            return np.array(values, np.int64)
    return values


def _kinds(column: Any) -> set:
    """The kinds a chunk's records have."""
    return {column.value} if isinstance(column, _Same) else set(column.tolist())


def _constant(value: str, count: int) -> np.ndarray:
    column = np.empty(count, object)
    column[:] = [value] * count if isinstance(value, (tuple, list, dict)) else value
    return column


def _array(column) -> np.ndarray:
    if isinstance(column, _Details):
        return column.dicts()
    return column.array() if isinstance(column, (_Same, _Seq)) else column


def _item(column, k: int):
    """Element `k` of a chunk's column, as a Python value (a batch's detail made for this one record)."""
    if isinstance(column, (_Details, _Same, _Seq)):
        return column.item(k)
    value = column[k]
    return value.item() if isinstance(value, np.generic) else value


def _record(row: tuple, route: tuple) -> MessageRecord:
    kind = row[-1]
    return MessageRecord(*row, route=route) if kind == "message" else CopyRecord(*row)
