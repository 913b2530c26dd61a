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
from collections.abc import Callable, Iterator, KeysView, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim._frozen import quick_init
from sim.record._columns import (
    Details,
    Members,
    Shared,
    array_of,
    column_of,
    item_of,
    joined_column,
    joined_numbers,
    kinds_of,
    packed_details,
)
from sim.record._compute import ComputeRecord

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
        record = {name: getattr(self, name) for name in FIELDS}  # as `asdict` gives them, without its deep copy
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


@quick_init
@dataclass(frozen=True, slots=True)
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
    label: str | None = None


class Trace:
    """The messages of one run, in the order they were sent.

    `route(src, dst)` (e.g. `sim.Mesh.route`) gives each message's route; without it routes are empty.
    `trace[k]` is message k, made alone; `column`, `detail_column`, `detail_numbers` and `detail_keys` read a
    field of every message without making a `MessageRecord` of any, so a reader of a million messages need
    not make them all.
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
        self.computes: list[ComputeRecord] = []  # local work charged with `sim.compute`, in the order it began
        self._columns: dict[str, np.ndarray] = {}  # columns read since the last record was added

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
        row = [item_of(chunk[name], k) for name in _STORED]
        row.insert(FIELDS.index("arrival_time_s"), float(self._arrivals[index]))
        return _record(tuple(row), self._route_of(row[0], row[1], row[-1]))

    def column(self, name: str) -> np.ndarray:
        """One field of every record, in record order (`detail` as dicts: `detail_column` reads one key); a
        new array each time, joined from the chunks once until a record is added."""
        if name == "arrival_time_s":
            return self._arrivals[:self._count].copy()
        self._pack()
        if not self._chunks:
            return np.zeros(0, _NUMERIC.get(name, object))
        joined = self._columns.get(name)
        if joined is None:
            joined = self._columns[name] = joined_column([chunk[name] for chunk in self._chunks])
        return joined.copy()

    def detail_column(self, key: str) -> list:
        """Every record's `detail[key]`, None where its detail lacks `key`, without making the details."""
        self._pack()
        values: list = []
        for chunk in self._chunks:
            detail = chunk["detail"]
            if isinstance(detail, Details):
                values += detail.values(key)
            else:
                values += [d.get(key) for d in detail]
        return values

    def detail_numbers(self, key: str, width: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Every record's `detail[key]` as int64 (shape `(n,)`, or `(n, width)` for tuples of `width` ints,
        e.g. `rows`), zero where a detail lacks `key`, and a mask of the records that have it: what
        `detail_column` says, as two arrays, without a Python value per record where the chunks keep the
        key as one shared value or an array.
        """
        self._pack()
        shape = (0, width) if width else (0,)
        if not self._chunks:
            return np.zeros(shape, np.int64), np.zeros(0, bool)
        return joined_numbers([chunk["detail"] for chunk in self._chunks], key, width)

    def detail_keys(self, kind: str | None = None) -> KeysView[str]:
        """The keys any record's detail has (of records of `kind` only, when given), as a set in the order
        records first have them (the order a record's detail lists its keys in)."""
        self._pack()
        keys: dict[str, None] = {}
        for chunk in self._chunks:
            detail = chunk["detail"]
            if isinstance(detail, Details):
                if detail.count and (kind is None or kind in kinds_of(chunk["kind"])):
                    keys.update(dict.fromkeys(detail.columns))
            else:
                kinds = array_of(chunk["kind"])
                keys.update(dict.fromkeys(k for d, of in zip(detail, kinds) if kind is None or of == kind for k in d))
        return keys.keys()

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

    def append_batch(self, src: int | Sequence[int], dsts: Sequence[int], sizes: Sequence[int] | int,
                     send_time_s: float, starts_s: Sequence[float] | float, arrivals_s: list[float] | None,
                     collective: str, call: int, details: dict[str, Any]) -> int:
        """Record messages from `src` to each of `dsts`, posted together; returns the first one's index
        (`arrivals_s` may be None, and the arrivals set later). `src` is one sender for all or, for a table
        of several members' messages, one per message.

        `sizes` and `starts_s` are one value per message or one for all; `details` maps each detail key to
        its per-message values (a list or a range) or to `Same(value)`, one value for all. Values shared by
        the batch are kept once, so a recorded message costs a few bytes (its arrival time) plus what
        differs between messages; a message's detail is made only when it is read."""
        self._pack()
        count = len(dsts)
        self._starts.append(self._count)
        self._chunks.append({
            "src": column_of(src, count, np.int64), "dst": Members(dsts),
            "size_bytes": column_of(sizes, count, np.int64), "send_time_s": Shared(send_time_s, count, np.float64),
            "start_time_s": column_of(starts_s, count, np.float64),
            "collective": Shared(collective, count), "call": Shared(call, count, np.int64),
            "detail": Details(details, count), "kind": Shared("message", count)})
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
        if self._columns:
            self._columns = {}

    def extend_columns(self, columns: dict[str, Any], details: dict[str, Any] | Sequence[dict]) -> None:
        """Record many messages at once from columns (a trace read back from a file): `columns` holds every
        field of `FIELDS` but `detail` (numbers as arrays, names as sequences), `details` either one column
        per key that every record has (an array, 2-D for tuples of ints, or a list) or one dict per record."""
        self._pack()
        count = len(columns["src"])
        chunk: dict[str, Any] = {}
        for name in _STORED:
            if name == "detail":
                chunk[name] = Details(dict(details), count) if isinstance(details, dict) else _objects(details)
            elif name in _NUMERIC:
                chunk[name] = np.asarray(columns[name], _NUMERIC[name])
            else:
                chunk[name] = _objects(columns[name])
        first = self._grow(count)
        self._arrivals[first:first + count] = columns["arrival_time_s"]
        self._starts.append(first)
        self._chunks.append(chunk)

    def add(self, record: MessageRecord) -> None:
        """Record a `MessageRecord` (or `CopyRecord`)."""
        self.append(*(getattr(record, name) for name in FIELDS))

    @property
    def messages(self) -> list[MessageRecord]:
        """Every record as a `MessageRecord` (a `CopyRecord` for local copies), made on demand."""
        if self._records is None:
            self._records = [_record(row, self._route_of(row[0], row[1], row[-1])) for row in self._iter_rows()]
        return self._records

    def route(self, src: int, dst: int) -> tuple:
        """The links a message from `src` to `dst` crosses: empty to itself and in a trace without routes (one
        read back from a file); not kept, so asking every pair of a big run costs no memory."""
        known = self._routes.get((src, dst))
        if known is not None or self._route is None or src == dst:
            return known or ()
        return tuple(self._route(src, dst))

    def _route_of(self, src: int, dst: int, kind: str) -> tuple:
        """A message's route, asked once per (src, dst)."""
        if self._route is None or src == dst or kind != "message":
            return ()
        route = self._routes.get((src, dst))
        if route is None:
            route = self._routes[(src, dst)] = tuple(self._route(src, dst))
        return route

    def columns(self, names: tuple[str, ...] = FIELDS) -> dict[str, np.ndarray]:
        """Every field (or those of `names`) as one array (numeric fields as numbers, the rest as objects), in
        record order. Name the fields a reader needs: `detail` makes a dict per record."""
        self._pack()
        if not self._chunks:
            return {name: np.zeros(0, _NUMERIC.get(name, object)) for name in names}
        columns = {name: np.concatenate([array_of(chunk[name]) for chunk in self._chunks]) for name in names
                   if name in _STORED}
        if "arrival_time_s" in names:
            columns["arrival_time_s"] = self._arrivals[:self._count].copy()
        return {name: columns[name] for name in names}

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
                chunk[name] = packed_details(column)
            elif column.count(column[0]) == len(column):
                chunk[name] = Shared(column[0], len(column))
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
            columns = [array_of(chunk[name]).tolist() for name in _STORED]
            for row in zip(*columns):
                yield row[:at] + (next(arrivals),) + row[at:]


def _objects(values: Sequence) -> np.ndarray:
    """`values` as an object column."""
    column = np.empty(len(values), object)
    column[:] = list(values)
    return column


def _record(row: tuple, route: tuple) -> MessageRecord:
    kind = row[-1]
    return MessageRecord(*row, route=route) if kind == "message" else CopyRecord(*row)
