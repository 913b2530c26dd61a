"""`Trace`: the record of every message a run exchanged."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterator


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


class Trace:
    """The messages of one run, in the order they were sent."""

    def __init__(self) -> None:
        self.messages: list[MessageRecord] = []

    def __iter__(self) -> Iterator[MessageRecord]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def add(self, record: MessageRecord) -> None:
        self.messages.append(record)

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
        return sum(m.size_bytes for m in self.messages if m.src != m.dst)

    def to_json(self) -> list[dict]:
        return [m.to_dict() for m in self.messages]
