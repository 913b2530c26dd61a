"""The trust model: a scenario file is data; the code it carries runs only with the user's consent.

A `[program]` source and a Python scenario are code. `scenarios.load` called from Python runs it (calling
it is the consent); the command line refuses it unless given `--allow-code`, and shows what would run.
Inside code that runs, `sys.exit` and a `KeyboardInterrupt` it raises are reported as the file's errors, not
obeyed; a Ctrl-C the user pressed meanwhile stays a KeyboardInterrupt.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import sim
from scenarios._errors import ScenarioError, Source

_SCRIPT_LINES = 20  # how much of a Python scenario the refusal shows
_ALLOW = "If you trust this file, add --allow-code to the command."


class CodeNotAllowedError(ScenarioError):
    """A scenario carries code (a `[program]` source, a Python script) and no consent was given to run it."""


class TimeLimitError(sim.MeshError):
    """A run outlasted its time limit (`--timeout`) and was stopped."""


def refuse_program(source: Source, code: str) -> CodeNotAllowedError:
    """The refusal of a `[program]`'s `source`, which the message shows in full (pointing at its line)."""
    error = source.error("program", "source", "[program] source is Python code, and a scenario's code runs only "
                                              "with consent: it was not run. It would run:")
    return CodeNotAllowedError(f"{error}\n{_shown(code.splitlines())}\n{_ALLOW}")


def refuse_script(path: str) -> CodeNotAllowedError:
    """The refusal of a Python scenario, with its path and first lines (the file must be readable)."""
    lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    rest = len(lines) - _SCRIPT_LINES
    more = f"\n    ... ({rest} more lines)" if rest > 0 else ""
    return CodeNotAllowedError(f"{path}: a Python scenario is code, and a scenario's code runs only with consent: "
                               f"it was not run. Its first lines:\n{_shown(lines[:_SCRIPT_LINES])}{more}\n{_ALLOW}")


def _shown(lines: list[str]) -> str:
    """`lines` indented, with control characters escaped: a terminal escape must not hide what would run."""
    return "\n".join("    " + "".join(c if c.isprintable() or c == "\t" else ascii(c)[1:-1] for c in line)
                     for line in lines)


@contextlib.contextmanager
def user_code(path: str) -> Iterator[None]:
    """Run the block as the scenario's own code: `sys.exit` or an interrupt inside it becomes a ScenarioError.

    Raises:
        ScenarioError: the code raised SystemExit (`sys.exit(...)`, `exit()`) or KeyboardInterrupt.
        KeyboardInterrupt: the user pressed Ctrl-C (SIGINT came) while the code ran.
    """
    pressed = []
    with _noting_interrupts(pressed):
        try:
            yield
        except SystemExit as error:
            raise ScenarioError(f"{path}: the scenario's code called sys.exit({error.code!r}); a scenario must not "
                                f"end meshsim: it finishes, or raises an error") from None
        except KeyboardInterrupt:
            if pressed:
                raise
            raise ScenarioError(f"{path}: the scenario's code was interrupted (KeyboardInterrupt) before it "
                                f"finished") from None


@contextlib.contextmanager
def _noting_interrupts(pressed: list[int]) -> Iterator[None]:
    """While the block runs (in the main thread, under Python's own Ctrl-C handler), a SIGINT appends to
    `pressed` and raises KeyboardInterrupt as that handler does; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def note(signum: int, frame: object) -> None:
        pressed.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
