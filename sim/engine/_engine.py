"""`Simulation`: one run on a mesh, composed of a clock, a driver, a rendezvous and a transport.

- the clock is SimPy's (`env`); its event order makes every run deterministic;
- the driver (`sim.engine._driver`) runs each device program as a greenlet switched by a SimPy process;
- the rendezvous (`sim.engine._rendezvous`) starts a collective when its whole group has reached it;
- the transport (`sim.engine._transport`) carries messages between mailboxes over the network's links
  (`sim.network._flows.LinkState`: flows sharing links max-min fairly), and records them in the `Trace`.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Generator, Sequence
from typing import Any

import simpy

from sim._errors import InvalidArgumentError, MeshError, ProtocolError
from sim.engine._driver import DeviceProgram
from sim.engine._perturb import Perturbation
from sim.engine._rendezvous import Collective, Rendezvous, Waiting
from sim.engine._transport import Port, Transport
from sim.memory._memory import LocalMemory
from sim.network._flows import LinkState
from sim.network._mesh import Mesh
from sim.record._equations import Program
from sim.record._trace import CallRecord, Trace
from sim.record._violation import Violation


class Simulation:
    """One run on a mesh: a SimPy clock, a memory and a program record per device, the network state and
    the trace.

    `calls` records each device's part in each collective call (`CallRecord`: when it reached the call,
    when its group met, when its part ended), so a timeline can show what each device waited on.
    When `sanitize`, calls with broken rules record them in `violations` and run without the broken pieces
    where the collective can (see `sim.Violation`).

    A `perturbation` (`sim.Perturbation`) stretches message flights and shuffles simultaneous events at
    random, for exploring arrival orders; `last_arrival_wins` lets a collective whose slices may land on
    the same rows (ragged_all_to_all) write them in arrival order instead of refusing the call. Both are
    off by default, and then the run takes none of their paths.
    """

    def __init__(self, mesh: Mesh, check_vma: bool = True, memories: Sequence[LocalMemory] | None = None,
                 sanitize: bool = False, perturbation: Perturbation | None = None,
                 last_arrival_wins: bool = False) -> None:
        self.mesh = mesh
        self.check_vma = check_vma
        self.perturbation = perturbation
        self.last_arrival_wins = last_arrival_wins
        order = None if perturbation is None else perturbation.start()
        self.env = simpy.Environment(initial_time=0.0) if order is None else order.environment()
        self.memories = list(memories) if memories is not None else [LocalMemory(d) for d in mesh.devices]
        self.programs = [Program() for _ in mesh.devices]
        self.trace = Trace(route=mesh.route)
        self.links = LinkState(mesh.network, mesh.size, self.env, mesh.placement)
        self.transport = Transport(self.env, self.links, self.trace, mesh.size, order)
        self.rendezvous = Rendezvous(self.env, sanitize)
        self.shared: dict = {}
        self.calls: list[CallRecord] = []  # each device's part in each call, in the order the parts ended
        self._error: BaseException | None = None

    @property
    def now_s(self) -> float:
        return float(self.env.now)

    @property
    def violations(self) -> list[Violation]:
        """Every broken rule a sanitized run met, in the order the calls met; empty otherwise."""
        return self.rendezvous.violations

    def run(self, programs: Sequence[Callable[[], Any]]) -> list[Any]:
        """Run one program per device to completion and return their results, by device id.

        Raises:
            the first error a device program or a collective raised (with a note naming the device), or
            ProtocolError: the devices stopped waiting on each other (a deadlock).
        """
        if len(programs) != self.mesh.size:
            raise InvalidArgumentError(f"need one program per device: got {len(programs)} for {self.mesh}")
        running = [DeviceProgram(self, d, fn) for d, fn in enumerate(programs)]
        for program in running:
            self.env.process(program.process())
        step = self.env.step
        collecting = gc.isenabled()
        gc.disable()  # a run allocates millions of short-lived acyclic objects: scanning them is wasted time
        try:
            while self._error is None:
                step()
        except simpy.core.EmptySchedule:
            pass
        finally:
            if collecting:
                gc.enable()
            if self._error is not None or not all(p.done for p in running):
                for program in running:
                    program.abort()
        if self._error is not None:
            raise self._error
        stuck = [p for p in running if not p.done]
        if stuck:
            lines = [f"device {p.device} {_doing(p)}" for p in running]
            raise ProtocolError("deadlock: the devices stopped waiting on each other\n  " + "\n  ".join(lines))
        return [p.result for p in running]

    def fail(self, error: BaseException) -> None:
        """End the run with `error` (the first failure wins)."""
        if self._error is None:
            self._error = error

    def run_collective(self, program: DeviceProgram, collective: Collective) -> Generator:
        """The device's part of `collective`, in simulated time; its result."""
        members = collective.group.members
        call = program.calls.get(members, 0)
        program.calls[members] = call + 1
        program.waiting_on = program.last_call = Waiting(collective.name, call, members)
        enter_s = self.now_s
        try:
            meeting = self.rendezvous.arrive(program.device, call, collective)
            yield meeting.event
            met_s = self.now_s
            port = Port(self, program.device, collective, call, meeting)
            result = yield from collective.protocol(port, collective.args)
            arrived = port.all_arrived()
            if arrived is not None:
                yield arrived
            # the algorithm a protocol resolved once for the call ('auto' picks), else the one asked for
            algorithm = meeting.shared.get("algorithm", dict(collective.params).get("algorithm"))
            self.calls.append(CallRecord(program.device, collective.name, call, members, enter_s, met_s, self.now_s,
                                         algorithm))
        except Exception as error:
            if not isinstance(error, MeshError):  # a failure inside a protocol: say where it happened
                error.add_note(f"raised on device {program.device} {program.waiting_on}")
            program.waiting_on = "failed"
            self.fail(error)
            yield self.env.event()  # never fires: the run ends with the error
        return result


def _doing(program: DeviceProgram) -> str:
    """What a device was doing when the run stopped, for a deadlock report."""
    waiting = program.waiting_on
    return "is computing" if waiting is None else str(waiting)
