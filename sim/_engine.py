"""`Simulation`: device programs as SimPy processes exchanging messages through mailboxes.

Each device program is an ordinary Python function. It runs in its own thread, but only one thread ever
runs at a time: a device's SimPy process hands control to its thread and waits until the thread either
finishes or asks for a collective, which the process then carries out in simulated time. The clock and the
order of events are SimPy's, so runs are deterministic.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Hashable, Sequence

import numpy as np
import simpy

from sim._errors import InvalidArgumentError, MeshError, ProtocolError
from sim._memory import LocalMemory
from sim._mesh import Group, Mesh
from sim._program import Program
from sim._trace import MessageRecord, Trace

_local = threading.local()


def current_or_none() -> "DeviceContext | None":
    """The device whose program is running in this thread, or None outside a simulated program."""
    return getattr(_local, "context", None)


def current() -> "DeviceContext":
    """The device whose program is running in this thread; raises outside a simulated program."""
    context = getattr(_local, "context", None)
    if context is None:
        raise MeshError("collectives must be called inside a program run by sim.shard_map")
    return context


@dataclass(frozen=True)
class Collective:
    """One collective call as one device makes it.

    `params` must be equal on every member of the group (else the devices disagree about which
    collective comes next). `validate(args_by_index)` sees every member's `args` and returns the broken
    rules, all of them, before any message is sent. `protocol(port, args)` is the device's part of the
    message exchange, a SimPy generator returning the device's result.
    """

    name: str
    group: Group
    params: tuple
    args: Any
    protocol: Callable[["Port", Any], Generator]
    validate: Callable[[list[Any]], list[str]] | None = None


@dataclass
class Message:
    """A payload in flight: a numpy array (the real bytes) and a small header."""

    src: int
    dst: int
    tag: Hashable
    payload: np.ndarray
    header: dict = field(default_factory=dict)


class Port:
    """One device's access to the network and its memory during one collective call."""

    def __init__(self, simulation: "Simulation", device: int, collective: Collective, call: int) -> None:
        self.simulation = simulation
        self.device = device
        self.collective = collective
        self.call = call
        self.memory: LocalMemory = simulation.memories[device]
        self.in_flight: list[simpy.Event] = []

    @property
    def group(self) -> Group:
        return self.collective.group

    def send(self, dst: int, payload: np.ndarray, tag: Hashable = 0, header: dict | None = None, **detail) -> None:
        """Post `payload` (a C-contiguous array) to device `dst`; it arrives after the network's delay."""
        if not payload.flags.c_contiguous:
            raise AssertionError("payloads must be packed (C-contiguous) before sending")
        key = (self.collective.group.members, self.call, tag)
        message = Message(self.device, dst, key, payload, header or {})
        self.in_flight.append(self.simulation._post(message, self.collective.name, self.call, detail))

    def recv(self, src: int, tag: Hashable = 0) -> simpy.Event:
        """An event that fires with the `Message` from `src` carrying `tag`."""
        key = (self.collective.group.members, self.call, tag)
        return self.simulation._expect(self.device, src, key)


class DeviceContext:
    """What a device program may reach: its device id, the mesh, its memory, and collectives.

    `program` records the typed equations the device executes; `check_vma` says whether device-variance
    types are inferred and checked.
    """

    def __init__(self, program: "_Program") -> None:
        self._program = program
        self.device = program.device
        self.mesh: Mesh = program.simulation.mesh
        self.memory: LocalMemory = program.simulation.memories[program.device]
        self.program: Program = program.simulation.programs[program.device]
        self.check_vma: bool = program.simulation.check_vma

    def collective(self, collective: Collective) -> Any:
        """Run `collective` on this device and return this device's result."""
        return self._program.call(collective)


class _Aborted(BaseException):
    """Unwinds a device thread whose simulation has ended in an error."""


class _Program:
    """A device program in its own thread, driven step by step by a SimPy process."""

    def __init__(self, simulation: "Simulation", device: int, fn: Callable[[], Any]) -> None:
        self.simulation = simulation
        self.device = device
        self.fn = fn
        self.done = False
        self.result: Any = None
        self.waiting_on = "has not started"
        self.calls: dict[tuple[int, ...], int] = {}
        self._to_thread = threading.Semaphore(0)
        self._to_process = threading.Semaphore(0)
        self._request: tuple[str, Any] = ("none", None)
        self._reply: tuple[str, Any] = ("start", None)
        self._thread = threading.Thread(target=self._main, name=f"device-{device}", daemon=True)

    def _main(self) -> None:
        self._to_thread.acquire()
        _local.context = DeviceContext(self)
        try:
            if self._reply[0] == "abort":
                raise _Aborted
            self._request = ("done", self.fn())
        except _Aborted:
            self._request = ("aborted", None)
        except BaseException as error:  # handed to the simulation, which re-raises it
            self._request = ("error", error)
        self._to_process.release()

    def call(self, collective: Collective) -> Any:
        """Called in the device thread: hand `collective` to the process and wait for its result."""
        self._request = ("call", collective)
        self._to_process.release()
        self._to_thread.acquire()
        kind, value = self._reply
        if kind == "abort":
            raise _Aborted
        return value

    def process(self) -> Generator:
        """The SimPy process: resume the thread, run what it asks for, repeat until it returns."""
        self._thread.start()
        while True:
            self.waiting_on = "is computing"
            self._to_thread.release()
            self._to_process.acquire()
            kind, value = self._request
            if kind == "done":
                self.done, self.result, self.waiting_on = True, value, "has finished"
                return
            if kind == "error":
                raise value
            result = yield from self.simulation._run_collective(self, value)
            self._reply = ("ok", result)

    def abort(self) -> None:
        """Unwind the thread if it is blocked in a collective or has not started."""
        if self._thread.is_alive():
            self._reply = ("abort", None)
            self._to_thread.release()
            self._thread.join()


class Simulation:
    """One run on a mesh: a SimPy clock, a memory and a program record per device, the network state and
    the trace."""

    def __init__(self, mesh: Mesh, check_vma: bool = True, memories: Sequence[LocalMemory] | None = None) -> None:
        self.mesh = mesh
        self.check_vma = check_vma
        self.env = simpy.Environment()
        self.memories = list(memories) if memories is not None else [LocalMemory(d) for d in mesh.devices]
        self.programs = [Program() for _ in mesh.devices]
        self.trace = Trace()
        self._link_free_s: dict[tuple[int, int], float] = {}
        self._inbox: dict[tuple, Message] = {}
        self._waiting: dict[tuple, simpy.Event] = {}
        self._rendezvous: dict[tuple, dict] = {}

    @property
    def now_s(self) -> float:
        return float(self.env.now)

    def run(self, programs: Sequence[Callable[[], Any]]) -> list[Any]:
        """Run one program per device to completion and return their results, by device id."""
        if len(programs) != self.mesh.size:
            raise InvalidArgumentError(f"need one program per device: got {len(programs)} for {self.mesh}")
        running = [_Program(self, d, fn) for d, fn in enumerate(programs)]
        for program in running:
            self.env.process(program.process())
        try:
            self.env.run()
        except BaseException as error:
            for program in running:
                program.abort()
            # SimPy re-raises a copy of a failed process's exception; hand back the original.
            original = error.__cause__ if type(error.__cause__) is type(error) else error
            if isinstance(original, MeshError):
                raise original.with_traceback(None) from None
            raise original
        stuck = [p for p in running if not p.done]
        if stuck:
            for program in running:
                program.abort()
            lines = [f"device {p.device} {p.waiting_on}" for p in running]
            raise ProtocolError("deadlock: the devices stopped waiting on each other\n  " + "\n  ".join(lines))
        return [p.result for p in running]

    def _run_collective(self, program: _Program, collective: Collective) -> Generator:
        members = collective.group.members
        call = program.calls.get(members, 0)
        program.calls[members] = call + 1
        program.waiting_on = f"waits in {collective.name} (call #{call} over devices {list(members)})"
        yield self._arrive(program.device, call, collective)
        port = Port(self, program.device, collective, call)
        result = yield from collective.protocol(port, collective.args)
        # payloads are zero-copy views of the sender's memory: it may not move on while they travel
        yield self.env.all_of(port.in_flight)
        return result

    def _arrive(self, device: int, call: int, collective: Collective) -> simpy.Event:
        key = (collective.group.members, call)
        slot = self._rendezvous.setdefault(key, {"calls": {}, "event": self.env.event()})
        for other_device, other in slot["calls"].values():
            if (other.name, other.params) != (collective.name, collective.params):
                raise ProtocolError(
                    f"mismatched collectives: call #{call} over devices {list(key[0])}: "
                    f"device {other_device} called {other.name}{other.params}, "
                    f"device {device} called {collective.name}{collective.params}"
                )
        slot["calls"][collective.group.index] = (device, collective)
        if len(slot["calls"]) == collective.group.size:
            del self._rendezvous[key]
            if collective.validate is not None:
                args = [slot["calls"][i][1].args for i in range(collective.group.size)]
                violations = collective.validate(args)
                if violations:
                    raise InvalidArgumentError(
                        f"{collective.name}: {len(violations)} invalid argument(s)\n  " + "\n  ".join(violations)
                    )
            slot["event"].succeed()
        return slot["event"]

    def _post(self, message: Message, collective: str, call: int, detail: dict) -> simpy.Event:
        now = self.now_s
        size = message.payload.nbytes
        network = self.mesh.network
        t, start = now, None
        for link in network.route(message.src, message.dst):
            begin = max(t, self._link_free_s.get(link, 0.0))
            start = begin if start is None else start
            self._link_free_s[link] = begin + network.transfer_s(size)
            t = begin + network.transfer_s(size) + network.latency_s
        record = MessageRecord(message.src, message.dst, size, now, now if start is None else start, t,
                               collective, call, detail)
        self.trace.add(record)
        arrival = self.env.timeout(t - now)
        arrival.callbacks.append(lambda _: self._deliver(message))
        return arrival

    def _deliver(self, message: Message) -> None:
        key = (message.dst, message.src, message.tag)
        waiter = self._waiting.pop(key, None)
        if waiter is None:
            self._inbox[key] = message
        else:
            waiter.succeed(message)

    def _expect(self, dst: int, src: int, tag: Hashable) -> simpy.Event:
        key = (dst, src, tag)
        event = self.env.event()
        if key in self._inbox:
            event.succeed(self._inbox.pop(key))
        else:
            self._waiting[key] = event
        return event
