"""The transport: messages, mailboxes and the `Port` a protocol sends and receives through.

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

from collections.abc import Callable, Generator, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from sim._simpy import fire_after as _fire
from sim.engine._pairs import PairTable, pairs_apply
from sim.engine._rows import Table, Whole
from sim.engine._slices import SliceTables, receive_slices
from sim.engine._switch import SwitchReductions
from sim.memory._memory import LocalMemory
from sim.network._flows import LinkState
from sim.network._mesh import Group
from sim.record._columns import Same
from sim.record._trace import Trace

if TYPE_CHECKING:
    from sim.engine._options import RunOptions
    from sim.engine._perturb import Order
    from sim.engine._rendezvous import Collective, MeetingView
    from sim.engine._switch import Fold
    from sim.network._mesh import Mesh


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
        self._send(start, message.src, [message.dst], [size if self._free else self.costs.wire_bytes(size)],
                   _Single(self, message, key, index, start, port))

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
            self._inbox[message.dst][key] = (arrival_s, message)
        else:
            _fire(self.env, waiter, message, arrival_s - self.env.now)

    def expect(self, dst: int, src: int, exchange: int, tag: Hashable) -> simpy.Event:
        """An event that fires with the message from `src` to `dst` carrying `tag`, when it has arrived."""
        key = (src, exchange, tag)
        event = self.env.event()
        posted = self._inbox[dst].pop(key, None)
        if posted is None:
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
        if self._free:
            wire = sizes
        elif isinstance(sizes, int):
            wire = self.costs.wire_bytes(sizes)
        else:
            wire = [self.costs.wire_bytes(size) for size in sizes]
        self._send(start, src, table.dsts, wire, _Row(self, table, group.index, start, port))

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


_PAIRS = ("sim.engine._pairs", "table")  # the meeting's key of its PairTable


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


class Port:
    """One device's access to the network and its memory during one collective call: the transport, the
    device's memory, a view of the call's meeting, and the run's options (the mesh among them)."""

    def __init__(self, transport: Transport, memory: LocalMemory, device: int, collective: Collective, call: int,
                 meeting: MeetingView, options: RunOptions) -> None:
        self.transport = transport
        self.memory = memory
        self.device = device
        self.collective = collective
        self.call = call
        self.meeting = meeting
        self.options = options
        self.mesh: Mesh = options.mesh
        self.exchange = meeting.exchange
        self.last_arrival_s = 0.0  # the latest arrival of this port's messages known so far
        self.issued_s = 0.0  # when the messages this port has issued are all issued (`Costs.per_message_s`)
        self.launched = False  # whether the call has been launched (`Costs.launch_s`, before the first message)
        self.in_flight = 0  # messages sent through this port whose arrival is not known yet
        self._drained: simpy.Event | None = None

    @property
    def group_args(self) -> list[Any]:
        """Every member's arguments, by group index. A protocol may read what the call's members all know
        statically (shapes, dtypes, layouts), never their values: those travel in messages."""
        return self.meeting.args

    def once(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """`compute()` the first time a member of this call asks for `key`, the same value afterwards: a fact
        about the call (from what its members know statically) worked out once, not once per member."""
        return self.meeting.once(key, compute)

    @property
    def group(self) -> Group:
        return self.collective.group

    @property
    def skipped(self) -> frozenset:
        """The pieces of this call a sanitized run leaves out (each collective says what a piece is; see
        `sim.Violation.skip`); empty in any other run."""
        return self.meeting.skipped

    @property
    def last_arrival_wins(self) -> bool:
        """Whether slices that land on the same rows are allowed, written in arrival order (the last
        arrival wins), as arrival-order exploration asks; by default such a call is refused."""
        return self.options.last_arrival_wins

    def send(self, dst: int, payload: np.ndarray, tag: Hashable = 0, header: dict | None = None,
             channel: Hashable | None = None, **detail) -> None:
        """Post `payload` (a C-contiguous array) to device `dst`; it arrives after the network's delay.

        A one-sided call (psend) names a `channel` both ends agree on instead of the call's exchange: the
        message is then received by a later call of the receiver (`recv(src, channel=...)`), and a run that
        ends with it unreceived is a ProtocolError naming both devices (`Transport.unmatched`)."""
        if not payload.flags.c_contiguous:
            raise AssertionError("payloads must be packed (C-contiguous) before sending")
        message = Message(self.device, dst, tag, payload, header or {})
        self.in_flight += 1
        exchange = self.exchange if channel is None else _Channel(channel)
        issued = self.issue(1) if dst != self.device else None
        self.transport.post(message, exchange, self.collective.name, self.call, detail, self, issued)

    def issue(self, messages: int) -> float | None:
        """Spend the time of issuing `messages` messages to other devices (`Costs.per_message_s` each, one
        after another from when the last issue ended or now, the first after the call's `Costs.launch_s`);
        when they are all issued, or None when issuing is free. A message issued for an empty ragged slice
        (`Costs.empty_slices='pay'`) costs this alone."""
        costs = self.transport.costs
        if messages <= 0 or not (costs.per_message_s or costs.launch_s):
            return None
        start = max(float(self.transport.env.now), self.issued_s)
        if not self.launched:
            start, self.launched = start + costs.launch_s, True
        self.issued_s = start + messages * costs.per_message_s
        return self.issued_s

    @property
    def pays_empty_slices(self) -> bool:
        """Whether an empty ragged slice to another device is issued (and costs `per_message_s`)."""
        return self.transport.costs.pays_empty_slices

    def send_each(self, payloads: list[np.ndarray], headers: list[dict], **details: list) -> None:
        """Send `payloads[j]` to member j of the group, for every member, all now: one row of the call's
        all-pairs exchange, which members receive with `recv_each` (and only with it). Each `details`
        keyword gives one detail value per message. The trace and the timing are those of the same sends
        made one by one, in member order."""
        for payload in payloads:
            if not payload.flags.c_contiguous:
                raise AssertionError("payloads must be packed (C-contiguous) before sending")
        self.in_flight += len(payloads)
        issued = self.issue(self.group.size - 1)
        self.transport.post_each(self.device, self.group, payloads, headers, self.exchange, self.collective.name,
                                 self.call, details, self, issued)

    def send_split(self, source: np.ndarray, **details: Any) -> None:
        """Send part j of `source` (C-contiguous; its bytes cut into `group.size` equal parts in order) to
        member j of the group, for every member, all now: `send_each` of those parts, as one array. A
        `details` value that is a `range` gives one value per message; any other is every message's.
        Members receive with `recv_into` or `recv_column`."""
        self._send_row(source, True, details)

    def send_copies(self, source: np.ndarray, **details: Any) -> None:
        """Send all of `source` (C-contiguous) to every member of the group, all now: `send_each` of
        `[source] * group.size`, as one array (`details` as for `send_split`)."""
        self._send_row(source, False, details)

    def _send_row(self, source: np.ndarray, split: bool, details: dict[str, Any]) -> None:
        if not source.flags.c_contiguous:
            raise AssertionError("payloads must be packed (C-contiguous) before sending")
        g = self.group.size
        kept = {key: value if isinstance(value, range) else Same(value) for key, value in details.items()}
        self.in_flight += g
        issued = self.issue(g - 1)
        self.transport.post_row(self.device, self.group, source, split, self.exchange, self.collective.name,
                                self.call, kept, self, issued)

    def recv_into(self, out: np.ndarray) -> Generator:
        """Write the `send_split` / `send_copies` payload of every member to this one into row s of `out`
        (C-contiguous, one row per member in member order), once the last has arrived:
        `yield from port.recv_into(out)`."""
        yield self.transport.expect_each(self.exchange, self.group.members, self.group.index)
        self.transport.take_into(self.exchange, self.group.index, out)

    def recv_column(self) -> Generator:
        """The `send_split` / `send_copies` payloads of every member to this one, flat and stacked in member
        order (read-only), once the last has arrived: `column = yield from port.recv_column()`."""
        yield self.transport.expect_each(self.exchange, self.group.members, self.group.index)
        return self.transport.take_column(self.exchange, self.group.index)

    def reduce_in_switch(self, parts: list[np.ndarray], owners: tuple[int, ...], receivers: list[tuple[int, ...]],
                         fold: Fold, **detail) -> None:
        """Send `parts[j]`, this member's term of shard j, into the switch for every j, all now; the switch adds
        every member's terms of shard j in group order (`fold(terms)`) and sends the sum to `receivers[j]`,
        named as from `owners[j]` (`sim.engine._switch`; the network must have `switch_reduces`). Every
        member passes the same owners, receivers and fold; receivers take their sums with `recv_reduced`."""
        for part in parts:
            if not part.flags.c_contiguous:
                raise AssertionError("payloads must be packed (C-contiguous) before sending")
        self.transport.switch.contribute(self, parts, owners, receivers, fold, detail)

    def recv_reduced(self) -> Generator:
        """(shard, sum) of every sum of this call's `reduce_in_switch` this member receives, in shard order,
        once the last has arrived: `sums = yield from port.recv_reduced()`."""
        yield self.transport.switch.expect(self)
        return self.transport.switch.take(self)

    def recv_each(self) -> Generator:
        """The `send_each` message of every member to this one, in member order, once the last has arrived:
        `messages = yield from port.recv_each()`."""
        yield self.transport.expect_each(self.exchange, self.group.members, self.group.index)
        return self.transport.take_each(self.exchange, self.group.index)

    def send_slices(self, peers: np.ndarray, source: np.ndarray, starts: np.ndarray, stops: np.ndarray,
                    values: np.ndarray, **details: list) -> None:
        """Send rows `starts[k]:stops[k]` of `source` (a C-contiguous array in this device's memory), with the
        header `values[k]` (integers), to group member `peers[k]` (ascending), every one now, as one row
        (`sim.engine._slices`); each `details` keyword gives one detail value per message. Members receive
        them with `recv_slices` (and only with it). The trace and the timing are those of the same sends
        made one by one, where sending costs nothing but the links."""
        if not source.flags.c_contiguous:
            raise AssertionError("payloads must be packed (C-contiguous) before sending")
        self.transport.slices.post(self, peers, source, starts, stops, values, details)

    def recv_slices(self, count: int) -> Generator:
        """The payloads and headers (one row of `values` each; None when `count` is 0) of the `count`
        `send_slices` messages to this member (senders in member order, each sender's in its order), once
        the last has arrived: `payloads, values = yield from port.recv_slices(count)`."""
        return (yield from receive_slices(self, count))

    def pairs_apply(self) -> bool:
        """Whether this call may use `send_pair` / `recv_pair` (see `sim.engine._pairs.pairs_apply`)."""
        return pairs_apply(self)

    def send_pair(self, dst: int, payload: np.ndarray, senders: int, **detail: Any) -> None:
        """Post `payload` (C-contiguous) to device `dst` in a call where `senders` members each send one
        message and each member receives at most one (`sim.engine._pairs`; only where `pairs_apply`): the
        trace and times of `send`, the messages posted as one batch when the last sender has handed its
        over. The receiver takes it with `recv_pair`."""
        if not payload.flags.c_contiguous:
            raise AssertionError("payloads must be packed (C-contiguous) before sending")
        self._pairs(senders).send(self, dst, payload, detail)

    def recv_pair(self, senders: int) -> Generator:
        """The payload of the `send_pair` message to this device, once it has arrived:
        `payload = yield from port.recv_pair(senders)`."""
        table = self._pairs(senders)
        yield table.expect(self.device)
        return table.payload(self.device)

    def _pairs(self, senders: int) -> PairTable:
        return self.meeting.once(_PAIRS, lambda: PairTable(self.transport, senders, self.collective.name, self.call))

    def recv(self, src: int, tag: Hashable = 0, channel: Hashable | None = None) -> simpy.Event:
        """An event that fires with the `Message` from `src` carrying `tag` (on `channel`, for a one-sided
        call: see `send`)."""
        return self.transport.expect(self.device, src, self.exchange if channel is None else _Channel(channel), tag)

    def arrived(self, count: int, last_s: float) -> None:
        """`count` of this port's messages arrived, the last at `last_s` (the network's report)."""
        self.in_flight -= count
        if last_s > self.last_arrival_s:
            self.last_arrival_s = last_s
        if self.in_flight == 0 and self._drained is not None:
            self.transport._drained.append(self)

    def drain(self) -> None:
        """Wake the sender waiting in `all_arrived`, at its last message's arrival (or the end of its last
        issue)."""
        last = max(self.last_arrival_s, self.issued_s)
        _fire(self.transport.env, self._drained, None, last - self.transport.env.now)

    def all_arrived(self) -> simpy.Event | None:
        """An event that fires when every message sent through this port has arrived and every issue has
        ended; None when all have already (payloads are zero-copy views of the sender's memory: it may not
        move on while they travel)."""
        env = self.transport.env
        if self.in_flight == 0:
            last = max(self.last_arrival_s, self.issued_s)
            return env.timeout(last - env.now) if last > env.now else None
        self._drained = env.event()
        return self._drained
