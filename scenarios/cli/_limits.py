"""The options every command that runs a scenario shares: consent to run its code, a time limit, and the
memory and work budget (`--max-memory`, `--max-messages`)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import scenarios
import sim
from scenarios import CodeNotAllowedError, Scenario, ScenarioError, TimeLimitError

MAX_TIMEOUT_S = 100_000_000  # about three years: the most the system's interval timer takes with room to spare
_REFIRE_S = 1.0  # after the first alarm, one a second: code that catches the first is stopped by the next


class UsageError(ScenarioError):
    """Options of a command that do not go together: `main` prints the command's usage and the message, as
    argparse does for an unknown option, and exits 2."""


def add_allow_code(parser: argparse.ArgumentParser, scripts: bool = True) -> None:
    """Add `--allow-code`: consent to run the code a scenario carries (a `[program]` source and, for a
    command that runs `scripts`, a Python script)."""
    carried = "a [program] source, a .py scenario" if scripts else "a [program] source; .py scenarios are refused"
    parser.add_argument("--allow-code", action="store_true",
                        help=f"run the Python code the scenario carries ({carried}); without it such a file is "
                             f"refused and its code shown. Give it only to files you trust")


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


def add_budget(parser: argparse.ArgumentParser, what: str = "the run") -> None:
    """Add `--max-memory SIZE` and `--max-messages N`: the memory and the work `what` may take."""
    parser.add_argument("--max-memory", metavar="SIZE", type=_size,
                        help=f"the most memory {what} may use, e.g. 4GiB or 500MB: a scenario or point whose "
                             f"estimate exceeds SIZE is refused before it runs, a run whose device memories would "
                             f"pass it is stopped, and a scenario's code (--allow-code) may grow the process by at "
                             f"most SIZE (default: half the machine's memory)")
    parser.add_argument("--max-messages", metavar="N", type=_messages, default=None,
                        help=f"the most messages {what} may be estimated to send, its work: beyond N it is refused "
                             f"before it runs, as it would take long (default: {sim.DEFAULT_MAX_MESSAGES:,})")


def budget_of(args: argparse.Namespace) -> tuple[int | None, int | None]:
    """`--max-memory` in bytes and `--max-messages` (None for the defaults)."""
    return args.max_memory, args.max_messages


def _size(text: str) -> int:
    """A positive size in bytes such as 4GiB or 500MB, for argparse (`sim.parse_bytes`)."""
    try:
        return sim.parse_bytes(text)
    except sim.InvalidArgumentError:
        raise argparse.ArgumentTypeError(f"--max-memory={text!r} must be a positive size such as 4GiB, 500MB or a "
                                         f"number of bytes") from None


def _messages(text: str) -> int:
    """A positive whole number of messages, for argparse (underscores and 1e7 allowed)."""
    try:
        number = float(text.replace("_", ""))
    except ValueError:
        number = float("nan")
    if not (1 <= number < 1e18) or number != int(number):
        raise argparse.ArgumentTypeError(f"--max-messages={text!r} must be a positive whole number, e.g. 10000000")
    return int(number)


def add_timeout(parser: argparse.ArgumentParser) -> None:
    """Add `--timeout SECONDS`: the longest the command may run before it is stopped with exit 2."""
    parser.add_argument("--timeout", metavar="SECONDS", type=_seconds, default=None,
                        help="stop the run after SECONDS of wall-clock time with exit 2 (default: no limit; at "
                             "most 1e8, about three years)")


def add_job_timeout(parser: argparse.ArgumentParser, what: str, then: str) -> None:
    """Add `--timeout SECONDS` (as `job_timeout_s`) to a command of many jobs: the longest one `what` may run
    before it is stopped on its worker; `then` says what becomes of it."""
    parser.add_argument("--timeout", metavar="SECONDS", type=_seconds, default=None, dest="job_timeout_s",
                        help=f"stop {what} still running after SECONDS of wall-clock time on its worker: {then} "
                             f"(default: no limit; at most 1e8)")


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
