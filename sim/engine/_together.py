"""Calls run as one: when every member of a call would do the same thing, its members' parts run together.

A collective may offer to run a call for its whole group at once (`Collective.together`). When the last
member arrives, the offer is asked (`Gathering`: every member's arguments, memories, the transport); it
declines (None) or gives a `Joint`. A joint call starts where the members' protocols would have started
(when the meeting's event is processed), does the work of every member at once (views, allocations, one
table of messages), and resumes each member's process at the event that would have ended its part, with
the same trace, the same times and the same order of events as the members' own protocols: a member's
process then takes its result (`Joint.part`), waits for what it still waits on, and records the call.

`Pairs` is the joint call in which every member sends one message and receives one (a permutation of the
group, as a ring shift of ppermute): for example, a shift by one over 4 devices posts 0->1, 1->2, 2->3, 3->0
as one table and, when all four arrive at one time, resumes the four members by one event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from sim._simpy import fire_after as _fire
from sim.engine._pairs import one_table

if TYPE_CHECKING:
    import simpy

    from sim.engine._call import Calls
    from sim.engine._port import Port
    from sim.engine._rendezvous import Collective
    from sim.memory._memory import LocalMemory
    from sim.network._mesh import Group

Resume = Callable[[Any], None]  # a member process's callback, as SimPy calls it with the event


class Joint:
    """A call run for its whole group at once: `start(resumes)` at the meeting, with each member's process
    callback by group index; `part(index)` in member `index`'s process when it resumes: its result and the
    event it still waits on (None when its part ends now)."""

    met_s: float = 0.0

    def start(self, resumes: list[Resume]) -> None:  # pragma: no cover - the interface
        raise NotImplementedError

    def part(self, index: int) -> tuple[Any, simpy.Event | None]:  # pragma: no cover - the interface
        raise NotImplementedError


class Gathering:
    """What a collective's offer to run a call as one sees once every member has arrived: the members'
    arguments by group index, their memories, the transport, the run's options, and one `Port` (of the
    first member) for what the call works out once (`Port.once`, the algorithm)."""

    __slots__ = ("call", "calls", "collective", "meeting", "order")

    def __init__(self, calls: Calls, meeting: Any, collective: Collective, call: int) -> None:
        self.calls, self.meeting, self.collective, self.call = calls, meeting, collective, call
        self.order: list[int] = meeting.order  # group indices in the order the members arrived

    @property
    def args(self) -> list[Any]:
        return self.meeting.args

    @property
    def group(self) -> Group:
        return self.collective.group

    def memory(self, index: int) -> LocalMemory:
        """The memory of the member at group index `index`."""
        return self.calls.memories[self.collective.group.members[index]]

    def port(self) -> Port:
        """A port of the call's first member: what the members work out once goes through it."""
        from sim.engine._port import Port

        calls, group = self.calls, self.collective.group
        return Port(calls.transport, calls.memories[group.members[0]], group.members[0], self.collective,
                    self.call, self.meeting.view, calls.options)

    def one_table(self) -> bool:
        """Whether a call's messages may go as one table with the same trace and times as one by one: issuing
        is free, and the run is not perturbed, sanitized or exploring arrival orders (`Port.pairs_apply`)."""
        return one_table(self.calls.transport, self.calls.options)


class Pairs(Joint):
    """A call whose member `order[k]` (k-th to arrive) sends one message to member `to[k]`, each member
    receiving one: the messages, trace and times of `Port.send_pair` / `Port.recv_pair` in each member's
    protocol. At the start, `fill()` gives the payloads (C-contiguous, in arrival order) and the results by
    member (row-major, each of its payload's shape), into which the receivers write their messages.

    `details` give each message's trace detail, in arrival order."""

    __slots__ = ("arrival", "calls", "details", "fill", "first", "gathering", "outs", "payloads", "reported",
                 "resumes", "sender", "slot_to", "to", "waiting")

    def __init__(self, gathering: Gathering, to: Sequence[int],
                 fill: Callable[[], tuple[list[np.ndarray], list[np.ndarray]]], details: dict[str, list]) -> None:
        self.gathering, self.calls = gathering, gathering.calls
        self.to, self.fill = list(to), fill
        self.payloads: list[np.ndarray] = []
        self.outs: list[np.ndarray] = []
        self.sender = gathering.order  # slot -> sending member
        self.slot_to = [0] * len(self.to)  # receiving member -> its message's slot
        for slot, member in enumerate(self.to):
            self.slot_to[member] = slot
        self.details = details
        n = len(self.to)
        self.reported = [False] * n  # by member: whether its own message's arrival is known
        self.arrival = [0.0] * n  # by member: its own message's arrival
        self.waiting: list[simpy.Event | None] = [None] * n  # by member: the event it waits on for that
        self.resumes: list[Resume] = []
        self.first = -1

    def start(self, resumes: list[Resume]) -> None:
        """Post every member's message as one table, now."""
        calls = self.calls
        transport, env = calls.transport, calls.env
        self.met_s, self.resumes = float(env.now), resumes
        self.payloads, self.outs = self.fill()
        members = self.gathering.group.members
        srcs = [members[i] for i in self.sender]
        dsts = [members[i] for i in self.to]
        sizes = [payload.nbytes for payload in self.payloads]
        now = env.now
        self.first = transport.trace.append_batch(srcs, dsts, sizes, now, now, None, self.gathering.collective.name,
                                                  self.gathering.call, self.details)
        transport._posted += len(sizes)
        wire = transport.wire(sizes)
        transport.links.send_table(np.asarray(srcs, np.int64), np.asarray(dsts, np.int64),
                                   np.asarray(wire, np.float64), self)

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        """The network's report: each receiver resumes at its message's arrival (all by one event when every
        message arrives now at one time); each sender learns its message's arrival."""
        transport, env = self.calls.transport, self.calls.env
        transport.trace.set_arrivals(self.first + slots, arrivals_s)
        order, arrivals = slots.tolist(), arrivals_s.tolist()
        to, sender, resumes = self.to, self.sender, self.resumes
        if len(order) == len(to) and arrivals_s.min() == arrivals_s.max():
            self.reported = [True] * len(to)
            self.arrival = [arrivals[0]] * len(to)
            event = env.event()
            event.callbacks = [resumes[to[slot]] for slot in order]
            _fire(env, event, self, arrivals[0] - env.now)
            return
        for slot, arrival in zip(order, arrivals):
            event = env.event()
            event.callbacks.append(resumes[to[slot]])
            _fire(env, event, self, arrival - env.now)
            member = sender[slot]
            self.reported[member], self.arrival[member] = True, arrival
            if self.waiting[member] is not None:
                transport._drained.append(_Drain(self, member))

    def part(self, index: int) -> tuple[Any, simpy.Event | None]:
        """Member `index`'s result, written from its message now, and the event that ends its part: its own
        message's arrival, when that is later or not known yet (as `Port.all_arrived`)."""
        out = self.outs[index]
        out[...] = self.payloads[self.slot_to[index]]
        if self.reported[index]:
            last, env = self.arrival[index], self.calls.env
            now = env.now
            return out, (env.timeout(last - now) if last > now else None)
        event = self.waiting[index] = self.calls.env.event()
        return out, event


class _Drain:
    """A member waiting for its own message's arrival, woken as `Port.drain` wakes a sender."""

    __slots__ = ("index", "joint")

    def __init__(self, joint: Pairs, index: int) -> None:
        self.joint, self.index = joint, index

    def drain(self) -> None:
        env = self.joint.calls.env
        _fire(env, self.joint.waiting[self.index], None, max(self.joint.arrival[self.index], 0.0) - env.now)
