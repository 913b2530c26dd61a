"""A JAX child process for tests that need JAX started with flags of its own (`XLA_FLAGS` must be set before
JAX initialises): the test side (`Child`, `started`) and the child side (`serve`), speaking the oracle's
message protocol, one round trip per batch of jobs."""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from oracles._protocol import read_message, write_message


class Child:
    """A running child `script`: send a batch of jobs, get one reply per job."""

    def __init__(self, script: Path, *flags: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(script), *flags], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        self.ready = read_message(self.proc.stdout)

    def ask(self, jobs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        write_message(self.proc.stdin, jobs)
        return read_message(self.proc.stdout)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def started(script: Path, *flags: str) -> Iterator[Child]:
    """A child for the length of a fixture."""
    child = Child(script, *flags)
    try:
        yield child
    finally:
        child.close()


def guarded(answer: Callable[[dict[str, Any]], Any], job: dict[str, Any]) -> Any:
    """`answer(job)`, or ('error', type, message) with the traceback on the test's captured stderr."""
    try:
        return answer(job)
    except Exception as error:
        traceback.print_exc()
        return ("error", type(error).__name__, str(error))


def serve(answer: Callable[[dict[str, Any]], Any], ready: dict[str, Any]) -> None:
    """The child's loop: announce `ready`, then answer batches until stdin closes. Anything else printing to
    stdout (JAX, XLA) goes to stderr."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    write_message(replies, ("ready", ready))
    while (request := read_message(sys.stdin.buffer)) is not None:
        write_message(replies, [answer(job) for job in request])
