"""The file a command writes with `-o`: checked before anything runs, so a bad path costs no simulation."""

from __future__ import annotations

import os
from pathlib import Path

from scenarios import ScenarioError


def check_writable(output: Path, example: str) -> None:
    """Raise `ScenarioError` unless a file can be written at `output`; `example` is a file name to suggest
    when `output` is a directory (e.g. 'trace.json').

    Raises:
        ScenarioError: `output` is a directory, its directory does not exist, or either refuses writing.
    """
    folder = output.parent if str(output.parent) else Path(".")
    if output.is_dir():
        raise ScenarioError(f"-o {output}: is a directory; give a file name such as {output / example}")
    if not folder.is_dir():
        raise ScenarioError(f"-o {output}: the directory {folder} does not exist")
    if not os.access(folder, os.W_OK) or (output.exists() and not os.access(output, os.W_OK)):
        raise ScenarioError(f"-o {output}: permission denied")
