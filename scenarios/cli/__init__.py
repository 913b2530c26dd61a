"""The `meshsim` command line: one module per command, on top of every other layer.

Each command module gives `add_parser(commands)`, which adds its subparser and sets `execute`, the function
that runs the parsed arguments and returns the exit code. Only the command line uses rich.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import sys
from collections.abc import Sequence

import sim
from layouts import MeshError
from scenarios.cli import _crash, campaign, check, draw, explain, report, run, sweep, trace
from scenarios.cli._limits import time_limit
from scenarios.cli.render import printable

_COMMANDS = (run, explain, check, trace, draw, sweep, campaign, report)
_ONE_RUN = ("run", "explain", "check", "trace", "draw")  # the commands that simulate one scenario

__all__ = ["main", "parser"]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` (default: the process arguments), run the command and return the exit code.

    Returns:
        0 on success; 1 when a check or campaign found a disagreement; 2 when the scenario file is
        unreadable, breaks the format, carries code and `--allow-code` was not given, outlasts `--timeout`,
        or the simulator rejects its inputs (the message, naming file, field and line, goes to stderr); 3
        for an error meshsim did not expect (one line on stderr with the path of a report holding the
        traceback, `_crash.save_report`); 130 when interrupted. Bad command-line arguments exit with 2
        through argparse.
    """
    args = None
    try:
        args = parser().parse_args(argv)
        with time_limit(getattr(args, "timeout", None), getattr(args, "scenario", "meshsim")), _collector(args):
            return args.execute(args)
    except MeshError as error:
        print(f"meshsim: error: {printable(str(error), multiline=True)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C in a command that keeps nothing to resume (sweep and campaign say how)
        print(f"meshsim: interrupted; {getattr(args, 'command', 'meshsim')} stopped before it finished",
              file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`meshsim run ... | head`): nothing left to say
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:  # a bug: one line here, the traceback in a report, never on the terminal
        print(f"meshsim: internal error: {_crash.one_line(error)}; {_crash.save_report(error, argv)}",
              file=sys.stderr)
        return 3


def _collector(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """Python's cyclic collector paused for a command on one TOML scenario: what it makes of the run (tables,
    pictures, timelines) is a great many acyclic objects that collections would scan again and again
    (`sim.gc_paused`). Sweeps, campaigns and Python scenarios (the user's own code) keep it running."""
    one_run = args.command in _ONE_RUN and not str(getattr(args, "scenario", "")).endswith(".py")
    return sim.gc_paused() if one_run else contextlib.nullcontext()


def parser() -> argparse.ArgumentParser:
    """The `meshsim` argument parser: one subparser per command module."""
    top = argparse.ArgumentParser(prog="meshsim", description="Run JAX collectives on a simulated device mesh.")
    top.add_argument("--version", action="version", version=f"meshsim {_version()}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in _COMMANDS:
        command.add_parser(commands)
    return top


def _version() -> str:
    try:
        return importlib.metadata.version("meshsim")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"
