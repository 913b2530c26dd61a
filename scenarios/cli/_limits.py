"""The options every command that runs a scenario shares: consent to run its code, and a time limit."""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import scenarios
from scenarios import CodeNotAllowedError, Scenario, ScenarioError, TimeLimitError

MAX_TIMEOUT_S = 100_000_000  # about three years: the most the system's interval timer takes with room to spare
_REFIRE_S = 1.0  # after the first alarm, one a second: code that catches the first is stopped by the next


def add_allow_code(parser: argparse.ArgumentParser) -> None:
    """Add `--allow-code`: consent to run the code a scenario carries (a `[program]` source, a Python script)."""
    parser.add_argument("--allow-code", action="store_true",
                        help="run the Python code the scenario carries (a [program] source, a .py scenario); "
                             "without it such a file is refused and its code shown. Give it only to files you trust")


def load_collective(path: str, script: str, program: str) -> Scenario:
    """The `[collective]` scenario at `path`, for a command that runs no code: a Python script is refused with
    `script` and a `[program]` (before its source runs) with `program`, each after the path."""
    if path.endswith(".py"):
        raise ScenarioError(f"{path}: {script}")
    try:
        scenario = scenarios.load(path, allow_code=False)
    except CodeNotAllowedError:
        scenario = None
    if not isinstance(scenario, Scenario):
        raise ScenarioError(f"{path}: {program}")
    return scenario


def add_timeout(parser: argparse.ArgumentParser) -> None:
    """Add `--timeout SECONDS`: the longest the command may run before it is stopped with exit 2."""
    parser.add_argument("--timeout", metavar="SECONDS", type=_seconds, default=None,
                        help="stop the run after SECONDS of wall-clock time with exit 2 (default: no limit; at "
                             "most 1e8, about three years)")


def _seconds(text: str) -> float:
    """A positive number of seconds up to `MAX_TIMEOUT_S`, for argparse."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"--timeout={text!r} must be a positive number of seconds up to "
                                         f"{MAX_TIMEOUT_S:g} (about three years), e.g. 10")
    return seconds


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str) -> Iterator[None]:
    """Run the block for at most `seconds` (no limit when None), then raise `TimeLimitError` inside it.

    The alarm is a signal, handled in the main thread between two bytecodes of whatever runs there: the
    simulator's loop, a device program's greenlet (they run in the main thread too) or a scenario's code.

    Raises:
        TimeLimitError: the block was still running after `seconds`.
        ScenarioError: a limit was asked for outside the main thread, where no signal can stop the block.
    """
    if seconds is None:
        yield
        return
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        raise ScenarioError("--timeout needs the main thread of a process on a system with SIGALRM")

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeLimitError(f"{what}: stopped after --timeout {seconds:g} s; the run had not finished (a program "
                             f"that never ends, or a bigger run than the limit allows: raise --timeout)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, _REFIRE_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
