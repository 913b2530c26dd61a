"""`Trace`: the record of every message a run exchanged, kept as columns.

Records arrive as plain tuples and are packed, a few thousand at a time, into numpy columns (device ids,
sizes, times, call numbers) beside object columns (collective name, detail, kind). `MessageRecord` objects
are made only when someone iterates, so a run of a million messages stores a few dozen bytes per message
plus its detail.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

FIELDS = ("src", "dst", "size_bytes", "send_time_s", "start_time_s", "arrival_time_s", "collective", "call",
          "detail", "kind")
_NUMERIC = {"src": np.int64, "dst": np.int64, "size_bytes": np.int64, "send_time_s": np.float64,
            "start_time_s": np.float64, "arrival_time_s": np.float64, "call": np.int64}
_STAGE_ROWS = 8192


@dataclass(frozen=True)
class MessageRecord:
    """One message: who sent how many bytes to whom, when, for which collective call and slice.

    `send_time_s` is when the sender posted it, `start_time_s` when its first link began to carry it,
    `arrival_time_s` when the receiver had all of it. `detail` says which slice it carried and where the
    receiver wrote it (e.g. `{'slice': 1, 'rows': (0, 2)}`). `kind` is "message" for a message and names
    the step for a local copy ("pack", "unpack", "relayout"), which has `src == dst`.
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

    def to_dict(self) -> dict:
        """Plain JSON-ready fields."""
        record = asdict(self)
        record["detail"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.detail.items()}
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
    """The messages of one run, in the order they were sent."""

    def __init__(self) -> None:
        self._chunks: list[dict[str, np.ndarray]] = []
        self._rows: list[tuple] = []
        self._records: list[MessageRecord] | None = None

    def __iter__(self) -> Iterator[MessageRecord]:
        return iter(self.messages)

    def __len__(self) -> int:
        return sum(len(chunk["src"]) for chunk in self._chunks) + len(self._rows)

    def append(self, src: int, dst: int, size_bytes: int, send_time_s: float, start_time_s: float,
               arrival_time_s: float, collective: str, call: int, detail: dict, kind: str = "message") -> None:
        """Record one message (or local copy, by `kind`) from its fields."""
        self._rows.append((src, dst, size_bytes, send_time_s, start_time_s, arrival_time_s, collective, call,
                           detail, kind))
        self._records = None
        if len(self._rows) >= _STAGE_ROWS:
            self._pack()

    def append_batch(self, src: int, dsts: list[int], sizes: list[int], send_time_s: float, starts_s: list[float],
                     arrivals_s: list[float], collective: str, call: int, details: dict[str, list]) -> None:
        """Record messages from `src` to each of `dsts`, posted together; `details` maps each detail key to
        its per-message values (a message's detail is made only when it is read)."""
        self._pack()
        count = len(dsts)
        self._chunks.append({
            "src": np.full(count, src, np.int64), "dst": np.array(dsts, np.int64),
            "size_bytes": np.array(sizes, np.int64), "send_time_s": np.full(count, send_time_s, np.float64),
            "start_time_s": np.array(starts_s, np.float64), "arrival_time_s": np.array(arrivals_s, np.float64),
            "collective": _constant(collective, count), "call": np.full(count, call, np.int64),
            "detail": _Details(details, count), "kind": _constant("message", count)})
        self._records = None

    def add(self, record: MessageRecord) -> None:
        """Record a `MessageRecord` (or `CopyRecord`)."""
        self.append(*(getattr(record, name) for name in FIELDS))

    @property
    def messages(self) -> list[MessageRecord]:
        """Every record as a `MessageRecord` (a `CopyRecord` for local copies), made on demand."""
        if self._records is None:
            self._records = [_record(row) for row in self._iter_rows()]
        return self._records

    def columns(self) -> dict[str, np.ndarray]:
        """Every field as one array (numeric fields as numbers, the rest as objects), in record order."""
        self._pack()
        if not self._chunks:
            return {name: np.zeros(0, _NUMERIC.get(name, object)) for name in FIELDS}
        return {name: np.concatenate([_array(chunk[name]) for chunk in self._chunks]) for name in FIELDS}

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
        columns = self.columns()
        return int(columns["size_bytes"][columns["src"] != columns["dst"]].sum())

    def to_json(self) -> list[dict]:
        return [m.to_dict() for m in self.messages]

    def _pack(self) -> None:
        """Move the staged rows into a chunk of columns."""
        if not self._rows:
            return
        values = list(zip(*self._rows))
        chunk = {}
        for name, column in zip(FIELDS, values):
            if name in _NUMERIC:
                chunk[name] = np.array(column, _NUMERIC[name])
            else:
                chunk[name] = np.empty(len(column), object)
                chunk[name][:] = column
        self._chunks.append(chunk)
        self._rows = []

    def _iter_rows(self) -> Iterator[tuple]:
        for chunk in self._chunks:
            columns = [_array(chunk[name]).tolist() for name in FIELDS]
            yield from zip(*columns)
        yield from self._rows


class _Details:
    """A batch's detail column, kept as one list per key until someone reads it."""

    def __init__(self, columns: dict[str, list], count: int) -> None:
        self.columns, self.count = columns, count

    def __len__(self) -> int:
        return self.count

    def dicts(self) -> np.ndarray:
        keys = list(self.columns)
        rows = zip(*self.columns.values()) if keys else ((),) * self.count
        values = np.empty(self.count, object)
        values[:] = [dict(zip(keys, row)) for row in rows]
        return values


def _constant(value: str, count: int) -> np.ndarray:
    column = np.empty(count, object)
    column[:] = value
    return column


def _array(column) -> np.ndarray:
    return column.dicts() if isinstance(column, _Details) else column


def _record(row: tuple) -> MessageRecord:
    kind = row[-1]
    return MessageRecord(*row) if kind == "message" else CopyRecord(*row)
