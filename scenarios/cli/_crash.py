"""An error meshsim did not expect: one line for the terminal, the traceback in a report file.

    try:
        ...
    except Exception as error:
        print(f"meshsim: internal error: {one_line(error)}; {save_report(error, argv)}", file=sys.stderr)

The report goes to `$XDG_STATE_HOME/meshsim/` (`~/.local/state/meshsim/` when it is unset), else to a
directory of the user's own in the temporary directory; the file is created new, readable by its owner only
(mode 0600), since the command line and the traceback may name private paths.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

MAX_LINE = 300  # characters of the error's message on the terminal


def one_line(error: BaseException) -> str:
    """The error's type and message on one line of printable characters, cut to `MAX_LINE`."""
    text = " ".join(str(error).split())
    text = "".join(c if c.isprintable() else "?" for c in text)
    text = text if len(text) <= MAX_LINE else text[:MAX_LINE - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def save_report(error: BaseException, argv: Sequence[str] | None) -> str:
    """Write a report of `error` (its traceback, the command line, the versions) and say where it went.

    Returns:
        'a report is in PATH; ...', or 'no report could be saved (reason)' when no directory takes it:
        the caller prints it whatever happens, so this never raises for a file it cannot write.
    """
    text = _report(error, argv)
    reasons = []
    for directory in _directories():
        try:
            path = _write(directory, text)
        except OSError as problem:
            reasons.append(f"{directory}: {problem.strerror or problem}")
            continue
        return f"the traceback is in {path}; please report it with the command that gave it"
    return f"no report could be saved ({'; '.join(reasons)})"


def _report(error: BaseException, argv: Sequence[str] | None) -> str:
    """The report's text: when, which meshsim and Python, the command line, the traceback."""
    from scenarios.cli import _version

    command = list(sys.argv if argv is None else ["meshsim", *argv])
    lines = [f"meshsim {_version()} internal error at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}",
             f"python {sys.version.split()[0]} on {platform.platform()}", f"argv: {command!r}", "",
             *traceback.format_exception(error)]
    return "\n".join(line.rstrip("\n") for line in lines) + "\n"


def _directories() -> list[Path]:
    """Where a report may go, in order: the user's state directory, then the temporary directory's."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    user = getattr(os, "getuid", lambda: "user")()
    return [Path(state) / "meshsim", Path(tempfile.gettempdir()) / f"meshsim-{user}"]


def _write(directory: Path, text: str) -> Path:
    """`text` in a new file of `directory` (made owner-only when created, refused when another user owns it),
    readable by its owner only."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if hasattr(os, "getuid") and directory.stat().st_uid != os.getuid():
        raise PermissionError(f"{directory} belongs to another user")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for attempt in range(100):
        path = directory / f"crash-{stamp}-{os.getpid()}-{attempt}.txt"
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            continue
        with os.fdopen(descriptor, "w", encoding="utf-8", errors="backslashreplace") as stream:
            stream.write(text)
        return path
    raise FileExistsError(f"100 reports named crash-{stamp}-{os.getpid()}-* already exist")
