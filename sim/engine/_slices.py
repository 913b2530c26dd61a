"""Slice tables: a call whose members each send any number of messages to any members, posted as one row.

A ragged exchange sends member s's non-empty slices, each one message to the member it is for; how many
go to each member is the call's arguments' business, and a member may send several to one member or
none. A row posts a member's messages at once: one trace batch, one hand-over to the network, one sink
for their arrivals. Each message carries rows of an array in its sender's memory (its payload, a view)
and a header, a row of integers (for a ragged slice, where it lands and how many rows it holds). A
receiver says how many messages it expects and waits for them with one event, fired when the last has
arrived; it then takes its column: the messages to it, senders in member order, each sender's in the
order it posted them.

The trace records and the times are those of the same messages sent one by one with `Port.send` and
received one by one with `Port.recv`, when sending costs nothing but the links (no `Costs.launch_s`, no
`Costs.per_message_s`) and arrivals are not perturbed: messages posted in one instant become flows in one
network step whichever way they were posted. A receiver is woken while the network reports the message
that completes its column. Receivers that finish in the same instant may resume in another order than
one-by-one receives, which take one event per message, would give them (as after `send_each` rows).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from sim._simpy import fire_after as _fire

if TYPE_CHECKING:
    from sim.engine._port import Port
    from sim.engine._transport import Transport


class SliceTables:
    """The slice tables of a run's calls in progress, by exchange number."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._tables: dict[int, _SliceTable] = {}

    def _table(self, port: Port) -> _SliceTable:
        table = self._tables.get(port.exchange)
        if table is None:
            table = self._tables[port.exchange] = _SliceTable(self.transport, port.group.members)
        return table

    def post(self, port: Port, peers: np.ndarray, source: np.ndarray, starts: np.ndarray, stops: np.ndarray,
             values: np.ndarray, details: dict[str, list]) -> None:
        """Send rows `starts[k]:stops[k]` of `source` with header `values[k]` to group member `peers[k]`
        (ascending), every one now; `details` holds one list of values per detail key."""
        count = len(peers)
        if not count:
            return
        transport = self.transport
        now = float(transport.env.now)
        table = self._table(port)
        dsts = table.ids[peers]
        sizes = (stops - starts) * (source.dtype.itemsize * math.prod(source.shape[1:]))
        first = transport.trace.append_batch(port.device, dsts, sizes, now, np.full(count, now), None,
                                             port.collective.name, port.call, details)
        table.post(port.group.index, peers, source, starts, stops, values)
        port.in_flight += count
        transport.links.send(port.device, dsts, transport.wire(sizes), _SliceRow(table, port.group.index, first, port))

    def expect(self, port: Port, count: int) -> simpy.Event:
        """An event that fires once `count` messages of this call to `port`'s member have arrived."""
        return self._table(port).expect(port.group.index, count)

    def take(self, port: Port, count: int) -> tuple[list[np.ndarray], np.ndarray | None]:
        """The payloads and headers of the messages to `port`'s member (after `expect` fired; none
        when `count` is 0); the call's table goes once every member has taken its column."""
        table = self._table(port)
        taken = table.take(port.group.index) if count else ([], None)
        if table.served == len(table.members):
            del self._tables[port.exchange]
        return taken


class _SliceRow:
    """Where the network reports the arrivals of one member's row of slices."""

    __slots__ = ("first", "port", "sender", "table")

    def __init__(self, table: _SliceTable, sender: int, first: int, port: Port) -> None:
        self.table, self.sender, self.first, self.port = table, sender, first, port

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        self.table.transport.trace.set_arrivals(self.first + slots, arrivals_s)
        self.table.arrived(self.sender, slots, arrivals_s)
        self.port.arrived(len(slots), float(arrivals_s.max()))


class _SliceTable:
    """One call's rows of slices: row s holds member s's messages (their receivers ascending), `known[r]`
    how many messages to member r have arrived and `last[r]` the latest arrival.

    The columns are indexed once, when the first member takes its own, from every row posted by then
    (again should a row come later). A payload is made (a view of its sender's memory) when its receiver
    takes it, just before the receiver copies it: a row's messages are made hot, not a million at once."""

    __slots__ = ("columns", "env", "ids", "known", "last", "members", "need", "posted", "rows", "served",
                 "transport", "waiting")

    def __init__(self, transport: Transport, members: tuple[int, ...]) -> None:
        self.transport, self.env, self.members = transport, transport.env, members
        n = len(members)
        self.ids = np.asarray(members, np.int64)
        self.rows: list[Any] = [None] * n
        self.posted = 0
        self.columns: tuple | None = None
        self.known = np.zeros(n, np.int64)
        self.last = np.zeros(n)
        self.need = np.full(n, -1, np.int64)  # messages each waiting member expects
        self.served = 0
        self.waiting: dict[int, simpy.Event] = {}

    def post(self, sender: int, peers: np.ndarray, source: np.ndarray, starts: np.ndarray, stops: np.ndarray,
             values: np.ndarray) -> None:
        self.rows[sender] = (peers, source, starts, stops, values)
        self.posted += 1

    def arrived(self, sender: int, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        """Messages `slots` of `sender`'s row arrived at `arrivals_s`; wake, in member order, the waiting
        members whose last message this was."""
        receivers = self.rows[sender][0][slots]
        self.known += np.bincount(receivers, minlength=len(self.known))
        np.maximum.at(self.last, receivers, arrivals_s)
        if not self.waiting:
            return
        complete = receivers[self.known[receivers] == self.need[receivers]]
        for receiver in sorted(set(complete.tolist())):
            event = self.waiting.pop(receiver, None)
            if event is not None:
                _fire(self.env, event, None, self.last[receiver] - self.env.now)

    def expect(self, receiver: int, count: int) -> simpy.Event:
        event = self.env.event()
        self.need[receiver] = count
        if self.known[receiver] == count:
            _fire(self.env, event, None, self.last[receiver] - self.env.now)
        else:
            self.waiting[receiver] = event
        return event

    def take(self, receiver: int) -> tuple[list[np.ndarray], np.ndarray]:
        """Receiver's column: each sender's messages to it, senders in member order."""
        self.served += 1
        if self.columns is None or self.columns[0] != self.posted:
            self.columns = (self.posted, *self._columns())
        _, bounds, sources, sender, starts, stops, values = self.columns
        lo, hi = bounds[receiver], bounds[receiver + 1]
        spans = zip(sender[lo:hi].tolist(), starts[lo:hi].tolist(), stops[lo:hi].tolist())
        return [sources[s][a:b] for s, a, b in spans], values[lo:hi]

    def _columns(self) -> tuple:
        """Every posted message by receiver (a stable sort of the rows, in sender order): where each
        receiver's run begins, the senders' memories, and each message's sender, rows and header."""
        rows = [row for row in self.rows if row is not None]
        peers = np.concatenate([row[0] for row in rows])
        order = np.argsort(peers, kind="stable")
        bounds = np.searchsorted(peers[order], np.arange(len(self.members) + 1)).tolist()
        sender = np.repeat(np.arange(len(rows)), [len(row[0]) for row in rows])[order]
        starts, stops, values = (np.concatenate([row[k] for row in rows])[order] for k in (2, 3, 4))
        return bounds, [row[1] for row in rows], sender, starts, stops, values


def receive_slices(port: Port, count: int) -> Generator:
    """The payloads and headers of the `count` messages of this call to `port`'s member, once the last
    has arrived (no wait when `count` is 0)."""
    tables = port.transport.slices
    if count:
        yield tables.expect(port, count)
    return tables.take(port, count)
