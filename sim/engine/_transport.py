"""The transport: messages, mailboxes and tables; the `Port` a protocol sends and receives through is in
`sim.engine._port`.

Posting a message records it in the trace and hands it to the network (`sim.network._flows.LinkState`), which
carries it as a flow sharing links with the others in flight; no clock event is made per message. When
the network says it has arrived, it is stamped with its arrival, its trace record gets its arrival time,
and it is handed to the receive waiting for it or left in the receiver's mailbox. A receive is one event
that fires at the message's arrival (at once if it is already there); a sender's port counts its messages
not yet arrived, and the engine waits, once, until the last has. Of what the network reports in one step,
receivers are woken first (row exchanges in the order their receivers began waiting), senders last: a
payload is a view of its sender's memory, taken before the sender moves on.

Collectives whose members all send one message to every member (all_to_all, all_gather, the direct
all-reduce) may post whole rows instead (`send_split` / `send_copies`, or `send_each` with a list of
payloads): one table per call (`sim.engine._rows`) holds every member's row, and each receiver takes its
column with one event and one copy (`recv_into` / `recv_column`; `recv_each` makes its messages), so a call
over n devices costs n events and n row postings, not n^2 mailbox entries, and no object per message.

The network's `Costs` are charged here too: a port launches its call before its first message to another
device (`launch_s`) and issues its messages one after another, `per_message_s` each; a message (a row:
once its last message is issued) enters the network when it has been issued; on the links a message
weighs `Costs.wire_bytes` of its size (the protocol's efficiency and overhead), while the trace records its
payload's bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from sim._errors import ProtocolError
from sim._simpy import fire_after as _fire
from sim.engine._rows import Table, Whole
from sim.engine._slices import SliceTables
from sim.engine._switch import SwitchReductions
from sim.network._flows import LinkState
from sim.network._mesh import Group
from sim.record._trace import Trace

if TYPE_CHECKING:
    from sim.engine._perturb import Order
    from sim.engine._port import Port


@dataclass(slots=True)
class Message:
    """A payload in flight: a numpy array (the real bytes) and a small header.

    The transport stamps `arrival_s` (when it arrives) and `rank` (posting order, or a random rank in a
    perturbed run), which order messages by arrival for a receiver that writes them where they may overlap.
    """

    src: int
    dst: int
    tag: Hashable
    payload: np.ndarray
    header: dict = field(default_factory=dict)
    arrival_s: float = 0.0
    rank: float = 0.0


class Transport:
    """Mailboxes keyed by (receiver, sender, exchange, tag), the receives waiting on them, and the tables
    of the calls exchanging whole rows."""

    def __init__(self, env: simpy.Environment, links: LinkState, trace: Trace, devices: int,
                 order: Order | None = None) -> None:
        self.env = env
        self.links = links
        self.trace = trace
        self.order = order  # a perturbed run's random draws (`sim.engine._perturb`); None in a default run
        self.costs = links.network.costs
        self._free = self.costs.free  # links alone: messages weigh their bytes (checked once, not per message)
        self._posted = 0
        # one mailbox and one table of waiting receives per device, keyed by (src, exchange, tag)
        self._inbox: list[dict[tuple, tuple[float, Message]]] = [{} for _ in range(devices)]
        self._waiting: list[dict[tuple, Any]] = [{} for _ in range(devices)]
        self._tables: dict[int, Table] = {}
        self._ready: dict[int, Table] = {}  # tables with a waiting receiver's column complete, by id
        self._drained: list[Port] = []  # ports whose messages have all arrived, a sender waiting
        self.switch = SwitchReductions(self)  # the partial sums a reducing switch holds (`sim.engine._switch`)
        self.slices = SliceTables(self)  # rows of any number of messages per member (`sim.engine._slices`)
        links.on_settled = self._wake

    def release(self) -> None:
        """The run is over: drop the parts that point back at the transport (the switch's and the slices'
        tables, the network's wake-up), so that it is freed by reference counting."""
        self.links.on_settled = None
        self.switch = self.slices = None  # type: ignore[assignment]

    def _wake(self) -> None:
        """After a network step: wake the receivers of completed row exchanges, then the senders."""
        ready, self._ready = self._ready, {}
        for table in ready.values():
            table.serve()
        drained, self._drained = self._drained, []
        for port in drained:
            port.drain()

    def post(self, message: Message, exchange: int, collective: str, call: int, detail: dict,
             port: Port | None = None, issued_s: float | None = None) -> None:
        """Send `message` now (or once it is issued, at `issued_s`); it is delivered when the network has
        carried it, and `port` is told."""
        now = self.env.now
        start = now if issued_s is None else max(now, issued_s)
        size = message.payload.nbytes
        if self.order is None:
            message.rank = self._posted
            self._posted += 1
        else:
            message.rank = self.order.rank()
        index = self.trace.append(message.src, message.dst, size, now, start, start, collective, call, detail)
        key = (message.src, exchange, message.tag)
        self._send(start, message.src, [message.dst], [self.wire(size)],
                   _Single(self, message, key, index, start, port))

    def wire(self, sizes: Any) -> Any:
        """The bytes messages of `sizes` (bytes: one int, a list or an array) occupy their links as: exactly
        the values the transport posts to the network for them, whichever way they are posted (one by one, a
        row, a table). Each weighs `Costs.wire_bytes` of its size (floats: a list for a list, a float64 array
        for an array); when every cost is nil, `sizes` itself, unchanged (the bytes alone)."""
        if self._free:
            return sizes
        wire_bytes = self.costs.wire_bytes
        if isinstance(sizes, np.ndarray):
            return np.array([wire_bytes(size) for size in sizes.tolist()], np.float64)
        if isinstance(sizes, list):
            return [wire_bytes(size) for size in sizes]
        return wire_bytes(sizes)

    def _send(self, start_s: float, src: int, dsts: list[int], wire: list[float], sink: Any) -> None:
        """Hand messages to the network at `start_s` (now, or later: when their sender has issued them)."""
        if start_s <= self.env.now:
            self.links.send(src, dsts, wire, sink)
            return
        event = self.env.event()
        event.callbacks.append(lambda _: self.links.send(src, dsts, wire, sink))
        _fire(self.env, event, None, start_s - self.env.now)

    def _arrive(self, sent_s: float, arrival_s: float) -> float:
        """A message's arrival, its flight stretched in a perturbed run."""
        return arrival_s if self.order is None else self.order.arrival(sent_s, arrival_s)

    def _deliver(self, message: Message, key: tuple, arrival_s: float) -> None:
        """Hand `message` to the receive waiting for it, or leave it in the receiver's mailbox."""
        waiter = self._waiting[message.dst].pop(key, None)
        if waiter is None:
            inbox = self._inbox[message.dst]
            if key in inbox:  # it would replace the one waiting there: a message lost
                raise ProtocolError(f"device {message.src} sent device {message.dst} a second message with "
                                    f"tag={message.tag!r} before the first was received, in the same call: a "
                                    f"receive takes one message per sender and tag; give each message its own tag")
            inbox[key] = (arrival_s, message)
        else:
            _fire(self.env, waiter, message, arrival_s - self.env.now)

    def expect(self, dst: int, src: int, exchange: int, tag: Hashable) -> simpy.Event:
        """An event that fires with the message from `src` to `dst` carrying `tag`, when it has arrived."""
        key = (src, exchange, tag)
        event = self.env.event()
        posted = self._inbox[dst].pop(key, None)
        if posted is None:
            if key in self._waiting[dst]:  # the first receive would never fire
                raise ProtocolError(f"device {dst} waits a second time for a message from device {src} with "
                                    f"tag={tag!r} while the first receive still waits, in the same call: a tag "
                                    f"names one message per sender; give each message its own tag")
            self._waiting[dst][key] = event
        else:
            arrival, message = posted
            _fire(self.env, event, message, arrival - self.env.now)
        return event

    def unmatched(self) -> list[str]:
        """The one-sided messages no receive took and the one-sided receives no message reached, each naming
        its sender and its receiver: what a run that ended is left with (empty when every pair met)."""
        found = [f"device {m.src} sent a message to device {m.dst} in {m.header.get('call', 'a one-sided call')} "
                 f"that no receive on device {m.dst} took"
                 for inbox in self._inbox for key, (_, m) in inbox.items() if isinstance(key[1], _Channel)]
        found += [f"device {dst} waits for a message from device {key[0]} on {key[1].name!r} that device "
                  f"{key[0]} never sent"
                  for dst, waiting in enumerate(self._waiting) for key in waiting if isinstance(key[1], _Channel)]
        return found

    def post_each(self, src: int, group: Group, payloads: list[np.ndarray], headers: list[dict], exchange: int,
                  collective: str, call: int, details: dict[str, list], port: Port | None = None,
                  issued_s: float | None = None) -> None:
        """Send member `group.index`'s row of messages (one per member, in member order) now (or once the
        row is issued, at `issued_s`): record them, leave the row in the call's table and hand the messages
        to the network."""
        sizes = [payload.nbytes for payload in payloads]
        self._post_row(src, group, (payloads, headers), sizes, exchange, collective, call, details, port, issued_s)

    def post_row(self, src: int, group: Group, source: np.ndarray, split: bool, exchange: int, collective: str,
                 call: int, details: dict[str, Any], port: Port | None = None, issued_s: float | None = None) -> None:
        """Send member `group.index`'s row as one array: part j of `source`'s bytes cut into `group.size`
        equal parts to member j (`split`), or all of `source` to every member; `details` map a key to one
        value per message or to `Same(value)`. Recorded, timed and delivered as `post_each` would the
        same messages, without an object per message."""
        size = source.nbytes // group.size if split else source.nbytes
        self._post_row(src, group, Whole(source.reshape(-1), split), size, exchange, collective, call, details,
                       port, issued_s)

    def _post_row(self, src: int, group: Group, row: Any, sizes: list[int] | int, exchange: int, collective: str,
                  call: int, details: dict[str, Any], port: Port | None, issued_s: float | None) -> None:
        now = self.env.now
        start = now if issued_s is None else max(now, issued_s)
        members = group.members
        first = self.trace.append_batch(src, members, sizes, now, start, None, collective, call, details)
        table = self._table(exchange, members)
        table.post(group.index, row, first)
        self._send(start, src, table.dsts, self.wire(sizes), _Row(self, table, group.index, start, port))

    def _table(self, exchange: int, members: tuple[int, ...]) -> Table:
        table = self._tables.get(exchange)
        if table is None:
            table = self._tables[exchange] = Table(self, members)
        return table

    def expect_each(self, exchange: int, members: tuple[int, ...], receiver: int) -> simpy.Event:
        """One event that fires once every member has posted its row and the last message to member
        `receiver` has arrived; then `take_each` (or `take_into`, `take_column`) hands over the messages."""
        return self._table(exchange, members).expect(receiver)

    def take_each(self, exchange: int, receiver: int) -> list[Message]:
        """The message from every member to member `receiver`, in member order (after `expect_each` fired);
        the call's table goes once every member has taken its column."""
        members, me = self._tables[exchange].members, self._tables[exchange].members[receiver]
        return [Message(members[s], me, 0, payload, header, arrival, s)
                for s, payload, header, arrival in self._taken(exchange, lambda table: table.take(receiver))]

    def take_into(self, exchange: int, receiver: int, out: np.ndarray) -> None:
        """Write the payload from every member to member `receiver` (rows posted with `post_row`) into row s
        of `out` (a C-contiguous array of one row per member, in member order)."""
        self._taken(exchange, lambda table: table.take_into(receiver, out))

    def take_column(self, exchange: int, receiver: int) -> np.ndarray:
        """The payloads from every member to member `receiver` (rows posted with `post_row`), flat, stacked
        in member order: one row per member."""
        return self._taken(exchange, lambda table: table.column(receiver))

    def _taken(self, exchange: int, take: Callable[[Table], Any]) -> Any:
        table = self._tables[exchange]
        taken = take(table)
        table.served += 1
        if table.served == len(table.members):
            del self._tables[exchange]
        return taken


@dataclass(frozen=True)
class _Channel:
    """The key one-sided messages travel under in place of a call's exchange number, so that a send and a
    receive made in different calls meet."""

    name: Hashable


class _Single:
    """Where the network reports the arrival of one message posted with `Transport.post`."""

    __slots__ = ("index", "key", "message", "port", "sent_s", "transport")

    def __init__(self, transport: Transport, message: Message, key: tuple, index: int, sent_s: float,
                 port: Port | None) -> None:
        self.transport, self.message, self.key, self.index = transport, message, key, index
        self.sent_s, self.port = sent_s, port

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        transport = self.transport
        arrival = transport._arrive(self.sent_s, float(arrivals_s[0]))
        self.message.arrival_s = arrival
        transport.trace.set_arrivals(self.index, arrival)
        transport._deliver(self.message, self.key, arrival)
        if self.port is not None:
            self.port.arrived(1, arrival)


class _Row:
    """Where the network reports the arrivals of one member's row of a `send_each`."""

    __slots__ = ("port", "sender", "sent_s", "table", "transport")

    def __init__(self, transport: Transport, table: Table, sender: int, sent_s: float, port: Port | None) -> None:
        self.transport, self.table, self.sender = transport, table, sender
        self.sent_s, self.port = sent_s, port

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        order = self.transport.order
        if order is not None:
            arrivals_s = np.array([order.arrival(self.sent_s, a) for a in arrivals_s.tolist()])
        self.transport.trace.set_arrivals(self.table.firsts[self.sender] + slots, arrivals_s)
        self.table.arrived(slots, arrivals_s)
        if self.port is not None:
            self.port.arrived(len(slots), float(arrivals_s.max()))
