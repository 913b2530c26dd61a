"""The transport: messages, mailboxes and the `Port` a protocol sends and receives through.

Posting a message books its route on the network (`LinkState`), records it in the trace and leaves it in
the receiver's mailbox with its arrival time; no clock event is made for it. A receive is one event that
fires at the message's arrival (at once if it is already there), and a sender waits once, for its last
arrival, at the end of its part of the collective.

Collectives whose members all send one message to every member (all_to_all, all_gather, the direct
all-reduce) may post whole rows instead (`send_each` / `recv_each`): one table per call holds every
member's row, and each receiver takes its column with one event, so a call over n devices costs n
events and n row postings, not n^2 mailbox entries.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from sim._memory import LocalMemory
from sim._mesh import Group
from sim._network import LinkState
from sim._trace import Trace

if TYPE_CHECKING:
    from sim._engine import Simulation
    from sim._perturb import Order
    from sim._rendezvous import Collective, _Meeting


@dataclass(slots=True)
class Message:
    """A payload in flight: a numpy array (the real bytes) and a small header.

    The transport stamps `arrival_s` and `rank` (posting order, or a random rank in a perturbed run), which
    order messages by arrival for a receiver that writes them where they may overlap.
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
        self.order = order  # a perturbed run's random draws (`sim._perturb`); None in a default run
        self._posted = 0
        # one mailbox and one table of waiting receives per device, keyed by (src, exchange, tag)
        self._inbox: list[dict[tuple, tuple[float, Message]]] = [{} for _ in range(devices)]
        self._waiting: list[dict[tuple, Any]] = [{} for _ in range(devices)]
        self._tables: dict[int, _Table] = {}

    def post(self, message: Message, exchange: int, collective: str, call: int, detail: dict) -> float:
        """Send `message` now; returns its arrival time."""
        now = self.env.now
        size = message.payload.nbytes
        start, arrival = self.links.occupy(message.src, message.dst, size, now)
        order = self.order
        if order is None:
            message.rank = self._posted
            self._posted += 1
        else:
            arrival, message.rank = order.arrival(now, arrival), order.rank()
        message.arrival_s = arrival
        self.trace.append(message.src, message.dst, size, now, start, arrival, collective, call, detail)
        self._deliver(message, (message.src, exchange, message.tag), arrival)
        return arrival

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

    def post_each(self, src: int, group: Group, payloads: list[np.ndarray], headers: list[dict], exchange: int,
                  collective: str, call: int, details: dict[str, list]) -> float:
        """Send member `group.index`'s row of messages (one per member, in member order) now: book their
        links, record them, and leave the row in the call's table. Returns the last arrival time."""
        now = self.env.now
        members = list(group.members)
        sizes = [payload.nbytes for payload in payloads]
        starts, arrivals = self.links.occupy_batch(src, members, sizes, now)
        if self.order is not None:
            arrivals = [self.order.arrival(now, arrival) for arrival in arrivals]
        self.trace.append_batch(src, members, sizes, now, starts, arrivals, collective, call, details)
        table = self._tables.get(exchange)
        if table is None:
            table = self._tables[exchange] = _Table(self.env, group.members)
        table.post(group.index, payloads, headers, arrivals)
        return max(arrivals, default=now)

    def expect_each(self, exchange: int, members: tuple[int, ...], receiver: int) -> simpy.Event:
        """One event that fires once every member has posted its row and the last message to member
        `receiver` has arrived; then `take_each` hands over the messages."""
        table = self._tables.get(exchange)
        if table is None:
            table = self._tables[exchange] = _Table(self.env, members)
        return table.expect(receiver)

    def take_each(self, exchange: int, receiver: int) -> list[Message]:
        """The message from every member to member `receiver`, in member order (after `expect_each` fired);
        the call's table goes once every member has taken its column."""
        table = self._tables[exchange]
        messages = table.take(receiver)
        if table.served == len(table.members):
            del self._tables[exchange]
        return messages


class _Table:
    """One call's all-pairs exchange: row s holds member s's message to every member."""

    __slots__ = ("env", "members", "posted", "rows", "served", "waiting")

    def __init__(self, env: simpy.Environment, members: tuple[int, ...]) -> None:
        self.env, self.members = env, members
        self.rows: list[tuple | None] = [None] * len(members)
        self.posted = self.served = 0
        self.waiting: list[tuple[int, simpy.Event]] = []

    def post(self, sender: int, payloads: list[np.ndarray], headers: list[dict], arrivals: list[float]) -> None:
        self.rows[sender] = (payloads, headers, arrivals)
        self.posted += 1
        if self.posted == len(self.members):
            for receiver, event in self.waiting:
                self._serve(receiver, event)
            self.waiting = []

    def expect(self, receiver: int) -> simpy.Event:
        event = self.env.event()
        if self.posted == len(self.members):
            self._serve(receiver, event)
        else:
            self.waiting.append((receiver, event))
        return event

    def _serve(self, receiver: int, event: simpy.Event) -> None:
        """Fire `event` when the last message of `receiver`'s column arrives (messages are made on taking,
        so a call over n members never holds n^2 of them at once)."""
        last_s = max((arrivals[receiver] for _, _, arrivals in self.rows), default=self.env.now)  # type: ignore[misc]
        _fire(self.env, event, None, last_s - self.env.now)

    def take(self, receiver: int) -> list[Message]:
        members, me = self.members, self.members[receiver]
        self.served += 1
        return [Message(members[s], me, 0, payloads[receiver], headers[receiver], arrivals[receiver], s)
                for s, (payloads, headers, arrivals) in enumerate(self.rows)]  # type: ignore[misc]


def _fire(env: simpy.Environment, event: simpy.Event, value: Any, delay_s: float) -> None:
    """Trigger `event` with `value` after `delay_s` (what a `Timeout` does, on an event already handed out)."""
    event._ok = True
    event._value = value
    env.schedule(event, delay=delay_s if delay_s > 0 else 0)


class Port:
    """One device's access to the network and its memory during one collective call."""

    def __init__(self, simulation: Simulation, device: int, collective: Collective, call: int,
                 meeting: _Meeting) -> None:
        self.simulation = simulation
        self.transport: Transport = simulation.transport
        self.memory: LocalMemory = simulation.memories[device]
        self.device = device
        self.collective = collective
        self.call = call
        self.exchange = meeting.exchange
        self.last_arrival_s = 0.0
        self._meeting = meeting

    @property
    def group_args(self) -> list[Any]:
        """Every member's arguments, by group index. A protocol may read what the call's members all know
        statically (shapes, dtypes, layouts), never their values: those travel in messages."""
        return self._meeting.args

    def once(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """`compute()` the first time a member of this call asks for `key`, the same value afterwards: a fact
        about the call (from what its members know statically) worked out once, not once per member."""
        shared = self._meeting.shared
        if key not in shared:
            shared[key] = compute()
        return shared[key]

    @property
    def group(self) -> Group:
        return self.collective.group

    @property
    def skipped(self) -> frozenset:
        """The pieces of this call a sanitized run leaves out (each collective says what a piece is; see
        `sim.Violation.skip`); empty in any other run."""
        return self._meeting.skipped

    @property
    def last_arrival_wins(self) -> bool:
        """Whether slices that land on the same rows are allowed, written in arrival order (the last
        arrival wins), as arrival-order exploration asks; by default such a call is refused."""
        return self.simulation.last_arrival_wins

    def send(self, dst: int, payload: np.ndarray, tag: Hashable = 0, header: dict | None = None, **detail) -> None:
        """Post `payload` (a C-contiguous array) to device `dst`; it arrives after the network's delay."""
        if not payload.flags.c_contiguous:
            raise AssertionError("payloads must be packed (C-contiguous) before sending")
        message = Message(self.device, dst, tag, payload, header or {})
        arrival = self.transport.post(message, self.exchange, self.collective.name, self.call, detail)
        if arrival > self.last_arrival_s:
            self.last_arrival_s = arrival

    def send_each(self, payloads: list[np.ndarray], headers: list[dict], **details: list) -> None:
        """Send `payloads[j]` to member j of the group, for every member, all now: one row of the call's
        all-pairs exchange, which members receive with `recv_each` (and only with it). Each `details`
        keyword gives one detail value per message. The trace and the timing are those of the same sends
        made one by one, in member order."""
        for payload in payloads:
            if not payload.flags.c_contiguous:
                raise AssertionError("payloads must be packed (C-contiguous) before sending")
        arrival = self.transport.post_each(self.device, self.group, payloads, headers, self.exchange,
                                           self.collective.name, self.call, details)
        if arrival > self.last_arrival_s:
            self.last_arrival_s = arrival

    def recv_each(self) -> Generator:
        """The `send_each` message of every member to this one, in member order, once the last has arrived:
        `messages = yield from port.recv_each()`."""
        yield self.transport.expect_each(self.exchange, self.group.members, self.group.index)
        return self.transport.take_each(self.exchange, self.group.index)

    def recv(self, src: int, tag: Hashable = 0) -> simpy.Event:
        """An event that fires with the `Message` from `src` carrying `tag`."""
        return self.transport.expect(self.device, src, self.exchange, tag)
