"""A reducing switch's call posted as tables: every member's row of terms as one flat array cut at shared
bounds, every shard's sum posted to the network at once (`LinkState.send_reduced_table`), every arrival
handled as arrays.

The same reductions as `sim.engine._switch` takes shard by shard, where shard j's owner is member j and its
receivers are every member (`multicast`) or member j alone: the same trace records (every column), the same
sums (one group-order fold of the stacked rows: the fold is elementwise, so each shard's bits are those of
its own fold), the same flows and so the same times, and the receivers woken in the same order. A call over
n members costs a few numpy operations per member and per network step, not n^2 Python steps.

Worked example on 2 members, each row [a0, a1 | b0] cut at bounds [0, 2, 3], multicast: the switch stacks the
two rows, folds them into [s0, s1 | t0], posts shard 0 (2 terms) and shard 1 (1 term) as one table, and each
member receives the flat [s0, s1, t0] when both have arrived.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.engine._switch_calls import Fold, HeldCall, SwitchCalls
from sim.record._columns import Same

if TYPE_CHECKING:
    from sim.engine._port import Port

__all__ = ["SwitchRows"]


class _RowCall(HeldCall):
    """One call's rows as tables: the trace rows they made, the sum of them all, and per member (by group
    index) the sums arrived and when the last did."""

    def __init__(self, members: tuple[int, ...], bounds: np.ndarray, multicast: bool, fold: Fold) -> None:
        n = len(members)
        super().__init__(members, fold, n)
        self.bounds, self.multicast = bounds, multicast
        self.firsts = np.zeros(n, np.int64)  # group index -> trace index of its first contribution
        self.got = np.zeros(n, np.int64)  # by group index: sums arrived
        self.last = np.zeros(n)  # by group index: the latest arrival
        self.total: np.ndarray | None = None
        self.multicast_first = 0
        self.sent_s = 0.0
        self.taken = 0

    def key(self, port: Port) -> int:
        return port.group.index

    def complete(self, key: int) -> bool:
        return bool(self.got[key] == (len(self.members) if self.multicast else 1))

    def last_s(self, key: int) -> float:
        return float(self.last[key])

    def latest_s(self) -> float:
        return float(self.last.max())


class SwitchRows(SwitchCalls[_RowCall]):
    """The table calls a reducing switch is doing, by call (exchange)."""

    def contribute(self, port: Port, flat: np.ndarray, bounds: np.ndarray, multicast: bool, fold: Fold,
                   detail: dict) -> None:
        """Member `port.device`'s row (shard j is `flat[bounds[j]:bounds[j + 1]]`): recorded and held; once
        every member's row is in, the rows are folded and every sum posted."""
        call = self._call(port, lambda: _RowCall(port.group.members, bounds, multicast, fold))
        now = self.transport.env.now
        shards = len(bounds) - 1
        details = {**{k: Same(v) for k, v in detail.items()}, "chunk": range(shards), "switch": Same("reduce")}
        call.firsts[port.group.index] = self.transport.trace.append_batch(
            port.device, call.members, np.diff(bounds) * flat.itemsize, now, now, None, port.collective.name,
            port.call, details)
        if self._hold(port, call, flat):
            self._send(port, call, detail)

    def _send(self, port: Port, call: _RowCall, detail: dict) -> None:
        """Fold the rows and post every shard's sum, recorded as from its owner to its receivers."""
        transport, now, members = self.transport, self.transport.env.now, call.members
        n = len(members)
        call.total = total = call.fold(call.held_rows())
        sizes = np.diff(call.bounds) * total.itemsize
        shard = np.arange(n, dtype=np.int64)
        if call.multicast:
            src, dst, chunk = np.repeat(np.asarray(members, np.int64), n), np.tile(np.asarray(members), n), \
                np.repeat(shard, n)
            size = np.repeat(sizes, n)
        else:
            src, dst, chunk, size = np.asarray(members, np.int64), members, shard, sizes
        details = {**{k: Same(v) for k, v in detail.items()}, "chunk": chunk, "switch": Same("multicast")}
        call.multicast_first = transport.trace.append_batch(src, dst, size, now, now, None, port.collective.name,
                                                            port.call, details)
        call.sent_s = now
        transport.links.send_reduced_table(members, call.multicast, sizes, _Sums(self, call))

    def take(self, port: Port) -> np.ndarray:
        """The sums member `port.device` received (after `expect` fired): every shard's, flat (multicast), or
        its own shard's."""
        call = self._calls[port.exchange]
        call.taken += 1
        if call.taken == len(call.members):
            del self._calls[port.exchange]
        if call.multicast:
            return call.total
        i = port.group.index
        return call.total[call.bounds[i]:call.bounds[i + 1]]

    def arrived(self, call: _RowCall, slots: np.ndarray, at_s: np.ndarray) -> None:
        """Shards `slots` reached their receivers at `at_s`: their records, their receivers, their senders,
        in shard order as one by one."""
        transport = self.transport
        order = np.argsort(slots, kind="stable")
        slots, at_s = slots[order], at_s[order]
        if transport.order is not None and not call.multicast and len(slots) > 1:
            for k in range(len(slots)):  # a perturbed run draws each arrival just before waking its receiver
                self.arrived(call, slots[k:k + 1], at_s[k:k + 1])
            return
        if transport.order is None:
            arrival = at_s
        else:
            arrival = np.array([transport._arrive(call.sent_s, a) for a in at_s.tolist()])
        n = len(call.members)
        trace = transport.trace
        trace.set_arrivals((call.firsts[:, None] + slots[None, :]).reshape(-1), np.tile(arrival, n))
        if call.multicast:
            trace.set_arrivals((call.multicast_first + slots[:, None] * n + np.arange(n)).reshape(-1),
                               np.repeat(arrival, n))
            call.got += len(slots)
            np.maximum(call.last, arrival.max(), out=call.last)
            woken = range(n) if call.got[0] == n else ()
        else:
            trace.set_arrivals(call.multicast_first + slots, arrival)
            call.got[slots] += 1
            call.last[slots] = np.maximum(call.last[slots], arrival)
            woken = slots.tolist()
        self._arrived(call, woken, len(slots))


class _Sums:
    """Where the network reports that some of a table call's sums have reached their receivers."""

    __slots__ = ("call", "rows")

    def __init__(self, rows: SwitchRows, call: _RowCall) -> None:
        self.rows, self.call = rows, call

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        self.rows.arrived(self.call, np.asarray(slots), np.asarray(arrivals_s, np.float64))
