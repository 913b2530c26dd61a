"""`Port`: one device's access to the network and its memory during one collective call.

A protocol sends and receives through its port: single messages (`send` / `recv`), whole rows of an
all-pairs exchange (`send_split`, `send_copies`, `send_each` / `recv_into`, `recv_column`, `recv_each`),
ragged slices (`send_slices` / `recv_slices`), a permutation's pairs (`send_pair` / `recv_pair`) and sums
reduced in a switch. The transport behind it (`sim.engine._transport`) records and carries them.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from sim._simpy import fire_after as _fire
from sim.engine._pairs import PairTable, pairs_apply
from sim.engine._slices import receive_slices
from sim.engine._transport import Message, Transport, _Channel
from sim.memory._memory import LocalMemory
from sim.network._mesh import Group
from sim.record._columns import Same

if TYPE_CHECKING:
    from sim.engine._options import RunOptions
    from sim.engine._rendezvous import Collective, MeetingView
    from sim.engine._switch import Fold
    from sim.network._mesh import Mesh

_PAIRS = ("sim.engine._pairs", "table")  # the meeting's key of its PairTable


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
        """Post `payload` (a C-contiguous array) to device `dst`; it arrives after the network's delay. A tag
        names one message per sender in a call: a second message to `dst` with the tag of one not yet
        received there is a ProtocolError (it would replace it), as is a second receive of one tag while the
        first still waits.

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

    def reduce_row_in_switch(self, flat: np.ndarray, bounds: np.ndarray, multicast: bool, fold: Fold,
                             **detail) -> None:
        """`reduce_in_switch` of shards `flat[bounds[j]:bounds[j + 1]]` (one per member, `flat` C-contiguous),
        shard j owned by member j and received by every member (`multicast`) or by member j alone, posted as
        one table (`sim.engine._switch_rows`: the same trace, sums and times); receivers take their sums with
        `recv_reduced_row`."""
        if not flat.flags.c_contiguous:
            raise AssertionError("payloads must be packed (C-contiguous) before sending")
        self.transport.switch.rows.contribute(self, flat, bounds, multicast, fold, detail)

    def recv_reduced_row(self) -> Generator:
        """The sums of this call's `reduce_row_in_switch` this member receives, once the last has arrived:
        every shard's, flat (multicast), or its own: `total = yield from port.recv_reduced_row()`."""
        yield self.transport.switch.rows.expect(self)
        return self.transport.switch.rows.take(self)

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
