"""The driver: device programs as greenlets, each switched by its own SimPy process.

A device program is an ordinary Python function. It runs in a greenlet (a coroutine with its own stack, no
OS thread): the device's SimPy process switches into it, and it switches back when it finishes or asks for
a collective, which the process then carries out in simulated time. Only one greenlet ever runs at a time
and the order of events is SimPy's, so runs are deterministic, and a thousand devices cost a thousand small
stacks, not a thousand threads.
"""

from __future__ import annotations

import contextlib
import enum
import os
import site
import sys
import sysconfig
import threading
import traceback
import warnings
from collections.abc import Callable, Generator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import greenlet
import numpy as np

from sim.engine._rendezvous import Waiting
from sim.engine._request import Request
from sim.memory._memory import LocalMemory
from sim.network._mesh import Mesh
from sim.record._equations import Program
from sim.record._labels import call_label

if TYPE_CHECKING:
    from sim.engine._call import Calls
    from sim.engine._options import RunOptions
    from sim.engine._rendezvous import Collective

# Greenlets whose program swallowed the abort and asked for another collective: they are never resumed,
# and kept here so that no later garbage collection runs their code again.
_PARKED: list[greenlet.greenlet] = []

# Source files of the package itself: an error's "user's file and line" is the innermost frame outside them.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # above sim/engine/
_PACKAGE_DIRS = tuple(os.path.join(_ROOT, name) + os.sep for name in ("sim", "collectives", "layouts", "oracles"))
# Installed libraries and the standard library, whose frames are never the user's line when one of theirs is.
_LIBRARY_DIRS = tuple({os.path.abspath(p) + os.sep for p in (*site.getsitepackages(), site.getusersitepackages(),
                                                              sysconfig.get_paths()["stdlib"])})


def current_or_none() -> DeviceContext | None:
    """The device whose program is running now, or None outside a simulated program."""
    return getattr(greenlet.getcurrent(), "context", None)


def current() -> DeviceContext:
    """The device whose program is running now; raises outside a simulated program."""
    context = getattr(greenlet.getcurrent(), "context", None)
    if context is None:
        from sim._errors import MeshError

        raise MeshError("collectives must be called inside a program run by sim.shard_map")
    return context


class DeviceContext:
    """What a device program may reach: its device id, the mesh, its memory, and collectives.

    `program` records the typed equations the device executes; `check_vma` says whether device-variance
    types are inferred and checked; `shared` is one scratch dict for the whole run, where a check that
    every device makes of the same argument (a permutation, say) can be done once; `groups` holds the
    device's group over each single axis name it has called a collective over. `mesh`, `check_vma`
    and `last_arrival_wins` are the run's `options` (`RunOptions`).
    """

    def __init__(self, driven: DeviceProgram, options: RunOptions, memory: LocalMemory, program: Program,
                 shared: dict) -> None:
        self._driven = driven
        self.device: int = driven.device
        self.options = options
        self.mesh: Mesh = options.mesh
        self.memory = memory
        self.program = program
        self.check_vma: bool = options.check_vma
        self.shared = shared
        self.groups: dict[str, Any] = {}  # the device's group over each single axis name, once found
        # slices that land on the same rows are written in arrival order, not refused (arrival-order exploration)
        self.last_arrival_wins: bool = options.last_arrival_wins

    def collective(self, collective: Collective) -> Any:
        """Run `collective` on this device and return this device's result."""
        return self._driven.call(collective)


class _Aborted(BaseException):
    """Unwinds a device program whose simulation has ended in an error."""


class _DeviceGreenlet(greenlet.greenlet):
    """A greenlet that knows which device's program it runs (what `current()` reads)."""

    context: DeviceContext | None
    outcome: _Outcome | None  # how a worker's last program ended, until its driver reads it


@dataclass(frozen=True)
class _Outcome:
    """How a device program ended: its return value, or the error it raised."""

    value: Any = None
    error: BaseException | None = None


_ENDED = object()  # what a worker hands its driver when its program has ended (the outcome is on the worker)
_IDLE_WORKERS_MAX = 1024  # per thread; each idle worker holds a Python data stack of 16 KiB


def _serve(fn: Callable[[], Any]) -> None:
    """A worker greenlet's life: run each device program it is handed to its end, leave how it ended on the
    worker, and wait for the next. Starting a greenlet costs far more than switching into an idle one (it
    allocates the stack Python's frames live on), so runs reuse the workers of earlier runs."""
    me = greenlet.getcurrent()
    while True:
        try:
            me.outcome = _Outcome(value=fn())
        except greenlet.GreenletExit:  # the worker is being killed (or the program ended so): it ends too
            raise
        except BaseException as error:  # handed to the driver, which ends the run with it
            me.outcome = _Outcome(error=error)
        fn = None  # type: ignore[assignment]  # an idle worker keeps nothing of the run it served
        fn = me.parent.switch(_ENDED)


def float_modes() -> dict[str, Any]:
    """numpy's error modes (`np.errstate`'s arguments) for the device programs of a run: the caller's, read
    where the run starts (a greenlet starts with numpy's defaults). numpy warns of a floating-point error (a
    division by zero, an overflow) at the Python line that called the operation, which in a program is the
    simulator's wrapper of every numpy operation on a device's array: the kinds the caller has numpy warn of
    call `_warn_float_error` instead, which warns at the program's own line. A caller that handles some kind
    with a call of its own keeps its modes and its handler."""
    modes = np.geterr()
    if "call" in modes.values():
        return dict(modes, call=np.geterrcall())
    return dict({kind: "call" if mode == "warn" else mode for kind, mode in modes.items()}, call=_warn_float_error)


def _under(fn: Callable[[], Any], modes: dict[str, Any]) -> Any:
    """`fn()` under numpy's error `modes`; a program's own `np.errstate` rules inside it, as in numpy."""
    with np.errstate(**modes):
        return fn()


def _warn_float_error(kind: str, flag: int) -> None:
    """numpy's RuntimeWarning for a floating-point error of `kind` ('divide by zero', 'overflow', ...), at the
    innermost line of the user's code; Python's filters apply as to numpy's own (by default once per line, so
    a thousand devices dividing by zero warn once)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and not _users(frame.f_code.co_filename):
        frame = frame.f_back
    names = frame.f_globals
    module = {"module": names["__name__"]} if isinstance(names.get("__name__"), str) else {}  # else the file's
    warnings.warn_explicit(f"{kind} encountered", RuntimeWarning, frame.f_code.co_filename, frame.f_lineno,
                           registry=names.setdefault("__warningregistry__", {}), **module)


def _users(filename: str) -> bool:
    """Whether `filename` is the user's code: outside the package, installed libraries and the standard library."""
    path = os.path.abspath(filename)
    return not (path.startswith(_PACKAGE_DIRS) or path.startswith(_LIBRARY_DIRS) or filename.startswith("<frozen"))


_workers = threading.local()  # `idle`: this thread's idle workers (a greenlet runs only in its own thread)


def _worker(context: DeviceContext) -> _DeviceGreenlet:
    """A worker greenlet for a device program, its parent the running greenlet: an idle one, else a new one."""
    idle = getattr(_workers, "idle", None)
    if idle:
        worker = idle.pop()
        worker.parent = greenlet.getcurrent()
    else:
        worker = _DeviceGreenlet(_serve, parent=greenlet.getcurrent())
    worker.context = context
    return worker


def _release(worker: _DeviceGreenlet) -> None:
    """Take back a worker whose program has ended (idle again, waiting for its next program)."""
    worker.context = worker.outcome = None
    idle = _workers.__dict__.setdefault("idle", [])
    if len(idle) < _IDLE_WORKERS_MAX:
        idle.append(worker)


class Phase(enum.Enum):
    """Where a device program is in its run."""

    NOT_STARTED = "has not started"
    COMPUTING = "is computing"
    WAITING = "waits in"
    FINISHED = "has finished"
    FAILED = "failed"


@dataclass(frozen=True)
class Activity:
    """What a device is doing: its phase and, while it waits in a collective, that call (`Waiting`:
    collective, call number, members). Deadlock reports and error notes read it.

    >>> str(Activity(Phase.COMPUTING))
    'is computing'
    """

    phase: Phase
    call: Waiting | None = None

    def __str__(self) -> str:
        return str(self.call) if self.phase is Phase.WAITING and self.call is not None else self.phase.value


NOT_STARTED, COMPUTING, FINISHED, FAILED = (Activity(phase) for phase in
                                             (Phase.NOT_STARTED, Phase.COMPUTING, Phase.FINISHED, Phase.FAILED))


class DeviceProgram:
    """One device's program, driven step by step by its SimPy process.

    `activity` says what the device is doing (`Activity`): not started, computing, waiting in a call,
    finished or failed. Its collectives run through the run's `Calls`; a failure ends the run (`Calls.fail`).
    """

    def __init__(self, device: int, fn: Callable[[], Any], calls: Calls, memory: LocalMemory, program: Program,
                 shared: dict, float_modes: dict[str, Any]) -> None:
        self.device = device
        self.done = False
        self.aborted = False
        self.result: Any = None
        self._activity: Activity | None = NOT_STARTED  # None: waiting in `_waiting`, made on demand
        self.calls: dict[tuple[int, ...], int] = {}
        self._waiting: tuple | None = None  # (collective, call, members) of the collective it called last
        self._last_call: Waiting | None = None
        self._lifecycle = calls
        self._record = program  # faces: read by `label`
        self._fn: Callable[[], Any] | None = partial(_under, fn, float_modes)  # run under numpy's modes
        self._started = self._ended = False  # ended: its worker has handed back how the program ended
        self._greenlet = _worker(DeviceContext(self, calls.options, memory, program, shared))
        self._home = self._greenlet.parent
        self.lanes: list = []  # work the program started with `sim.start` (`sim.engine._lanes`)
        self.stopped_at: str | None = None  # the label of the call it was suspended in when the run stopped

    @property
    def activity(self) -> Activity:
        """What the device is doing now."""
        if self._activity is None:
            self._activity = Activity(Phase.WAITING, self.last_call)
        return self._activity

    @activity.setter
    def activity(self, activity: Activity) -> None:
        self._activity = activity

    @property
    def last_call(self) -> Waiting | None:
        """The collective call it made last (`Waiting`), None before its first."""
        if self._last_call is None and self._waiting is not None:
            self._last_call = Waiting(*self._waiting)
        return self._last_call

    @last_call.setter
    def last_call(self, waiting: Waiting | None) -> None:
        self._waiting, self._last_call = None, waiting

    def wait_in(self, collective: str, call: int, members: tuple[int, ...]) -> None:
        """Enter call number `call` of `collective` over `members`: the device now waits in it (the
        `Waiting` and `Activity` that say so are made only when read)."""
        self._waiting, self._last_call, self._activity = (collective, call, members), None, None

    def label(self) -> str | None:
        """Where the program made the call it waits to enter (`sim.record.call_label`): its label."""
        return call_label(self._record.label, self._greenlet)

    def call(self, collective: Collective) -> Any:
        """In the device's greenlet: hand `collective` to the process and return its result."""
        if self.aborted:  # the program swallowed the abort: it never runs again
            _PARKED.append(self._greenlet)
            self._home.switch()
        reply = self._home.switch(collective)
        if self.aborted:
            raise _Aborted
        return reply

    def process(self) -> Generator:
        """The SimPy process: resume the program, run the collective it asks for, repeat until it returns."""
        resume: tuple = (self._fn,)  # the first switch hands the worker its program
        self._started = True
        while True:
            self._activity = COMPUTING
            try:
                request = self._greenlet.switch(*resume)
            except BaseException as error:  # handed to the simulation, which ends the run with it
                self.activity = FAILED
                self._lifecycle.fail(self._explained(error))
                return
            if request is _ENDED or self._greenlet.dead:
                outcome = self._end() if request is _ENDED else _Outcome(value=request)
                if outcome.error is not None:
                    self.activity = FAILED
                    self._lifecycle.fail(self._explained(outcome.error))
                    return
                if self.lanes:  # its part ends when the last lane it started does
                    from sim.engine._lanes import join_lanes

                    yield from join_lanes(self)
                self.done, self.result, self.activity = True, outcome.value, FINISHED
                return
            step = request.drive(self) if isinstance(request, Request) else self._lifecycle.run(self, request)
            resume = ((yield from step),)

    def abort(self) -> None:
        """Unwind the program if it is suspended in a collective; a program never started is dropped.

        Raises:
            the error the program raised while it unwound, if not the abort itself.
        """
        self.aborted = True
        if self._started and not self._ended and not self._greenlet.dead:  # where it stopped, before unwinding
            self.stopped_at = self.label()
        if not self._started:  # dropped: its worker never ran it
            if not self._ended:
                self._ended = True
                _release(self._greenlet)
            return
        if self._ended or self._greenlet.dead:
            return
        with contextlib.suppress(_Aborted):
            if self._greenlet.throw(_Aborted) is _ENDED:
                error = self._end().error
                if error is not None and not isinstance(error, _Aborted):
                    raise error

    def _end(self) -> _Outcome:
        """How the program ended, read off its worker, which goes back to the idle ones."""
        worker = self._greenlet
        outcome = worker.outcome
        self._ended, self._fn = True, None
        _release(worker)
        return outcome  # type: ignore[return-value]

    def _explained(self, error: BaseException) -> BaseException:
        """`error` with a note saying which device raised it, in which call, at the user's file and line."""
        if isinstance(error, Exception):
            where = _user_frame(error)
            call = ("before its first collective" if self.last_call is None
                    else f"after {self.last_call.call_str()}")
            error.add_note(f"raised on device {self.device} {call}" + (f", at {where}" if where else ""))
            if isinstance(error, NameError) and str(error).startswith("unbound axis name"):  # JAX's words
                error.add_note("a jax.lax collective in a sim.shard_map body: JAX knows nothing of the simulated "
                               "mesh; call meshsim's own (collectives.psum, ...), or simulate the JAX program "
                               "with oracles.simulate_jax")
        return error


def _user_frame(error: BaseException) -> str:
    """The innermost traceback frame of the user's own code, as `file:line (function)`: outside the package and
    outside installed libraries (numpy's or JAX's frames name no line the user wrote), if there is one."""
    found = library = ""
    for frame in traceback.extract_tb(error.__traceback__):
        where = f"{frame.filename}:{frame.lineno} ({frame.name})"
        if _users(frame.filename):
            found = where
        elif not os.path.abspath(frame.filename).startswith(_PACKAGE_DIRS):
            library = where
    return found or library
