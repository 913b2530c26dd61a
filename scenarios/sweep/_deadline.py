"""`deadline`: stop a block of Python that runs past its time, in any thread (a Dask worker's too).

A signal reaches the main thread only, and a sweep point runs in a worker's thread. So a timer thread,
once `seconds` have passed, asks the interpreter to raise `PastDeadline` in the block's thread
(`PyThreadState_SetAsyncExc`): the simulator, its device programs (greenlets of that thread) and numpy's
Python code all stop at their next bytecode; a single long call into C (one huge copy) ends first. A block
that ends before the timer fires cancels it, and an exception asked for too late is withdrawn, so nothing
is ever raised outside the block.

>>> import time
>>> try:
...     with deadline(0.05):
...         while True:
...             time.sleep(0.001)
... except PastDeadline:
...     print("stopped")
stopped
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import sim


class PastDeadline(sim.MeshError):
    """A block ran past the seconds `deadline` gave it (raised in its thread by the timer)."""


@contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Run the block for at most `seconds` (no limit when None), then raise `PastDeadline` inside it."""
    if seconds is None:
        yield
        return
    timer = _Timer(threading.get_ident(), seconds)
    timer.start()
    try:
        yield
    finally:
        timer.stop()


class _Timer:
    """The timer thread of one `deadline`: it raises `PastDeadline` in `thread_id` unless stopped first."""

    def __init__(self, thread_id: int, seconds: float) -> None:
        self.thread_id = thread_id
        self.lock = threading.Lock()
        self.active, self.fired = True, False
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True

    def start(self) -> None:
        self.timer.start()

    def _fire(self) -> None:
        with self.lock:
            if self.active:
                self.fired = True
                _raise_in(self.thread_id, PastDeadline)

    def stop(self) -> None:
        """Cancel the timer; withdraw the exception if it was asked for and not raised yet."""
        self.timer.cancel()
        with self.lock:
            self.active = False
            if self.fired:
                _raise_in(self.thread_id, None)


def _raise_in(thread_id: int, error: type[BaseException] | None) -> None:
    """Ask the interpreter to raise `error` in the thread `thread_id` (None: withdraw the one pending)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(error) if error is not None else None)
