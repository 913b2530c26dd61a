"""The switch as a network element that reduces: it takes in every member's term of each shard of a call, adds
them in group order, and sends each sum on to the shard's receivers.

A member contributes its whole row at once with `Port.reduce_in_switch`: its term of every shard j, shard j's
owner (the member the records name as the sum's sender, as NCCL's NVLS has member j pull shard j's sum from
the switch and store it to every member through the switch's multicast) and receivers, and how the switch
adds (`Fold`: the group-order fold that 'direct' computes on a device, so each sum has its bits). The switch
holds the terms as they come in, by group index whatever the order of arrival, and adds each shard's when
the last member's row is in (one pass over a stack of terms, as cheap as one addition). Then the network
carries each sum (`LinkState.send_reduced`: one flow through every contributor's egress port and the
switch's adders to every receiver's ingress port), and a member's `Port.recv_reduced` fires, once, when the
last sum it receives has arrived: a call over n members costs n rows and n events, not n^2. (How a call is
held, awaited and settled is shared with the calls posted as tables: `sim.engine._switch_calls`.)

The trace shows each contribution as a message from its member to the shard's owner, and each sum as a
message from the owner to each receiver; a shard's records all arrive when its sum does. (`Run.link_busy_s`
charges these records to the routes between their ends, not to the one flow through the switch that timed
them.)
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from sim.engine._switch_calls import Fold, HeldCall, SwitchCalls
from sim.engine._switch_rows import SwitchRows

if TYPE_CHECKING:
    from sim.engine._port import Port
    from sim.engine._transport import Transport

__all__ = ["Fold", "SwitchReductions"]


class _Call(HeldCall):
    """One call's reductions shard by shard: the trace rows of every member's contributions, and per receiver
    (by device) the sums arrived so far and when the last did."""

    def __init__(self, members: tuple[int, ...], owners: tuple[int, ...], receivers: list[tuple[int, ...]],
                 fold: Fold) -> None:
        super().__init__(members, fold, len(owners))
        self.owners, self.receivers = owners, receivers
        self.first: dict[int, int] = {}  # group index -> trace index of its first contribution
        self.expected = Counter(d for r in receivers for d in r)
        self.sums: dict[int, list[tuple[int, np.ndarray]]] = {d: [] for d in members}
        self.last = dict.fromkeys(members, 0.0)

    def key(self, port: Port) -> int:
        return port.device

    def complete(self, key: int) -> bool:
        return bool(self.expected.get(key, 0)) and len(self.sums[key]) == self.expected[key]

    def last_s(self, key: int) -> float:
        return self.last[key]

    def latest_s(self) -> float:
        return max(self.last.values())


class SwitchReductions(SwitchCalls[_Call]):
    """The reductions a reducing switch is doing shard by shard, by call (exchange); `rows`, those posted as
    tables."""

    def __init__(self, transport: Transport) -> None:
        super().__init__(transport)
        self.rows = SwitchRows(transport)  # the calls posted as tables (`sim.engine._switch_rows`)

    def contribute(self, port: Port, parts: list[np.ndarray], owners: tuple[int, ...],
                   receivers: list[tuple[int, ...]], fold: Fold, detail: dict) -> None:
        """Member `port.device`'s term of every shard: recorded and held; once every member's row is in, each
        shard's terms are folded in group order and the sums sent on."""
        transport = self.transport
        call = self._call(port, lambda: _Call(port.group.members, owners, receivers, fold))
        now = transport.env.now
        shards = len(parts)
        details = {**{k: [v] * shards for k, v in detail.items()}, "chunk": list(range(shards)),
                   "switch": ["reduce"] * shards}
        call.first[port.group.index] = transport.trace.append_batch(
            port.device, list(owners), [p.nbytes for p in parts], now, [now] * shards, None, port.collective.name,
            port.call, details)
        if self._hold(port, call, parts):
            self._send(port, call, detail)

    def _send(self, port: Port, call: _Call, detail: dict) -> None:
        """Fold every shard and put its sum on the network to its receivers."""
        transport, now = self.transport, self.transport.env.now
        rows = call.held_rows()
        for j, (owner, receivers) in enumerate(zip(call.owners, call.receivers)):
            total = call.fold([row[j] for row in rows])
            count = len(receivers)
            details = {**{k: [v] * count for k, v in detail.items()}, "chunk": [j] * count,
                       "switch": ["multicast"] * count}
            first = transport.trace.append_batch(owner, list(receivers), [total.nbytes] * count, now, [now] * count,
                                                 None, port.collective.name, port.call, details)
            transport.links.send_reduced(call.members, receivers, total.nbytes, _Sum(self, call, j, total, first, now))

    def take(self, port: Port) -> list[tuple[int, np.ndarray]]:
        """(shard, sum) of every sum member `port.device` received, in shard order (after `expect` fired)."""
        call = self._calls[port.exchange]
        sums = sorted(call.sums.pop(port.device), key=lambda item: item[0])
        if not call.sums:
            del self._calls[port.exchange]
        return sums

    def arrived(self, call: _Call, shard: int, total: np.ndarray, first: int, sent_s: float, at_s: float) -> None:
        """Shard `shard`'s sum reached its receivers at `at_s`: its records, its receivers, its senders."""
        transport = self.transport
        arrival = transport._arrive(sent_s, at_s)
        receivers = call.receivers[shard]
        transport.trace.set_arrivals(np.array([call.first[i] + shard for i in range(len(call.members))]), arrival)
        transport.trace.set_arrivals(np.arange(first, first + len(receivers)), arrival)
        sums, last = call.sums, call.last
        for device in receivers:
            sums[device].append((shard, total))
            if arrival > last[device]:
                last[device] = arrival
        self._arrived(call, receivers, 1)


class _Sum:
    """Where the network reports that one shard's sum has reached its receivers."""

    __slots__ = ("call", "first", "sent_s", "shard", "switch", "total")

    def __init__(self, switch: SwitchReductions, call: _Call, shard: int, total: np.ndarray, first: int,
                 sent_s: float) -> None:
        self.switch, self.call, self.shard, self.total = switch, call, shard, total
        self.first, self.sent_s = first, sent_s

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        self.switch.arrived(self.call, self.shard, self.total, self.first, self.sent_s, float(arrivals_s[0]))
