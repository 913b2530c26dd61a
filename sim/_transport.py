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

    def __init__(self, env: simpy.Environment, links: LinkState, trace: Trace) -> None:
        self.env = env
        self.links = links
        self.trace = trace
        self._inbox: dict[tuple, tuple[float, Message]] = {}
        self._waiting: dict[tuple, simpy.Event] = {}

    def post(self, message: Message, exchange: int, collective: str, call: int, detail: dict) -> float:
        """Send `message` now; returns its arrival time."""
        now = self.env.now
        size = message.payload.nbytes
        start, arrival = self.links.occupy(message.src, message.dst, size, now)
        self.trace.append(message.src, message.dst, size, now, start, arrival, collective, call, detail)
        key = (message.dst, message.src, exchange, message.tag)
        waiter = self._waiting.pop(key, None)
        if waiter is None:
            self._inbox[key] = (arrival, message)
        elif isinstance(waiter, _Gather):
            waiter.fill(key, arrival, message)
        else:
            _fire(self.env, waiter, message, arrival - now)
        return arrival

    def post_batch(self, src: int, dsts: list[int], payloads: list[np.ndarray], headers: list[dict], tag: Hashable,
                   exchange: int, collective: str, call: int, details: dict[str, list]) -> float:
        """Send one message to each of `dsts` now, in order; returns the last arrival time."""
        now = self.env.now
        sizes = [payload.nbytes for payload in payloads]
        starts, arrivals = self.links.occupy_batch(src, dsts, sizes, now)
        self.trace.append_batch(src, dsts, sizes, now, starts, arrivals, collective, call, details)
        inbox, waiting = self._inbox, self._waiting
        for dst, payload, header, arrival in zip(dsts, payloads, headers, arrivals):
            key = (dst, src, exchange, tag)
            message = Message(src, dst, tag, payload, header)
            waiter = waiting.pop(key, None) if waiting else None
            if waiter is None:
                inbox[key] = (arrival, message)
            elif isinstance(waiter, _Gather):
                waiter.fill(key, arrival, message)
            else:
                _fire(self.env, waiter, message, arrival - now)
        return max(arrivals, default=now)

    def expect(self, dst: int, src: int, exchange: int, tag: Hashable) -> simpy.Event:
        """An event that fires with the message from `src` to `dst` carrying `tag`, when it has arrived."""
        key = (dst, src, exchange, tag)
        event = self.env.event()
        posted = self._inbox.pop(key, None)
        if posted is None:
            self._waiting[key] = event
        else:
            arrival, message = posted
            _fire(self.env, event, message, arrival - self.env.now)
        return event


    def expect_all(self, dst: int, sources: list[tuple[int, Hashable]], exchange: int) -> simpy.Event:
        """One event that fires with the messages from every `(src, tag)` of `sources`, in that order, once
        the last of them has arrived."""
        gather = _Gather(self.env, len(sources))
        for k, (src, tag) in enumerate(sources):
            key = (dst, src, exchange, tag)
            gather.slots[key] = k
            posted = self._inbox.pop(key, None)
            if posted is None:
                self._waiting[key] = gather
            else:
                gather.fill(key, *posted)
        return gather.event


class _Gather:
    """Messages awaited together: the event fires at the latest arrival, when all have been posted."""

    __slots__ = ("env", "event", "messages", "slots", "pending", "last_s")

    def __init__(self, env: simpy.Environment, count: int) -> None:
        self.env, self.event = env, env.event()
        self.messages: list[Message | None] = [None] * count
        self.slots: dict[tuple, int] = {}
        self.pending, self.last_s = count, 0.0
        if not count:
            self.event.succeed([])

    def fill(self, key: tuple, arrival_s: float, message: Message) -> None:
        self.messages[self.slots[key]] = message
        self.last_s = max(self.last_s, arrival_s)
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

    def recv(self, src: int, tag: Hashable = 0) -> simpy.Event:
        """An event that fires with the `Message` from `src` carrying `tag`."""
        return self.transport.expect(self.device, src, self.exchange, tag)

    def recv_all(self, sources: list[tuple[int, Hashable]]) -> simpy.Event:
        """One event that fires with the messages from every `(src, tag)` in `sources`, in that order, when
        the last has arrived: for a protocol whose work on arrival takes no simulated time, the same timing
        as receiving them one by one, with one clock event instead of one per message."""
        return self.transport.expect_all(self.device, sources, self.exchange)
