"""`in_child`: run one test module's function in a child interpreter.

A `scenarios.sweep.deadline` timer that fires raises in a thread of the process it runs in; after it has
fired in the suite's own worker process, later Hypothesis searches there were seen to stall, so the tests
whose timers fire run their bodies apart.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def in_child(test_file: str, name: str) -> None:
    """Run `name()` of the test module at `test_file` in a child interpreter; fail with its stderr."""
    path = Path(test_file).resolve()
    code = f"import sys; sys.path.insert(0, {str(path.parent)!r}); import {path.stem} as t; t.{name}()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=path.parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
