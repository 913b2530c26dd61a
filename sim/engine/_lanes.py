"""Local work in simulated time, and collectives that run while a device computes (XLA's async collectives).

A device has two tracks. Its program runs on the compute track: `sim.compute(...)` takes the time the
network's `sim.Roofline` gives the work (or the seconds given) and records it (`ComputeRecord`). Collectives
run on the communication track. A collective called plainly blocks the program until it ends, so work and
messages add up; `sim.start(f, *args)` instead runs `f(*args)` (a collective, or a few) as a lane of the
device's own: it starts at once, at the point of the program where its operands are ready, and the
program goes on with work that does not need it; `pending.result()` is the done half of the pair, and
waits for the lane only if it has not ended yet. So a collective matmul that sends the next block while
it multiplies the current one takes max(T_math, T_comm) a step, and the plain one T_math + T_comm.

A device's compute track runs one piece of work at a time: work charged from a lane waits for the
program's. A lane's calls are numbered with the program's own, in the order the program made them, so
every device must start and call its collectives in the same order, as with plain calls. A program that
returns with a lane still running waits for it: its part of the run ends when its last lane does.

>>> import numpy as np, sim
>>> from collectives import ppermute
>>> mesh = sim.Mesh({"i": 2}, network=sim.Network(latency_s=1e-6, bandwidth_bytes_per_s=1e9,
...                 roofline=sim.Roofline(peak_flops_per_s=1e12, memory_bytes_per_s=1e12)))
>>> def f(x):
...     pending = sim.start(ppermute, x, "i", [(0, 1), (1, 0)])   # 1 us + 16 B / 1e9 B/s on the wire
...     sim.compute(flops=2e6)                                    # 2 us of work meanwhile
...     return pending.result()
>>> run = sim.shard_map(f, mesh=mesh, in_specs=sim.P("i"), out_specs=sim.P("i")).run(np.arange(4.0))
>>> run.outputs.tolist(), round(run.end_time_s * 1e6, 3)
([2.0, 3.0, 0.0, 1.0], 2.0)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from sim._errors import InvalidArgumentError, InvalidTypeError, MeshError
from sim.engine._driver import COMPUTING, FINISHED, Activity, DeviceContext, Phase, _Aborted, _DeviceGreenlet, current
from sim.engine._rendezvous import Waiting
from sim.engine._request import Request
from sim.record._compute import ComputeRecord
from sim.record._labels import call_label

if TYPE_CHECKING:
    from sim.engine._driver import DeviceProgram


class Lane:
    """Work a device program started with `sim.start`: its own greenlet, driven by its own SimPy process,
    with the program's call numbers, memory and program record. Duck-types the parts of a `DeviceProgram`
    that `Calls.run` and a `Request` use (`device`, `calls`, `wait_in`, `activity`).

    The program record's `label` belongs to the code running now: while the lane runs, the record holds the
    lane's own label (`own_label`: the one it was started under, or a `sim.labelled` block's inside it), and
    when the lane stops the record gets back the label it held before. So a block that ends in the program
    does not unlabel the lane, and a block in the lane labels only the lane's calls.
    """

    def __init__(self, owner: Any, fn: Callable[[], Any], label: str | None) -> None:
        self.root: DeviceProgram = getattr(owner, "root", owner)
        self.device = self.root.device
        self.calls = self.root.calls  # numbered with the program's own calls
        self._lifecycle = self.root._lifecycle
        self.activity: Activity = COMPUTING
        self.last_call: Waiting | None = None
        self.done = False
        self.result: Any = None
        self.own_label = label
        self.finished = self._lifecycle.env.event()
        context = copy.copy(owner_context(self.root))  # the device's groups, caches and options, shared
        context._driven = self  # a lane's requests come back to the lane
        self._greenlet = _DeviceGreenlet(fn, parent=self.root._home)
        self._greenlet.context = context

    def wait_in(self, collective: str, call: int, members: tuple[int, ...]) -> None:
        """Enter call number `call` of `collective` over `members` (as `DeviceProgram.wait_in`)."""
        self.last_call = Waiting(collective, call, members)
        self.activity = Activity(Phase.WAITING, self.last_call)

    def label(self) -> str | None:
        """Where the lane made the call it waits to enter: its own label, the one it was started under unless a
        `sim.labelled` block inside it says otherwise (as `DeviceProgram.label`)."""
        return call_label(self.own_label, self._greenlet)

    def call(self, request: Any) -> Any:
        """In the lane's greenlet: hand `request` (a collective or a `Request`) to the lane's driver."""
        reply = self.root._home.switch(request)
        if self.root.aborted:
            raise _Aborted
        return reply

    def begin(self) -> None:
        """In the simulation's greenlet, at the time the program starts the lane: run it up to its first wait
        (its first call is numbered now, in program order), then leave the rest to a SimPy process."""
        steps = self._steps()
        try:
            event = next(steps)
        except StopIteration:
            return
        self._lifecycle.env.process(_carried_on(steps, event))

    def _steps(self) -> Generator:
        """Resume the lane's function, carry out what it asks for, until it returns."""
        resume: tuple = ()
        record = self.root._record
        while True:
            self.activity = COMPUTING
            found, record.label = record.label, self.own_label
            try:
                request = self._greenlet.switch(*resume)
            except BaseException as error:  # the lane's failure is its device's: the run ends with it
                self.activity = self.root.activity = Activity(Phase.FAILED)
                self._lifecycle.fail(self.root._explained(error))
                return
            finally:
                self.own_label, record.label = record.label, found
            if self._greenlet.dead:
                self.done, self.result, self.activity = True, request, FINISHED
                self.finished.succeed()
                return
            step = request.drive(self) if isinstance(request, Request) else self._lifecycle.run(self, request)
            resume = ((yield from step),)


def owner_context(program: DeviceProgram) -> DeviceContext:
    """The context the device's program runs with."""
    return program._greenlet.context


def _carried_on(steps: Generator, event: Any) -> Generator:
    """A SimPy process that goes on with a generator already advanced to its first `event`."""
    while True:
        value = yield event
        try:
            event = steps.send(value)
        except StopIteration:
            return


class Pending:
    """The result of work started with `sim.start`, not waited for yet: `result()` waits for it (in
    simulated time, only if it has not ended) and returns what the started function returned."""

    def __init__(self, lane: Lane) -> None:
        self._lane = lane

    @property
    def done(self) -> bool:
        """Whether the started work has ended (its result is ready without waiting)."""
        return self._lane.done

    def result(self) -> Any:
        """The started function's return value, once it has ended; the program waits for it until then.

        Raises:
            MeshError: called outside the device's program that started the work.
        """
        lane = self._lane
        context = current()
        if context.device != lane.device:
            raise MeshError(f"device {context.device} waits on work device {lane.device} started: a pending result "
                            f"belongs to the device that called sim.start")
        if lane.done:
            return lane.result
        return context._driven.call(_Join(lane))

    def __repr__(self) -> str:
        return f"Pending(device={self._lane.device}, {'done' if self.done else 'running'})"


class _Start(Request):
    """Start a lane now, at no cost in time, under `label`; the program gets its `Pending`."""

    def __init__(self, fn: Callable[[], Any], label: str | None) -> None:
        self.fn, self.label = fn, label

    def drive(self, program: Any) -> Generator:
        lane = Lane(program, self.fn, self.label)
        lane.root.lanes.append(lane)
        lane.begin()
        return Pending(lane)
        yield  # a generator that never waits


class _Join(Request):
    """Wait until a lane has ended; its result."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane

    def drive(self, program: Any) -> Generator:
        lane = self.lane
        if not lane.done:
            program.activity = lane.activity if lane.activity.phase is Phase.WAITING else COMPUTING
            yield lane.finished
        return lane.result


class _Compute(Request):
    """`seconds` of local work on the device's compute track, recorded with its counts and name."""

    def __init__(self, seconds: float, name: str, counts: tuple[float, float, float]) -> None:
        self.seconds, self.name, self.counts = seconds, name, counts

    def drive(self, program: Any) -> Generator:
        root = getattr(program, "root", program)
        env = root._lifecycle.env
        begin_s = max(float(env.now), getattr(root, "compute_free_s", 0.0))  # one piece of work at a time
        end_s = begin_s + self.seconds
        root.compute_free_s = end_s
        if end_s > env.now:
            yield env.timeout(end_s - env.now)
        flops, bytes_accessed, transcendentals = self.counts
        root._lifecycle.transport.trace.computes.append(
            ComputeRecord(root.device, begin_s, end_s, self.name, flops, bytes_accessed, transcendentals))


def join_lanes(program: DeviceProgram) -> Generator:
    """At the end of a device's program: wait for every lane it started and has not waited on."""
    for lane in program.lanes:
        if not lane.done:
            yield from _Join(lane).drive(program)


def start(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Pending:
    """Start `fn(*args, **kwargs)` on the device's communication track and go on at once (an async
    collective's start); its `Pending.result()` is the done half. `fn` is typically a collective, e.g.
    `sim.start(ppermute, x, "i", perm)`; it may call several, and charge work with `sim.compute`. Its calls
    keep the label (`sim.labelled`) it was started under, even after that block has ended.

    Raises:
        MeshError: called outside a program run by `sim.shard_map`.
        InvalidTypeError: `fn` is not callable.
    """
    context = current()
    if not callable(fn):
        raise InvalidTypeError(f"fn={fn!r} must be callable: sim.start(f, *args) runs f(*args) beside the program")
    return context._driven.call(_Start(lambda: fn(*args, **kwargs), context.program.label))


def compute(flops: float = 0.0, bytes_accessed: float = 0.0, transcendentals: float = 0.0, *,
            seconds: float | None = None, name: str = "") -> None:
    """Charge local work to the device running this program: it takes the time the network's roofline gives
    (`sim.Roofline.seconds`: the slowest of flops over the peak, bytes over the memory bandwidth and
    transcendentals over their rate), or `seconds` when given, and shows on the device's compute track.
    Collectives started with `sim.start` go on meanwhile.

    Raises:
        MeshError: called outside a program run by `sim.shard_map`.
        InvalidArgumentError: a negative or non-finite count, or counts without a roofline on the network
            (give `Network(roofline=sim.Roofline(...))` or a preset, or charge `seconds=`).
    """
    context = current()
    counts = _counts(flops, bytes_accessed, transcendentals)
    if seconds is not None:
        _check_count("seconds", seconds)
        time_s = float(seconds)
    else:
        roofline = context.mesh.network.roofline
        if roofline is None:
            raise InvalidArgumentError(
                f"sim.compute(flops={flops}, bytes_accessed={bytes_accessed}, transcendentals={transcendentals}) "
                f"on device {context.device}: the network has no roofline to time work by its counts; give "
                f"Network(roofline=sim.Roofline(peak_flops_per_s=..., memory_bytes_per_s=...)), a preset "
                f"(Network.preset(...)), or seconds=")
        time_s = roofline.seconds(*counts)
    if not isinstance(name, str):
        raise InvalidTypeError(f"name={name!r} must be a string")
    context._driven.call(_Compute(time_s, name, counts))


def _counts(flops: Any, bytes_accessed: Any, transcendentals: Any) -> tuple[float, float, float]:
    for label, value in (("flops", flops), ("bytes_accessed", bytes_accessed), ("transcendentals", transcendentals)):
        _check_count(label, value)
    return float(flops), float(bytes_accessed), float(transcendentals)


def _check_count(label: str, value: Any) -> None:
    if isinstance(value, bool) or (not isinstance(value, (int, float)) and not hasattr(value, "__float__")):
        raise InvalidTypeError(f"{label}={value!r} must be a number")
    number = float(value)
    if not (number >= 0 and number != float("inf")):
        raise InvalidArgumentError(f"{label}={value!r} must be a finite number >= 0")

