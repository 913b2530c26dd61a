"""The switch as a network element that reduces: it holds one partial sum per shard of a call, adds each
member's contribution as it comes in, in group order, and sends the sum on to the shard's receivers.

A member contributes with `Port.reduce_in_switch`: its term for one shard, the shard's owner (the member the
records name as the sum's sender, as NCCL's NVLS has member j pull shard j's sum from the switch and store it
to every member through the switch's multicast) and its receivers. The switch folds contributions into its
partial sum in group order as soon as every earlier member's has come (a later one waits, unfolded, in the
switch), so the sum has the bits of the group-order fold that 'direct' computes on a device. When the last
term is in, the network carries the sum (`LinkState.send_reduced`: one flow through every contributor's
egress port and the switch's adders to every receiver's ingress port) and the receivers find it in their
mailboxes, as a message from the owner tagged `("in-network", shard)`.

The trace shows each contribution as a message from its member to the owner, and the sum as a message from
the owner to each receiver; all arrive when the sum does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from sim.engine._transport import Port, Transport


@dataclass(frozen=True)
class Reducer:
    """How the switch adds: `start(term)` makes a partial sum from the first term, `add(partial, term)` adds
    the next, `finish(partial)` gives the sum's array (e.g. rounded back from a wider accumulator)."""

    start: Callable[[np.ndarray], Any]
    add: Callable[[Any, np.ndarray], Any]
    finish: Callable[[Any], np.ndarray]


@dataclass
class _Shard:
    """One shard's reduction in progress: the partial sum of the first `folded` members' terms, the terms
    that came early, the ports waiting to hear their term has arrived and the trace rows of the contributions."""

    members: tuple[int, ...]
    owner: int
    receivers: tuple[int, ...]
    reducer: Reducer
    partial: Any = None
    folded: int = 0
    early: dict[int, np.ndarray] = field(default_factory=dict)
    ports: list = field(default_factory=list)
    rows: list[int] = field(default_factory=list)


class SwitchReductions:
    """The partial sums a reducing switch holds, by (exchange, shard)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._shards: dict[tuple, _Shard] = {}

    def contribute(self, port: Port, shard: int, payload: np.ndarray, owner: int, receivers: tuple[int, ...],
                   reducer: Reducer, detail: dict) -> None:
        """Member `port.device`'s term for `shard`: recorded, folded in group order, and once every member's is
        in, the sum sent on."""
        transport, group = self.transport, port.group
        key = (port.exchange, shard)
        state = self._shards.get(key)
        if state is None:
            state = self._shards[key] = _Shard(group.members, owner, tuple(receivers), reducer)
        now = transport.env.now
        state.rows.append(transport.trace.append(port.device, owner, payload.nbytes, now, now, now,
                                                 port.collective.name, port.call, {**detail, "switch": "reduce"}))
        state.ports.append(port)
        port.in_flight += 1
        state.early[group.index] = payload
        while state.folded in state.early:
            term = state.early.pop(state.folded)
            state.partial = state.reducer.start(term) if state.folded == 0 else state.reducer.add(state.partial, term)
            state.folded += 1
        if state.folded == len(state.members):
            del self._shards[key]
            self._send(port, shard, state, detail)

    def _send(self, port: Port, shard: int, state: _Shard, detail: dict) -> None:
        """Put the finished sum on the network to the shard's receivers."""
        transport = self.transport
        total = state.reducer.finish(state.partial)
        now = transport.env.now
        details = {key: [value] * len(state.receivers) for key, value in {**detail, "switch": "multicast"}.items()}
        first = transport.trace.append_batch(state.owner, list(state.receivers), [total.nbytes] * len(state.receivers),
                                             now, [now] * len(state.receivers), None, port.collective.name, port.call,
                                             details)
        sink = _Sum(transport, state, port.exchange, ("in-network", shard), total, first, now)
        transport.links.send_reduced(state.members, state.receivers, total.nbytes, sink)


class _Sum:
    """Where the network reports that a shard's sum has reached its receivers."""

    __slots__ = ("exchange", "first", "sent_s", "state", "tag", "total", "transport")

    def __init__(self, transport: Transport, state: _Shard, exchange: int, tag: tuple, total: np.ndarray,
                 first: int, sent_s: float) -> None:
        self.transport, self.state, self.exchange, self.tag = transport, state, exchange, tag
        self.total, self.first, self.sent_s = total, first, sent_s

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        transport, state = self.transport, self.state
        arrival = transport._arrive(self.sent_s, float(arrivals_s[0]))
        count = len(state.receivers)
        transport.trace.set_arrivals(np.array(state.rows), arrival)
        transport.trace.set_arrivals(np.arange(self.first, self.first + count), arrival)
        for dst in state.receivers:
            transport.deliver_made(state.owner, dst, self.tag, self.total, self.exchange, arrival)
        for port in state.ports:
            port.arrived(1, arrival)
