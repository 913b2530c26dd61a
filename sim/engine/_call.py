"""`Calls`: the life of every collective call of one run, in one place.

A device arrives at the rendezvous and waits until its group has met; its part of the protocol then runs
through a `Port` (its transport, its memory, a view of the meeting); the engine waits until the device's
messages have arrived (payloads are views of its memory) and records the call (`CallRecord`). A failure
inside a protocol is noted with the device and the call, and ends the run.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

import simpy

from sim._errors import MeshError
from sim.engine._driver import FAILED
from sim.engine._options import RunOptions
from sim.engine._port import Port
from sim.engine._rendezvous import Collective, Rendezvous
from sim.engine._together import Gathering
from sim.engine._transport import Transport
from sim.memory._memory import LocalMemory
from sim.record._trace import CallRecord

if TYPE_CHECKING:
    from sim.engine._driver import DeviceProgram


_ASKED = object()  # no algorithm resolved for the call: the one its parameters ask for


class Calls:
    """Runs each device's part of each collective call and records it in `records` (in the order the parts
    ended); `fail(error)` ends the run."""

    def __init__(self, env: simpy.Environment, options: RunOptions, memories: Sequence[LocalMemory],
                 rendezvous: Rendezvous, transport: Transport, fail: Callable[[BaseException], None]) -> None:
        self.env = env
        self.options = options
        self.memories = memories
        self.rendezvous = rendezvous
        self.transport = transport
        self.fail = fail
        self.records: list[CallRecord] = []
        self._numbers: dict[tuple[int, ...], int] = {}  # each group's members, numbered in order of first call
        self._by_id: dict[int, tuple[tuple[int, ...], int]] = {}  # the same by id(members), the tuple kept alive

    def _number(self, members: tuple[int, ...]) -> int:
        """The number of the group `members` (equal tuples, equal numbers), found without hashing a tuple
        already seen (the members of a group share one)."""
        entry = self._by_id.get(id(members))
        if entry is not None and entry[0] is members:
            return entry[1]
        number = self._numbers.setdefault(members, len(self._numbers))
        self._by_id[id(members)] = (members, number)
        return number

    def run(self, program: DeviceProgram, collective: Collective) -> Generator:
        """The device's part of `collective`, in simulated time; its result."""
        group = collective.group
        members = group.members
        entry = self._by_id.get(id(members))  # `_number`, looked up here for the group seen before
        number = entry[1] if entry is not None and entry[0] is members else self._number(members)
        calls = program.calls
        call = calls.get(number, 0)
        calls[number] = call + 1
        program.wait_in(collective.name, call, members)
        label = program.label()  # faces: where the program made the call
        env = self.env
        enter_s = float(env.now)
        try:
            meeting = self.rendezvous.arrive(program.device, call, collective, number)
            event = meeting.event
            if collective.together is not None and meeting.count == len(members):
                event = self._joint(meeting, collective, call) or event
            joint = yield event
            if joint is None:
                met_s = float(env.now)
                result = yield from self._own_part(program.device, collective, call, meeting)
            else:  # the call ran as one (`sim.engine._together`): this member's part is done but for its wait
                met_s = joint.met_s
                result, arrived = joint.part(group.index)
                if arrived is not None:
                    yield arrived
            # the algorithm a protocol resolved once for the call ('auto' picks), else the one asked for
            algorithm = meeting.shared.get("algorithm", _ASKED)
            if algorithm is _ASKED:
                algorithm = dict(collective.params).get("algorithm")
            self.records.append(CallRecord(program.device, collective.name, call, members, enter_s, met_s,
                                           float(env.now), algorithm, label))
        except Exception as error:
            if not isinstance(error, MeshError):  # a failure inside a protocol: say where it happened
                error.add_note(f"raised on device {program.device} {program.activity}")
            program.activity = FAILED
            self.fail(error)
            yield self.env.event()  # never fires: the run ends with the error
        return result

    def _own_part(self, device: int, collective: Collective, call: int, meeting: Any) -> Generator:
        """The device's own part of the protocol, through its `Port`, until its messages have arrived."""
        port = Port(self.transport, self.memories[device], device, collective, call, meeting.view, self.options)
        result = yield from collective.protocol(port, collective.args)
        arrived = port.all_arrived()
        if arrived is not None:
            yield arrived
        return result

    def _joint(self, meeting: Any, collective: Collective, call: int) -> simpy.Event | None:
        """When the call's last member has arrived and its collective runs it as one (`Collective.together`):
        the event the last member waits on instead of the meeting's, the meeting's event then starting the
        joint call with every member's process callback; None when the members run their own parts."""
        assert collective.together is not None
        if len(meeting.event.callbacks) != len(meeting.order) - 1:  # a member not yet waiting (a lane starting)
            return None
        joint = collective.together(Gathering(self, meeting, collective, call))
        if joint is None:
            return None
        earlier = meeting.event.callbacks  # the processes of the members that arrived before, in that order
        last = self.env.event()  # never fires: the last member's process only leaves its callback here
        order = meeting.order

        def start(_: Any) -> None:
            resumes: list[Any] = [None] * len(order)
            for index, resume in zip(order, earlier + last.callbacks):
                resumes[index] = resume
            try:
                joint.start(resumes)
            except Exception as error:
                if not isinstance(error, MeshError):
                    error.add_note(f"raised in {collective.name} (call #{call}) run for its whole group")
                self.fail(error)

        meeting.event.callbacks = [start]
        return last
