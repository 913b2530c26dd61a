"""The documentation site builds with no warnings, every notebook and code cell executed (`make docs`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_build_with_warnings_as_errors(tmp_path):
    """sphinx -W over docs/: every page and executed cell builds; a warning or a raising cell fails it."""
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           "-d", str(tmp_path / "doctrees"), str(ROOT / "docs"), str(tmp_path / "html")],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-6000:]
    assert (tmp_path / "html" / "index.html").exists()
