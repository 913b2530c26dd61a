"""Programs of sends and receives run for every member of a call at once: the messages the members post at
one instant go out as one table, and the members woken at one instant are handled by one event.

`sim.engine.Steps` runs loops whose members all send, then receive, the same number of messages per step.
A tree (`collectives._tree`) does not: a member of a chain receives before it sends, a head waits on its
children in two trees, a leaf sends only. `Programs` runs any fixed program of each member instead: a list
of operations, in order, `Send(to, key, payload, detail)` (post a message now: `payload()` is called when
posting and returns the view the message carries, read when it arrives), `Receive(source, key, take)` (wait
for the message `key` from `source`; `take(payload)` when it arrives) and `Do(act)` (run `act()`).

Nothing observable changes against each member running its program with `Port.send` / `Port.recv`: a
member's sends are posted when it reaches them (at its join, or when the receive before them completes),
the tables in the order the members' own posts would go in; a receive completes at its message's arrival
or, if the message arrived before, when the member reaches it (at once), and its wake stands where the
member's own receive would stand in the clock's queue (wakes at one instant scheduled one after another,
nothing between them, share one event; a member's last receive gets an event of its own, since its program
goes on from there). The operations after the last receive run when the member's program resumes.
`sim.engine.steps_fit` says when this holds (no perturbed arrivals, no issue costs).

Worked example, a chain of 3 (group indices 0, 1, 2) adding one term each up to member 0: member 2's
program is [Send(1, "up", ...)], member 1's [Receive(2, "up", ...), Send(0, "up", ...)], member 0's
[Receive(1, "up", ...)]. Member 2's message goes out at its join; member 1 is woken at its arrival and
posts its own message in that event; member 0 is woken at the second arrival, its last receive, and goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

import sim
from sim._simpy import WakeRuns, fire_after

__all__ = ["Do", "Programs", "Receive", "Send"]

_FEW = 8  # tables of at most this many messages are recorded message by message


@dataclass(frozen=True)
class Send:
    """Post `payload()` to group index `to` as message `key`, with the trace detail `detail`."""

    to: int
    key: Hashable
    payload: Callable[[], np.ndarray]
    detail: dict


@dataclass(frozen=True)
class Receive:
    """Wait for message `key` from group index `source`; `take(payload)` when it arrives."""

    source: int
    key: Hashable
    take: Callable[[np.ndarray], None]


@dataclass(frozen=True)
class Do:
    """Run `act()` when the program reaches it."""

    act: Callable[[], None]


class Programs:
    """Every member's program of one call (see the module docstring), run as tables."""

    def __init__(self, port: sim.Port) -> None:
        self.transport = port.transport
        self.env = port.transport.env  # the run's SimPy clock
        self.collective, self.call = port.collective.name, port.call
        self.members = port.group.members
        size = len(self.members)
        self.programs: list[list] = [[] for _ in range(size)]
        self.pc = [0] * size  # the operation each member is at
        self.last = [-1] * size  # the index of each member's last receive
        self.ports: list[Any] = [None] * size
        self.done: list[Any] = [None] * size  # the event each member waits on for its last receive
        self.inbox: dict[tuple, tuple[float, np.ndarray]] = {}  # (receiver, sender, key) -> (arrival, payload)
        self.waiting: set[tuple] = set()  # (receiver, sender, key) a member waits for
        self.in_flight = [0] * size  # messages not yet arrived, per sender (until released)
        self.latest = [0.0] * size  # the latest arrival of each sender's messages (until released)
        self.released = [False] * size
        self.wakes = WakeRuns(self.env, self._step)  # wake events batched by instant
        self.staying = size  # members whose part has not returned yet
        self.flying = 0  # messages posted here not yet arrived

    def leave(self) -> None:
        """A member's part returned. Once every member's has and every message has arrived, nothing more
        happens to the call: its ports, programs and wakes are let go (the wakes hold `_step`, the call's
        meeting holds this and each port the meeting: cycles otherwise left to the garbage collector)."""
        self.staying -= 1
        self._end_if_over()

    def _end_if_over(self) -> None:
        if self.staying == 0 and self.flying == 0:
            self.ports, self.programs = [], []
            self.wakes = None  # type: ignore[assignment]

    def join(self, port: sim.Port, program: list) -> Generator:
        """Member `port.group.index` runs `program`; returns when its last operation has run."""
        j = port.group.index
        self.ports[j], self.programs[j] = port, program
        if self.start(j, self.env.event()):
            yield self.done[j]
            self.finish(j)
        self.leave()

    def start(self, j: int, done: Any) -> bool:
        """Member j (its port and program set) runs its program up to its first receive, its sends posted,
        then waits for that receive's message; `done` fires at its last receive. False (and the member
        released) where it receives nothing."""
        program = self.programs[j]
        self.last[j] = max((i for i, op in enumerate(program) if isinstance(op, Receive)), default=-1)
        posts: list[tuple] = []
        self._advance(j, posts)
        self._post(posts)
        if self.last[j] < 0:
            self.release(j)
            return False
        self.done[j] = done
        self._expect([j])
        return True

    def _advance(self, j: int, posts: list) -> None:
        """Run member j's operations up to its next receive (or its end), its sends collected in `posts`."""
        program, pc = self.programs[j], self.pc[j]
        while pc < len(program) and not isinstance(program[pc], Receive):
            op = program[pc]
            if isinstance(op, Send):
                posts.append((j, op.to, op.key, op.payload(), op.detail))
            else:
                op.act()
            pc += 1
        self.pc[j] = pc

    def _post(self, posts: list) -> None:
        """Post `posts` (sender, receiver, key, payload, detail), in order, as one table."""
        if not posts:
            return
        transport, count, now = self.transport, len(posts), self.env.now
        srcs = [self.members[j] for j, *_ in posts]
        dsts = [self.members[r] for _, r, *_ in posts]
        sizes = [payload.nbytes for *_, payload, _ in posts]
        details = [detail for *_, detail in posts]
        trace = transport.trace
        if count > _FEW:
            columns = {key: [detail[key] for detail in details] for key in details[0]}
            first = trace.append_batch(np.asarray(srcs, np.int64), dsts, sizes, now, [now] * count, None,
                                       self.collective, self.call, columns)
        else:
            indices = [trace.append(src, dst, size, now, now, now, self.collective, self.call, detail)
                       for src, dst, size, detail in zip(srcs, dsts, sizes, details)]
            first = indices[0]
        transport._posted += count
        self.flying += count
        for j, *_ in posts:
            self.in_flight[j] += 1
        wire = transport.wire(sizes)
        transport.links.send_table(np.asarray(srcs, np.int64), np.asarray(dsts, np.int64),
                                   np.asarray(wire, np.float64), _Table(self, first, posts))

    def arrived(self, table: _Table, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        """The network's report: messages `slots` of `table` arrived at `arrivals_s`."""
        if len(slots) > 1 and np.any(slots[1:] < slots[:-1]):  # in posting order, as one message each would be
            order = np.argsort(slots, kind="stable")
            slots, arrivals_s = slots[order], arrivals_s[order]
        self.transport.trace.set_arrivals(table.first + slots, arrivals_s)
        woken: list[tuple[int, float]] = []
        for slot, arrival in zip(slots.tolist(), arrivals_s.tolist()):
            j, r, key, payload, _ = table.posts[slot]
            if self.released[j]:
                self.ports[j].arrived(1, arrival)
            else:
                self.in_flight[j] -= 1
                self.latest[j] = max(self.latest[j], arrival)
            self.inbox[(r, j, key)] = (arrival, payload)
            if (r, j, key) in self.waiting:
                self.waiting.discard((r, j, key))
                woken.append((r, arrival))
        self.flying -= len(slots)
        if woken:
            self._wake(woken)
        self._end_if_over()

    def _expect(self, receivers: list[int]) -> None:
        """Each receiver waits for the message of its next receive; those already arrived are woken, in order."""
        woken = []
        for r in receivers:
            op = self.programs[r][self.pc[r]]
            found = self.inbox.get((r, op.source, op.key))
            if found is None:
                self.waiting.add((r, op.source, op.key))
            else:
                woken.append((r, found[0]))
        if woken:
            self._wake(woken)

    def _wake(self, woken: list[tuple[int, float]]) -> None:
        """Schedule the receivers' wakes in order (a member's last receive: its own event)."""
        now = self.env.now
        for r, arrival in woken:
            delay = arrival - now if arrival > now else 0.0
            if self.pc[r] == self.last[r]:
                fire_after(self.env, self.done[r], None, delay)  # type: ignore[arg-type]
            else:
                self.wakes.at(delay, r)

    def _step(self, run: list[int]) -> None:
        """Members woken together: each takes its message, runs on to its next receive (its sends posted as
        one table for all), and waits for that receive's message."""
        self.wakes.started(run)
        posts: list[tuple] = []
        for r in run:
            self._take(r)
        for r in run:
            self._advance(r, posts)
        self._post(posts)
        self._expect(run)

    def _take(self, r: int) -> None:
        """Member r's current receive: hand it its message."""
        op = self.programs[r][self.pc[r]]
        _, payload = self.inbox.pop((r, op.source, op.key))
        op.take(payload)
        self.pc[r] += 1

    def post_next(self, j: int) -> None:
        """Member j runs on from its operation `pc[j]` to its end, its sends posted as one table, and is
        released (its receives all taken)."""
        posts: list[tuple] = []
        self._advance(j, posts)
        self._post(posts)
        self.release(j)

    def finish(self, j: int) -> None:
        """Member j's last receive completed: take it, run the rest of its program, hand its accounts over."""
        self._take(j)
        self.post_next(j)

    def release(self, j: int) -> None:
        """Member j's program is over: its port takes over the accounts of its messages in flight."""
        port = self.ports[j]
        port.in_flight += self.in_flight[j]
        port.last_arrival_s = max(port.last_arrival_s, self.latest[j])
        self.released[j] = True


class _Table:
    """Where the network reports the arrivals of one table of a `Programs` run."""

    __slots__ = ("first", "posts", "programs")

    def __init__(self, programs: Programs, first: int, posts: list) -> None:
        self.programs, self.first, self.posts = programs, first, posts

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        self.programs.arrived(self, slots, arrivals_s)
