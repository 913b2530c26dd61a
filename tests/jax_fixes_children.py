"""What the fixed-JAX tests share: running a child script that installs fixes and answers programs, reading
its answers, and the keys every finding's `finding.toml` holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

KEYS = {"number", "title", "summary", "expected", "actual", "known_by", "source_lines", "stock_failure", "gpu_tpu"}


def child_report(child: Path) -> dict[str, Any]:
    """The JSON report of `python CHILD` (8 CPU devices, its fixes installed): the fixes and every answer."""
    done = subprocess.run([sys.executable, str(child)], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def ok(fixed: dict[str, Any], name: str) -> Any:
    """JAX's answer to program `name`, which must have run."""
    status, *rest = fixed["answers"][name]
    assert status == "ok", f"{name}: {rest}"
    return rest[0]
