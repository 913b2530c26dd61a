"""What a reducing switch holds of each call, whichever way its members post (shard by shard,
`sim.engine._switch`, or as tables, `sim.engine._switch_rows`): the members' rows of terms until the last is
in, the ports that sent them, the receivers waiting for their sums and how many sums are still on the way.

The shape of a call is the same both ways: each member's row is held and counted in flight on its port;
the last row sends every sum on; a receiver's `expect` fires when its last sum has arrived (at once if it
has already); when every sum has arrived, every contributor's row has too, at the latest arrival.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import simpy

from sim._simpy import fire_after as _fire

if TYPE_CHECKING:
    from sim.engine._port import Port
    from sim.engine._transport import Transport

Fold = Callable[[list[np.ndarray]], np.ndarray]  # the sum of terms given in group order


class HeldCall:
    """One call's rows (by group index) until the last is in, the ports that sent them, `pending` sums not
    arrived yet and the events of receivers waiting for theirs (by the key `key` gives). A form of call says
    what a receiver's key is, when it has all its sums, when the last of them arrived, and the latest
    arrival of all."""

    def __init__(self, members: tuple[int, ...], fold: Fold, pending: int) -> None:
        self.members, self.fold, self.pending = members, fold, pending
        self.rows: dict[int, Any] = {}
        self.ports: list[Port] = []
        self.waiting: dict[int, simpy.Event] = {}

    def key(self, port: Port) -> int:
        raise NotImplementedError

    def complete(self, key: int) -> bool:
        raise NotImplementedError

    def last_s(self, key: int) -> float:
        raise NotImplementedError

    def latest_s(self) -> float:
        raise NotImplementedError

    def held_rows(self) -> list:
        """Every member's row, in group order, let go."""
        rows, self.rows = [self.rows[i] for i in range(len(self.members))], {}
        return rows


Call = TypeVar("Call", bound=HeldCall)


class SwitchCalls(Generic[Call]):
    """The calls of one form a reducing switch is doing, by call (exchange)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._calls: dict[int, Call] = {}

    def _call(self, port: Port, make: Callable[[], Call]) -> Call:
        """The call `port` takes part in, made by `make` when it is the first member in."""
        call = self._calls.get(port.exchange)
        if call is None:
            call = self._calls[port.exchange] = make()
        return call

    def _hold(self, port: Port, call: Call, row: Any) -> bool:
        """Hold member `port`'s row (in flight on its port until its last sum has arrived); whether every
        member's row is in."""
        call.rows[port.group.index] = row
        call.ports.append(port)
        port.in_flight += 1
        return len(call.rows) == len(call.members)

    def expect(self, port: Port) -> simpy.Event:
        """An event that fires when every sum member `port.device` receives in this call has arrived (after
        its own contribution)."""
        call = self._calls[port.exchange]
        env, key = self.transport.env, call.key(port)
        event = env.event()
        if call.complete(key):
            _fire(env, event, None, call.last_s(key) - env.now)
        else:
            call.waiting[key] = event
        return event

    def _arrived(self, call: Call, receivers: Iterable[int], sums: int) -> None:
        """`sums` sums arrived, for `receivers` (by key, in the order they are woken): wake each that waits
        and has all of its sums; when none is left on the way, every contributor's row has arrived."""
        env, waiting = self.transport.env, call.waiting
        for key in receivers:
            if key in waiting and call.complete(key):
                _fire(env, waiting.pop(key), None, call.last_s(key) - env.now)
        call.pending -= sums
        if not call.pending:
            latest = call.latest_s()
            for port in call.ports:
                port.arrived(1, latest)
