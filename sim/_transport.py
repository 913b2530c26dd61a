"""The transport: messages, mailboxes and the `Port` a protocol sends and receives through.

Posting a message books its route on the network (`LinkState`), records it in the trace and leaves it in
the receiver's mailbox with its arrival time; no clock event is made for it. A receive is one event that
fires at the message's arrival (at once if it is already there), and a sender waits once, for its last
arrival, at the end of its part of the collective.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Hashable

import numpy as np
import simpy

from sim._memory import LocalMemory
from sim._mesh import Group
from sim._network import LinkState
from sim._trace import Trace

if TYPE_CHECKING:
    from sim._rendezvous import Collective, _Meeting


@dataclass(slots=True)
class Message:
    """A payload in flight: a numpy array (the real bytes) and a small header."""

    src: int
    dst: int
    tag: Hashable
    payload: np.ndarray
    header: dict = field(default_factory=dict)


class Transport:
    """Mailboxes keyed by (receiver, sender, exchange, tag), and the receives waiting on them."""

    def __init__(self, env: simpy.Environment, links: LinkState, trace: Trace, devices: int) -> None:
        self.env = env
        self.links = links
        self.trace = trace
        # one mailbox and one table of waiting receives per device, keyed by (src, exchange, tag)
        self._inbox: list[dict[tuple, tuple[float, Message]]] = [{} for _ in range(devices)]
        self._waiting: list[dict[tuple, Any]] = [{} for _ in range(devices)]
        self._tables: dict[int, _Table] = {}

    def post(self, message: Message, exchange: int, collective: str, call: int, detail: dict) -> float:
        """Send `message` now; returns its arrival time."""
        now = self.env.now
        size = message.payload.nbytes
        start, arrival = self.links.occupy(message.src, message.dst, size, now)
        self.trace.append(message.src, message.dst, size, now, start, arrival, collective, call, detail)
        self._deliver(message, (message.src, exchange, message.tag), arrival)
        return arrival

    def post_batch(self, src: int, dsts: list[int], payloads: list[np.ndarray], headers: list[dict], tag: Hashable,
                   exchange: int, collective: str, call: int, details: dict[str, list]) -> float:
        """Send one message to each of `dsts` now, in order; returns the last arrival time."""
        now = self.env.now
        sizes = [payload.nbytes for payload in payloads]
        starts, arrivals = self.links.occupy_batch(src, dsts, sizes, now)
        self.trace.append_batch(src, dsts, sizes, now, starts, arrivals, collective, call, details)
        key = (src, exchange, tag)
        inbox, waiting = self._inbox, self._waiting
        for dst, payload, header, arrival in zip(dsts, payloads, headers, arrivals):
            message = Message(src, dst, tag, payload, header)
            if key in waiting[dst]:
                self._deliver(message, key, arrival)
            else:
                inbox[dst][key] = (arrival, message)
        return max(arrivals, default=now)

    def _deliver(self, message: Message, key: tuple, arrival_s: float) -> None:
        """Hand `message` to the receive waiting for it, or leave it in the receiver's mailbox."""
        waiter = self._waiting[message.dst].pop(key, None)
        if waiter is None:
            self._inbox[message.dst][key] = (arrival_s, message)
        elif isinstance(waiter, _Gather):
            waiter.fill(key, arrival_s, message)
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

    def expect_all(self, dst: int, sources: list[tuple[int, Hashable]], exchange: int) -> simpy.Event:
        """One event that fires with the messages from every `(src, tag)` of `sources`, in that order, once
        the last of them has arrived."""
        gather = _Gather(self.env, [(src, exchange, tag) for src, tag in sources])
        inbox, waiting = self._inbox[dst], self._waiting[dst]
        for key in gather.keys:
            posted = inbox.pop(key, None)
            if posted is None:
                waiting[key] = gather
            else:
                gather.fill(key, *posted)
        return gather.event


    def post_each(self, exchange: int, members: tuple[int, ...], sender: int, payloads: list[np.ndarray],
                  headers: list[dict], arrivals: list[float]) -> None:
        """Leave member `sender`'s row of messages (one per member, in member order) in the call's table."""
        table = self._tables.get(exchange)
        if table is None:
            table = self._tables[exchange] = _Table(self.env, members)
        table.post(sender, payloads, headers, arrivals)
        if table.finished:
            del self._tables[exchange]

    def expect_each(self, exchange: int, members: tuple[int, ...], receiver: int) -> simpy.Event:
        """One event that fires with the message from every member to member `receiver`, in member order,
        once every member has posted its row and the last message has arrived."""
        table = self._tables.get(exchange)
        if table is None:
            table = self._tables[exchange] = _Table(self.env, members)
        event = table.expect(receiver)
        if table.finished:
            del self._tables[exchange]
        return event


class _Table:
    """One call's all-pairs exchange: row s holds member s's message to every member."""

    __slots__ = ("env", "members", "rows", "posted", "waiting", "served")

    def __init__(self, env: simpy.Environment, members: tuple[int, ...]) -> None:
        self.env, self.members = env, members
        self.rows: list[tuple | None] = [None] * len(members)
        self.posted = self.served = 0
        self.waiting: list[tuple[int, simpy.Event]] = []

    @property
    def finished(self) -> bool:
        return self.served == len(self.members)

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
        members, me = self.members, self.members[receiver]
        messages, last_s = [], self.env.now
        for s, (payloads, headers, arrivals) in enumerate(self.rows):  # type: ignore[misc]
            messages.append(Message(members[s], me, 0, payloads[receiver], headers[receiver]))
            if arrivals[receiver] > last_s:
                last_s = arrivals[receiver]
        self.served += 1
        _fire(self.env, event, messages, last_s - self.env.now)


class _Gather:
    """Messages awaited together: the event fires at the latest arrival, when all have been posted."""

    __slots__ = ("env", "event", "keys", "messages", "slots", "pending", "last_s")

    def __init__(self, env: simpy.Environment, keys: list[tuple]) -> None:
        self.env, self.event, self.keys = env, env.event(), keys
        self.messages: list[Message | None] = [None] * len(keys)
        self.slots = {key: k for k, key in enumerate(keys)}
        self.pending, self.last_s = len(keys), 0.0
        if not keys:
            self.event.succeed([])

    def fill(self, key: tuple, arrival_s: float, message: Message) -> None:
        self.messages[self.slots[key]] = message
        if arrival_s > self.last_s:
            self.last_s = arrival_s
        self.pending -= 1
        if not self.pending:
            _fire(self.env, self.event, self.messages, self.last_s - self.env.now)


def _fire(env: simpy.Environment, event: simpy.Event, value: Any, delay_s: float) -> None:
    """Trigger `event` with `value` after `delay_s` (what a `Timeout` does, on an event already handed out)."""
    event._ok = True
    event._value = value
    env.schedule(event, delay=delay_s if delay_s > 0 else 0)


class Port:
    """One device's access to the network and its memory during one collective call."""

    def __init__(self, transport: Transport, device: int, memory: LocalMemory, collective: "Collective",
                 call: int, meeting: "_Meeting", simulation: Any = None) -> None:
        self.transport = transport
        self.simulation = simulation
        self.device = device
        self.collective = collective
        self.call = call
        self.exchange = meeting.exchange
        self.memory = memory
        self.last_arrival_s = 0.0
        self._meeting = meeting

    @property
    def group_args(self) -> list[Any]:
        """Every member's arguments, by group index. A protocol may read what the call's members all know
        statically (shapes, dtypes, layouts), never their values: those travel in messages."""
        return self._meeting.args

    @property
    def shared(self) -> dict:
        """A scratch dict shared by this call's members, to compute a fact about the call once."""
        return self._meeting.shared

    @property
    def group(self) -> Group:
        return self.collective.group

    def send(self, dst: int, payload: np.ndarray, tag: Hashable = 0, header: dict | None = None, **detail) -> None:
        """Post `payload` (a C-contiguous array) to device `dst`; it arrives after the network's delay."""
        if not payload.flags.c_contiguous:
            raise AssertionError("payloads must be packed (C-contiguous) before sending")
        message = Message(self.device, dst, tag, payload, header or {})
        arrival = self.transport.post(message, self.exchange, self.collective.name, self.call, detail)
        if arrival > self.last_arrival_s:
            self.last_arrival_s = arrival

    def send_batch(self, dsts: list[int], payloads: list[np.ndarray], headers: list[dict], tag: Hashable = 0,
                   **details: list) -> None:
        """`send` of `payloads[k]` to `dsts[k]` for every k, all now; each `details` keyword gives one detail
        value per message. The trace and the timing are those of the same sends made one by one."""
        for payload in payloads:
            if not payload.flags.c_contiguous:
                raise AssertionError("payloads must be packed (C-contiguous) before sending")
        arrival = self.transport.post_batch(self.device, dsts, payloads, headers, tag, self.exchange,
                                            self.collective.name, self.call, details)
        if arrival > self.last_arrival_s:
            self.last_arrival_s = arrival

    def send_each(self, payloads: list[np.ndarray], headers: list[dict], **details: list) -> None:
        """Send `payloads[j]` to member j of the group, for every member, all now: one row of the call's
        all-pairs exchange, which members receive with `recv_each` (and only with it). The trace and the
        timing are those of the same sends made one by one."""
        members = self.group.members
        for payload in payloads:
            if not payload.flags.c_contiguous:
                raise AssertionError("payloads must be packed (C-contiguous) before sending")
        now = self.transport.env.now
        sizes = [payload.nbytes for payload in payloads]
        starts, arrivals = self.transport.links.occupy_batch(self.device, list(members), sizes, now)
        self.transport.trace.append_batch(self.device, list(members), sizes, now, starts, arrivals,
                                          self.collective.name, self.call, details)
        self.transport.post_each(self.exchange, members, self.group.index, payloads, headers, arrivals)
        last = max(arrivals, default=now)
        if last > self.last_arrival_s:
            self.last_arrival_s = last

    def recv_each(self) -> simpy.Event:
        """One event that fires with the `send_each` message of every member to this one, in member order,
        when the last has arrived."""
        return self.transport.expect_each(self.exchange, self.group.members, self.group.index)

    def recv(self, src: int, tag: Hashable = 0) -> simpy.Event:
        """An event that fires with the `Message` from `src` carrying `tag`."""
        return self.transport.expect(self.device, src, self.exchange, tag)

    def recv_all(self, sources: list[tuple[int, Hashable]]) -> simpy.Event:
        """One event that fires with the messages from every `(src, tag)` in `sources`, in that order, when
        the last has arrived: for a protocol whose work on arrival takes no simulated time, the same timing
        as receiving them one by one, with one clock event instead of one per message."""
        return self.transport.expect_all(self.device, sources, self.exchange)
