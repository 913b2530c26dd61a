"""`Steps`: the step loop of a multi-step algorithm run once for every member of a call.

In a ring (or any algorithm whose members each take the same number of steps, sending `ways` messages
and then receiving `ways` messages, one after another, in each), the per-member protocol costs a SimPy
event, a mailbox entry and a generator switch per message. `Steps` runs the loop for all members at once
instead: the messages every member posts at one instant go to the trace and the network as one table
(`Trace.append_batch`, `LinkState.send_table`), the network reports each table's arrivals together, and
the members woken at one instant are handled by one event. Every message still carries its sender's bytes
to its receiver, and the network times it.

Nothing observable changes: a member posts its step s + 1 messages exactly when the member-by-member loop
would (when the last message of its step s has arrived), tables are posted in the order the members' own
posts would have been, and the events that wake members stand where the members' own receives would stand
in the clock's queue (one event per run of wakes at one instant scheduled with nothing between them; a
member's last receive gets an event of its own, since the member's program goes on from there). The
trace, the times and the bytes are those of the per-member loop; `steps_fit(port)` says when this holds: a
run without perturbed arrivals (their random draws follow the per-message order) and without issue costs
(`Costs.per_message_s`, `launch_s`: they delay each message on its own).

A loop made with `timed=True` (its `sizes` and `details` are functions of the message alone) posts the first
steps of the members that join in one event as one table, right after that event (the members of a call meet
in one event, so all of them at once, where they join straight away), and may instead
run in closed form when its last member joins (`sim.engine._closed`, `sim.engine._schedule`): where its
members drift apart in time and it has the clock and its links to itself, every time is worked out at once,
the same as here, and its records, moves and members' ends are made together.

The call's algorithm says once, for all members, what its messages carry: `sizes(senders, steps, ways)`
their bytes, `details(positions, steps, ways)` their trace details, and `move(receivers, senders, steps,
ways)` writes what each receiver gets from its sender's memory, when the message arrives (at once: no
timed step). A member joins with `join(port, to, position, state)`, a generator that returns when the
member's part is over: at step s it sends message w (w < ways) to group index `to[s][w]`, then receives
message w of step s, for w in order, from whoever sends it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

import numpy as np
import simpy

from sim._simpy import URGENT, WakeRuns, fire, fire_after
from sim.engine import _closed, _schedule

if TYPE_CHECKING:
    from sim.engine._port import Port
    from sim.engine._transport import Transport

__all__ = ["Steps", "steps_fit"]

_FEW = 8  # tables of at most this many messages are recorded message by message


def steps_fit(port: Port) -> bool:
    """Whether a call on `port` may run its steps through `Steps` (see the module docstring)."""
    transport = port.transport
    costs = transport.costs
    return transport.order is None and not (costs.per_message_s or costs.launch_s)


class Steps:
    """The loop of `count` steps of `ways` messages each, of one call's members (see the module docstring
    for `sizes`, `details`, `move`). Members are numbered by group index; `positions[j]` and `states[j]` are
    what member j joined with (its place in its algorithm's order, and whatever `move` reads of it).
    Message m = s * ways + w is a member's w-th of step s, sent and received in that order."""

    def __init__(self, port: Port, count: int, sizes: Callable, details: Callable, move: Callable,
                 ways: int = 1, timed: bool = False, routes: np.ndarray | None = None) -> None:
        self.transport: Transport = port.transport
        self.env: simpy.Environment = port.transport.env
        self.collective, self.call = port.collective.name, port.call
        self.members = np.asarray(port.group.members, np.int64)
        self.count, self.ways = count, ways
        self.sizes, self.details, self.move = sizes, details, move
        size, total = len(self.members), count * ways
        self.to = np.zeros((total, size), np.int64)  # to[m, j]: whom member j sends its message m to
        self.sender = np.zeros((total, size), np.int64)  # sender[m, r]: who sends member r its message m
        self.as_received: np.ndarray | None = None  # [m, j]: where member j's message m comes at its receiver
        # `routes[j, s]` (or `[j, m]`): whom member j sends at step s (message m), known for every member when
        # the loop is made: set here at once, and a member's `to` at its join is then not read again
        self.routed = routes is not None
        if routes is not None:
            self.to[:] = np.broadcast_to(np.asarray(routes, np.int64).reshape(size, count, -1),
                                         (size, count, ways)).reshape(size, total).T
            self.sender[np.arange(total)[:, None], self.to] = np.arange(size)[None, :]
        self.arrivals = np.full((total, size), np.nan)  # arrivals[m, r]: when it arrived, once reported
        self.positions = np.zeros(size, np.int64)
        self.states: list = [None] * size
        self.ports: list[Port | None] = [None] * size
        self.done: list[simpy.Event | None] = [None] * size
        self.posted = np.zeros(size, np.int64)  # steps each member has posted
        self.cursor = np.zeros(size, np.int64)  # the message each member receives next (or is receiving)
        self.waiting = np.full(size, -1, np.int64)  # the message each member waits for, -1 if none
        self.in_flight = np.zeros(size, np.int64)  # messages not yet arrived, per sender (until released)
        self.last = np.zeros(size)  # the latest arrival of each sender's messages (until released)
        self.released = np.zeros(size, bool)
        self.ends = np.full(size, np.nan)  # when each member's last message arrives (its `done` event's time)
        self.moved = np.zeros(size, bool)  # whether each member's last message is written
        # `timed`: `sizes` and `details` read nothing that changes, so the loop may run in closed form
        self.timed = timed and _schedule.ENABLED
        self.wakes = WakeRuns(self.env, self._step, self.timed)  # wake events batched by instant
        self.first_rows = np.full((ways, size), -1, np.int64)  # the records of each member's step-0 messages
        self.joined: list[int] = []  # members in the order they joined
        self.join_s = np.zeros(size)  # when each member joined
        self.stepped = False  # whether a member has taken a message yet
        self.deferred: list[int] = []  # `timed`: members joined whose first step is not posted yet
        self.flush: simpy.Event | None = None  # posts them, right after the event that made them join

    def join(self, port: Port, to: list, position: int, state: object, received_as: object = None) -> Generator:
        """Member `port.group.index`'s part (`to[s]`: one group index per way, or one for all ways): post
        its first step, wait for its last message; return when done. `received_as[m]` is where among its
        receiver's messages this member's message m comes (by default m itself: every member's message m
        of a step goes to a different member, who takes it as its own m-th)."""
        j = port.group.index
        self.ports[j], self.positions[j], self.states[j] = port, position, state
        if not self.routed:  # else every member's receivers were set when the loop was made
            self._route(j, to, received_as)
        if self.count == 0:
            self.released[j] = True
            self._end_if_over()
            return
        self.done[j] = self.env.event()
        members = np.array([j])
        if self.timed:  # posted with the others that join in the same event (`_flush`)
            self._defer(j)
        else:
            self._post(members)
        self._expect(members, np.zeros(1, np.int64))
        self.joined.append(j)
        self.join_s[j] = self.env.now
        if self.timed and len(self.joined) == len(self.members):
            self._flush()
            _closed.run(self)
        yield self.done[j]
        self._finish(j)

    def _route(self, j: int, to: list, received_as: object) -> None:
        """Whom member j sends each message to (`join`'s `to`), and where it comes among its receiver's."""
        if isinstance(to, list) and to and to.count(to[0]) == len(to):  # one row for every step
            to = np.broadcast_to(np.asarray(to[0], np.int64).reshape(1, -1), (self.count, self.ways)).reshape(-1)
        else:
            to = np.broadcast_to(np.asarray(to, np.int64).reshape(self.count, -1), (self.count, self.ways)).reshape(-1)
        self.to[:, j] = to
        if received_as is None:
            self.sender[np.arange(len(to)), to] = j
        else:
            if self.as_received is None:
                self.as_received = np.zeros(self.to.shape, np.int64)
            self.as_received[:, j] = received_as
            self.sender[self.as_received[:, j], to] = j

    def _defer(self, j: int) -> None:
        """Member j's first step waits to be posted with those of the members joining in the same event: the
        members of a call meet in one event, whose callbacks resume them one after another, so their joins
        follow each other with nothing between them. The first to wait schedules `_flush` at this instant
        with urgent priority, so that it runs when that event's callbacks are done, before any normal event
        of the instant: it posts them as one table, at the instant and in the order their own posts would
        have been made; the last member's join posts them itself (and the flush then does nothing)."""
        if not self.deferred:
            self.flush = self.env.event()
            self.flush.callbacks.append(lambda _: self._flush())
            fire(self.env, self.flush, None, 0, URGENT)
        self.deferred.append(j)

    def _flush(self) -> None:
        """Post the first step of every member still waiting, in the order they joined, as one table."""
        if self.deferred:
            waiting, self.deferred = np.array(self.deferred, np.int64), []
            if self.flush.callbacks:  # type: ignore[union-attr]  # made by the first `_defer`
                self.flush.callbacks.clear()  # posted now: the scheduled flush does nothing
            self._post(waiting)

    def _post(self, senders: np.ndarray) -> None:
        """Post each sender's next step's messages, in order, as one table."""
        self.in_flight[senders] += self.ways  # each sender appears once here
        if self.ways == 1:
            steps = self.posted[senders]
            self.posted[senders] += 1
            ways = np.zeros(len(senders), np.int64)
            messages = steps
        else:
            steps = np.repeat(self.posted[senders], self.ways)
            self.posted[senders] += 1
            senders = np.repeat(senders, self.ways)
            ways = np.tile(np.arange(self.ways), len(senders) // self.ways)
            messages = steps * self.ways + ways
        receivers = self.to[messages, senders]
        sizes = np.asarray(self.sizes(senders, steps, ways), np.int64)
        transport, count = self.transport, len(senders)
        srcs, dsts = self.members[senders], self.members[receivers]
        details = self.details(self.positions[senders], steps, ways)
        first = self._record(srcs, dsts, sizes, details)
        transport._posted += count
        wire = transport.wire(sizes)
        places = messages if self.as_received is None else self.as_received[messages, senders]
        if self.timed:
            self.first_rows[messages[steps == 0], senders[steps == 0]] = first + np.flatnonzero(steps == 0)
        table = _Table(self, first, senders, receivers, places)
        transport.links.send_table(srcs, dsts, np.asarray(wire, np.float64), table)

    def _record(self, srcs: np.ndarray, dsts: np.ndarray, sizes: np.ndarray, details: dict[str, list]) -> int:
        """Record the messages being posted now; the index of the first. A few go in one by one, as their
        own sends would record them (a table each would cost a chunk of columns)."""
        trace, now, count = self.transport.trace, self.env.now, len(srcs)
        if count > _FEW:
            return trace.append_batch(srcs, dsts.tolist(), sizes.tolist(), now, [now] * count, None,  # type: ignore[arg-type]
                                      self.collective, self.call, details)
        rows = zip(srcs.tolist(), dsts.tolist(), sizes.tolist(), *details.values())
        indices = [trace.append(src, dst, size, now, now, now, self.collective, self.call, dict(zip(details, values)))
                   for src, dst, size, *values in rows]
        return indices[0]

    def _expect(self, receivers: np.ndarray, messages: np.ndarray) -> None:
        """Each receiver waits for its message; those already reported are woken, in order."""
        self.cursor[receivers] = messages
        arrivals = self.arrivals[messages, receivers]
        known = ~np.isnan(arrivals)
        self.waiting[receivers[~known]] = messages[~known]
        if known.any():
            self._wake(receivers[known], messages[known], arrivals[known])

    def arrived(self, table: _Table, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        """The network's report: messages `slots` of `table` arrived at `arrivals_s`."""
        if len(slots) > 1 and np.any(slots[1:] < slots[:-1]):  # in posting order, as one message each would be
            order = np.argsort(slots, kind="stable")
            slots, arrivals_s = slots[order], arrivals_s[order]
        self.transport.trace.set_arrivals(table.first + slots, arrivals_s)
        senders, receivers, messages = table.senders[slots], table.receivers[slots], table.messages[slots]
        if self.ways == 1:  # one message per sender in a table: no sender twice
            self.in_flight[senders] -= 1
            self.last[senders] = np.maximum(self.last[senders], arrivals_s)
        else:
            np.subtract.at(self.in_flight, senders, 1)
            np.maximum.at(self.last, senders, arrivals_s)
        released = self.released[senders]
        if released.any():
            for j, a in zip(senders[released].tolist(), arrivals_s[released].tolist()):
                self.ports[j].arrived(1, a)  # type: ignore[union-attr]
        self.arrivals[messages, receivers] = arrivals_s
        woken = self.waiting[receivers] == messages
        if woken.any():
            self.waiting[receivers[woken]] = -1
            self._wake(receivers[woken], messages[woken], arrivals_s[woken])
        if released.any():
            self._end_if_over()

    def _wake(self, receivers: np.ndarray, messages: np.ndarray, arrivals_s: np.ndarray) -> None:
        """Schedule the receivers' wakes in order. Wakes at one instant scheduled one after another, with
        nothing else scheduled between them, share one event (the clock would run them in a row); a
        member's last receive gets an event of its own (its program goes on from there)."""
        env, now = self.env, self.env.now
        delays = arrivals_s - now
        delays[~(delays > 0)] = 0
        final = messages == self.count * self.ways - 1
        if not final.any() and np.all(delays == delays[0]):
            self.wakes.at(float(delays[0]), receivers)
            return
        for r, delay, last in zip(receivers.tolist(), delays.tolist(), final.tolist()):
            if last:
                fire_after(env, self.done[r], None, delay)  # type: ignore[arg-type]
                self.ends[r] = now + (delay if delay > 0 else 0)  # the clock's own sum
            else:
                self.wakes.at(delay, np.array([r]))

    def _step(self, run: list[np.ndarray]) -> None:
        """Members woken together: each writes what it received, posts its next step's messages when that
        was its step's last, and waits for its next message."""
        self.wakes.started(run)
        self.stepped = True
        receivers = run[0] if len(run) == 1 else np.concatenate(run)
        messages = self.cursor[receivers]
        self._move(receivers, messages)
        ends = messages % self.ways == self.ways - 1
        if ends.any():
            self._post(receivers[ends])
        self._expect(receivers, messages + 1)

    def _move(self, receivers: np.ndarray, messages: np.ndarray) -> None:
        self.move(receivers, self.sender[messages, receivers], messages // self.ways, messages % self.ways)

    def _finish(self, j: int) -> None:
        """Member j's last message arrived: write it and hand the member's accounts to its port. The last
        messages of every member whose part ends at this instant are written together (each member reads
        only its own buffers until its own part ends, and none of those messages' sources changes)."""
        if not self.moved[j]:
            ending = (self.ends == self.env.now) & ~self.moved
            ending[j] = True
            ending = np.flatnonzero(ending)
            self.moved[ending] = True
            self._move(ending, np.full(len(ending), self.count * self.ways - 1))
        port = self.ports[j]
        port.in_flight += int(self.in_flight[j])  # type: ignore[union-attr]
        port.last_arrival_s = max(port.last_arrival_s, float(self.last[j]))  # type: ignore[union-attr]
        self.released[j] = True
        self._end_if_over()

    def _end_if_over(self) -> None:
        """Once every member's part is over and every message has arrived, nothing more happens to the loop:
        it lets go of the members' ports, the algorithm's functions and its wakes. (The algorithm holds the
        loop and the loop its functions, the wakes hold `_step`, the call's meeting holds the algorithm and
        each port the meeting: cycles that would otherwise be left to the garbage collector, every call.)"""
        if self.released.all() and not self.in_flight.any():
            self.ports = []
            self.sizes = self.details = self.move = _over
            self.wakes = None  # type: ignore[assignment]


def _over(*_: object) -> None:
    raise RuntimeError("a Steps loop was used after every member's part was over")


class _Table:
    """Where the network reports the arrivals of one table of a `Steps` loop."""

    __slots__ = ("first", "messages", "receivers", "senders", "steps_of")

    def __init__(self, steps_of: Steps, first: int, senders: np.ndarray, receivers: np.ndarray,
                 messages: np.ndarray) -> None:
        self.steps_of, self.first = steps_of, first
        self.senders, self.receivers, self.messages = senders, receivers, messages

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        self.steps_of.arrived(self, slots, arrivals_s)
