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
    from sim._rendezvous import Collective


@dataclass
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
        else:
            _fire(self.env, waiter, message, arrival - now)
        return arrival

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


def _fire(env: simpy.Environment, event: simpy.Event, value: Any, delay_s: float) -> None:
    """Trigger `event` with `value` after `delay_s` (what a `Timeout` does, on an event already handed out)."""
    event._ok = True
    event._value = value
    env.schedule(event, delay=delay_s if delay_s > 0 else 0)


class Port:
    """One device's access to the network and its memory during one collective call."""

    def __init__(self, transport: Transport, device: int, memory: LocalMemory, collective: "Collective",
                 call: int, exchange: int, simulation: Any = None) -> None:
        self.transport = transport
        self.simulation = simulation
        self.device = device
        self.collective = collective
        self.call = call
        self.exchange = exchange
        self.memory = memory
        self.last_arrival_s = 0.0

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

    def recv(self, src: int, tag: Hashable = 0) -> simpy.Event:
        """An event that fires with the `Message` from `src` carrying `tag`."""
        return self.transport.expect(self.device, src, self.exchange, tag)
