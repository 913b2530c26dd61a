"""The `meshsim` command line: one module per command, on top of every other layer.

Each command module gives `add_parser(commands)`, which adds its subparser and sets `execute`, the function
that runs the parsed arguments and returns the exit code. Only the command line uses rich.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib.metadata
import os
import sys
from collections.abc import Sequence

import sim
from layouts import MeshError
from scenarios.cli import _crash, campaign, check, draw, explain, report, run, sweep, trace
from scenarios.cli._limits import UsageError, time_limit
from scenarios.cli.render import printable

_COMMANDS = (run, explain, check, trace, draw, sweep, campaign, report)
_ONE_RUN = ("run", "explain", "check", "trace", "draw")  # the commands that simulate one scenario
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # an output the disk has no room for: the user's to fix

__all__ = ["main", "parser"]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: the process arguments), run the command and return the exit code.

    Returns:
        0 on success; 1 when a check or campaign found a disagreement; 2 when the scenario file is
        unreadable, breaks the format, carries code and `--allow-code` was not given, outlasts `--timeout`,
        or the simulator rejects its inputs (the message, naming file, field and line, goes to stderr); 3
        for an error meshsim did not expect (one line on stderr with the path of a report holding the
        traceback, `_crash.save_report`); 130 when interrupted. Bad command-line arguments, and options that
        do not go together (`UsageError`), exit with 2 through argparse, with the command's usage. A reader
        of the output that goes away (`| head`) ends the command quietly with 0; an output the disk has no
        room for is one line and 2.
    """
    args = None
    top, commands = _parsers()
    try:
        args, extra = top.parse_known_args(argv)
        if extra:  # said by the command's own parser, with its usage
            commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
        with time_limit(getattr(args, "timeout", None), getattr(args, "scenario", "meshsim")), _collector(args):
            code = args.execute(args)
        sys.stdout.flush()  # what is still buffered fails here, not unseen as the interpreter exits
        return code
    except UsageError as error:  # options that do not go together: argparse's usage and error, exit 2
        commands.choices[args.command].error(str(error))
    except MeshError as error:
        print(f"meshsim: error: {printable(str(error), multiline=True)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C in a command that keeps nothing to resume (sweep and campaign say how)
        print(f"meshsim: interrupted; {getattr(args, 'command', 'meshsim')} stopped before it finished",
              file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`meshsim run ... | head`): nothing left to say
        _drop_output()
        return 0
    except OSError as error:
        if error.errno not in _NO_ROOM:
            return _internal_error(error, argv)
        _drop_output()
        print(f"meshsim: error: cannot write the output: {error.strerror}", file=sys.stderr)
        return 2
    except Exception as error:  # a bug: one line here, the traceback in a report, never on the terminal
        return _internal_error(error, argv)


def _internal_error(error: Exception, argv: Sequence[str] | None) -> int:
    """Say an error meshsim did not expect in one line, its traceback in a report (`_crash`); exit code 3."""
    print(f"meshsim: internal error: {_crash.one_line(error)}; {_crash.save_report(error, argv)}", file=sys.stderr)
    return 3


def _drop_output() -> None:
    """Point standard output at the null device: the output that could not be written goes nowhere, and
    the interpreter's last flush of it succeeds instead of failing with exit 120."""
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _collector(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """Python's cyclic collector paused for a command on one TOML scenario: what it makes of the run (tables,
    pictures, timelines) is a great many acyclic objects that collections would scan again and again
    (`sim.gc_paused`). Sweeps, campaigns and Python scenarios (the user's own code) keep it running."""
    one_run = args.command in _ONE_RUN and not str(getattr(args, "scenario", "")).endswith(".py")
    return sim.gc_paused() if one_run else contextlib.nullcontext()


def parser() -> argparse.ArgumentParser:
    """The `meshsim` argument parser: one subparser per command module."""
    return _parsers()[0]


def _parsers() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """The `meshsim` argument parser and its commands' subparsers (`choices`, by command name)."""
    top = argparse.ArgumentParser(prog="meshsim", description="Run JAX collectives on a simulated device mesh.")
    top.add_argument("--version", action="version", version=f"meshsim {_version()}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in _COMMANDS:
        command.add_parser(commands)
    return top, commands


def _version() -> str:
    try:
        return importlib.metadata.version("meshsim")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"
