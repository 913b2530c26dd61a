"""`PairTable`: one call's messages when every member sends at most one and receives at most one (a
permutation, as ppermute's), posted together.

Each sender hands its message to the table (`Port.send_pair`); when the call's last sender has, the table
records them in the trace as one batch and gives them to the network as one entry (`LinkState.send_table`),
in the order they were handed over. A receiver waits on one event that fires at its message's arrival
(`Port.recv_pair`) and reads the payload (a view of the sender's memory) from the table.

It gives the trace and the times of the same messages sent one by one (`Port.send` / `Port.recv`) as long
as nothing else is posted while the call's members hand theirs over and every message is posted at once.
The members of a call resume together when their meeting ends (one event, their processes one after another,
nothing else in between), so a protocol that hands over its message before it first waits meets the first
condition; `pairs_apply` says when the second holds (sending costs nothing but the links, and the run is
neither perturbed, sanitized nor exploring arrival orders).
For example, a ring shift over 4 devices posts the messages 0->1, 1->2, 2->3, 3->0 as one batch, and device
2 wakes at the arrival of the message from device 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from sim._simpy import fire_after as _fire

if TYPE_CHECKING:
    import simpy

    from sim.engine._options import RunOptions
    from sim.engine._port import Port
    from sim.engine._transport import Transport


def pairs_apply(port: Port) -> bool:
    """Whether `port`'s call may post through a `PairTable` with the same trace and times as message by
    message, its members handing their messages over before they first wait (`one_table`)."""
    return one_table(port.transport, port.options)


def one_table(transport: Transport, options: RunOptions) -> bool:
    """Whether a call's messages may go as one table with the same trace and times as one by one: issuing is
    free, and the run is not perturbed, sanitized or exploring arrival orders."""
    costs = transport.costs
    return (transport.order is None and not costs.per_message_s and not costs.launch_s
            and not options.sanitize and not options.last_arrival_wins)


class PairTable:
    """The messages of one call whose `senders` members each send one, keyed by receiving device."""

    __slots__ = (
        "arrivals",
        "call",
        "collective",
        "details",
        "dsts",
        "env",
        "first",
        "payloads",
        "ports",
        "senders",
        "slot_of",
        "srcs",
        "transport",
        "waiting",
    )

    def __init__(self, transport: Transport, senders: int, collective: str, call: int) -> None:
        self.transport, self.env, self.senders = transport, transport.env, senders
        self.collective, self.call = collective, call
        self.srcs: list[int] = []
        self.dsts: list[int] = []
        self.payloads: list[np.ndarray] = []
        self.ports: list[Port | None] = []
        self.details: dict[str, list] = {}
        self.slot_of: dict[int, int] = {}  # receiving device -> its message's slot
        self.arrivals: dict[int, float] = {}  # receiving device -> arrival, when no receive waits for it yet
        self.waiting: dict[int, simpy.Event] = {}  # receiving device -> the receive waiting for its message
        self.first = -1

    def send(self, port: Port, dst: int, payload: np.ndarray, detail: dict[str, Any]) -> None:
        """Hand over `port`'s message to device `dst`; the last sender's posts them all."""
        self.slot_of[dst] = len(self.dsts)
        self.srcs.append(port.device)
        self.dsts.append(dst)
        self.payloads.append(payload)
        self.ports.append(port)
        for key, value in detail.items():
            self.details.setdefault(key, []).append(value)
        port.in_flight += 1
        if len(self.dsts) == self.senders:
            self._post()

    def _post(self) -> None:
        transport, now = self.transport, self.env.now
        sizes = [payload.nbytes for payload in self.payloads]
        self.first = transport.trace.append_batch(self.srcs, self.dsts, sizes, now, now, None, self.collective,
                                                  self.call, self.details)
        transport._posted += len(sizes)  # the ranks message-by-message posts would have taken
        wire = transport.wire(sizes)
        transport.links.send_table(np.asarray(self.srcs, np.int64), np.asarray(self.dsts, np.int64),
                                   np.asarray(wire, np.float64), self)

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        """The network's report: each message's trace record gets its arrival, its receive (if waiting) is
        woken at it, its sender's port is told, message by message as `Transport.post`'s would be."""
        self.transport.trace.set_arrivals(self.first + slots, arrivals_s)
        env, waiting, ports, dsts = self.env, self.waiting, self.ports, self.dsts
        for slot, arrival in zip(slots.tolist(), arrivals_s.tolist()):
            waiter = waiting.pop(dsts[slot], None)
            if waiter is None:
                self.arrivals[dsts[slot]] = arrival
            else:
                _fire(env, waiter, None, arrival - env.now)
            ports[slot].arrived(1, arrival)
            ports[slot] = None  # told: the table no longer holds the port (and through it the call's meeting)

    def expect(self, dst: int) -> simpy.Event:
        """An event that fires at the arrival of the message to device `dst` (posted or not yet)."""
        event = self.env.event()
        arrival = self.arrivals.pop(dst, None)
        if arrival is None:
            self.waiting[dst] = event
        else:
            _fire(self.env, event, None, arrival - self.env.now)
        return event

    def payload(self, dst: int) -> np.ndarray:
        """The payload of the message to device `dst` (once it has arrived)."""
        return self.payloads[self.slot_of[dst]]
