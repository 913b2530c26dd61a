"""`Simulation`: one run on a mesh, composed of a clock, a driver, a rendezvous and a transport.

- the clock is SimPy's (`env`); its event order makes every run deterministic;
- the driver (`sim.engine._driver`) runs each device program as a greenlet switched by a SimPy process;
- the calls (`sim.engine._call`) take each collective call through its life: arrive, meet, run the
  protocol through a `Port`, record;
- the rendezvous (`sim.engine._rendezvous`) starts a collective when its whole group has reached it;
- the transport (`sim.engine._transport`) carries messages between mailboxes over the network's links
  (`sim.network._flows.LinkState`: flows sharing links max-min fairly), and records them in the `Trace`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import simpy

from sim._errors import InvalidArgumentError, ProtocolError
from sim._gc import gc_paused
from sim._simpy import release
from sim.engine._call import Calls
from sim.engine._driver import DeviceProgram, float_modes
from sim.engine._options import RunOptions
from sim.engine._perturb import Perturbation
from sim.engine._rendezvous import Rendezvous
from sim.engine._transport import Transport
from sim.memory._memory import LocalMemory
from sim.memory._meter import MemoryMeter
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

    Every array the run's memories hold is counted (`meter`) against `max_memory_bytes` (by default the
    mesh's limit, `Mesh(max_memory_bytes=...)`); the allocation that would pass it raises `MemoryLimitError`.
    """

    def __init__(self, mesh: Mesh, check_vma: bool = True, memories: Sequence[LocalMemory] | None = None,
                 sanitize: bool = False, perturbation: Perturbation | None = None,
                 last_arrival_wins: bool = False, max_memory_bytes: int | None = None) -> None:
        limit = mesh.max_memory_bytes if max_memory_bytes is None else max_memory_bytes
        self.options = RunOptions(mesh, check_vma, sanitize, last_arrival_wins, limit)
        self.meter = MemoryMeter(limit)
        self.mesh = mesh
        self.perturbation = perturbation
        order = None if perturbation is None else perturbation.start()
        self.env = simpy.Environment(initial_time=0.0) if order is None else order.environment()
        self.memories = list(memories) if memories is not None else [LocalMemory(d, self.meter) for d in mesh.devices]
        for memory in self.memories:
            memory.count_in(self.meter)
        self.programs = [Program() for _ in mesh.devices]
        self.trace = Trace(route=mesh.route)
        self.links = LinkState(mesh.network, mesh.size, self.env, mesh.placement)
        self.transport = Transport(self.env, self.links, self.trace, mesh.size, order)
        self.rendezvous = Rendezvous(self.env, sanitize)
        self.shared: dict = {}
        self._error: BaseException | None = None
        self._calls = Calls(self.env, self.options, self.memories, self.rendezvous, self.transport, self.fail)
        self.calls: list[CallRecord] = self._calls.records  # each device's part in each call, in the order they ended

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
        with gc_paused():
            modes = float_modes()
            running = [DeviceProgram(d, fn, self._calls, self.memories[d], self.programs[d], self.shared, modes)
                       for d, fn in enumerate(programs)]
            for program in running:
                self.env.process(program.process())
            try:
                self._drive(running)
            finally:
                self._unlink()
        if self._error is not None:
            raise self._error
        stuck = [p for p in running if not p.done]
        unmatched = self.transport.unmatched()
        if stuck:
            lines = [_stuck(p) for p in running] + unmatched
            error = ProtocolError("deadlock: the devices stopped waiting on each other\n  " + "\n  ".join(lines))
            error.activities = [p.activity for p in running]  # type: ignore[attr-defined]  # by device
            error.unmatched = unmatched  # type: ignore[attr-defined]
            raise error
        if unmatched:
            error = ProtocolError("unmatched one-sided messages at the end of the run: a send and a receive must "
                                  "pair up\n  " + "\n  ".join(unmatched))
            error.unmatched = unmatched  # type: ignore[attr-defined]
            raise error
        return [p.result for p in running]

    def _drive(self, running: list[DeviceProgram]) -> None:
        """Step the clock until the run ends or fails; unwind the programs left suspended."""
        step = self.env.step
        try:
            while self._error is None:
                step()
        except simpy.core.EmptySchedule:
            pass
        finally:
            if self._error is not None or not all(p.done for p in running):
                for program in running:
                    program.abort()

    def _unlink(self) -> None:
        """The run is over: drop the references back into the simulation that its parts hold for the run (the
        calls' way to fail it, the network's wake-up of the transport, the transport's switch and slice tables,
        which point back at it, whatever the clock still has queued after an error, and the clock's own
        bindings of its event classes). The simulation is then freed by reference counting with the last `Run`
        holding it, its memories with it; in reference cycles it would wait for a full collection, which
        `gc_paused` makes rare (every run's device memory would pile up in a loop of runs)."""
        self._calls.fail = None  # type: ignore[assignment]
        self.transport.release()
        release(self.env)

    def fail(self, error: BaseException) -> None:
        """End the run with `error` (the first failure wins)."""
        if self._error is None:
            self._error = error


def _stuck(program: DeviceProgram) -> str:
    """A device at a deadlock: what it does, and where its program made the call it waits in, where known."""
    label = None if program.done else program.stopped_at
    return f"device {program.device} {program.activity}" + (f", called at {label}" if label else "")
