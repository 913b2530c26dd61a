"""With `oracles.install_jax_fixes` the programs FINDINGS.md pins for findings 18, 19 and 20 give the correct
answer in JAX.

The pinning tests (tests/test_jax_coverage.py with tests/jax_vmap_axis_child.py) expect JAX 0.10.2's wrong
behaviour; here the same programs and larger ones run in a child process with 8 CPU devices and the fixes of
`oracles.jax_fixes._vmap_permute` installed (`jax_fixes_vmap_permute_child.py`), and this process, which
never imports jax, judges JAX's answers against ones worked out here with numpy from the docs: a ppermute
member no pair writes to gets zeros, an index along a tuple of axes is row-major in the tuple's order, and
every member of a pbroadcast gets the source's value.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from oracles.jax_fixes import FOLDER
from oracles.jax_fixes import _vmap_permute as vmap_permute

pytestmark = [
    pytest.mark.differential,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs the jax extra"),
]

CHILD = Path(__file__).resolve().parent / "jax_fixes_vmap_permute_child.py"
ROOT = CHILD.parent.parent
KEYS = {"number", "title", "summary", "expected", "actual", "known_by", "source_lines", "stock_failure", "gpu_tpu"}


@pytest.fixture(scope="module")
def fixed() -> dict[str, Any]:
    """The child's report: the fixes it installed and JAX's answer to every program."""
    done = subprocess.run([sys.executable, str(CHILD)], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def ok(fixed: dict[str, Any], name: str) -> Any:
    """JAX's answer to program `name`, which must have run."""
    status, *rest = fixed["answers"][name]
    assert status == "ok", f"{name}: {rest}"
    return rest[0]


def test_every_vmap_permute_fix_is_installed_and_has_its_folder(fixed):
    """The child installed every fix of `_vmap_permute.FIXES`; each has a folder with its reproducer, its diff
    against JAX's source, its report's text (every key, the number of its FINDINGS.md entry) and its upstream
    status."""
    assert fixed["installed"] == list(vmap_permute.FIXES)
    findings = (ROOT / "FINDINGS.md").read_text()
    for name in vmap_permute.FIXES:
        folder = FOLDER / name
        assert {"finding.toml", "fix.diff", "repro.py", "upstream.toml"} <= {p.name for p in folder.iterdir()}, name
        text = tomllib.loads((folder / "finding.toml").read_text())
        assert set(text) == KEYS and text["stock_failure"], name
        assert f"## {text['number']}. " in findings and f"[{name}]" in findings, name
        assert (folder / "fix.diff").read_text().startswith("--- a/jax/_src/"), name


def test_fixed_pbroadcast_over_a_vmap_axis(fixed):
    """Finding 20 (pinned by test_jax_coverage.py's test_jax_pbroadcast_over_a_vmap_axis_is_pinned: TypeError):
    with the fix, every member of the vmap axis holds the source's value, alone or inside a shard_map over 8
    devices; an operand the vmap does not batch (right before) is unchanged."""
    assert ok(fixed, "pbroadcast: vmap") == [1.0, 1.0]
    x = np.arange(48.0).reshape(16, 3)  # 'y' along axis 1, source 2
    assert ok(fixed, "pbroadcast: shard_map") == np.repeat(x[:, 2:], 3, axis=1).tolist()
    assert ok(fixed, "pbroadcast: unbatched") == [[1.0, 2.0]] * 3


def test_fixed_ppermute_with_a_partial_perm_over_a_vmap_axis(fixed):
    """Finding 19 (pinned by test_jax_coverage.py's test_jax_ppermute_partial_perm_over_a_vmap_axis_is_pinned:
    AssertionError): with the fix, a member no pair writes to gets zeros, the others their source's value, as
    the same call over a mesh axis of 3 devices gives; an operand the vmap does not batch reaches only the
    destinations; a full perm (right before) is unchanged."""
    assert ok(fixed, "ppermute partial: vmap") == [0.0, 1.0]
    x = np.arange(6.0).reshape(2, 3)
    expected = np.zeros_like(x)
    for src, dst in [(0, 2), (2, 1)]:
        expected[:, dst] = x[:, src]
    assert ok(fixed, "ppermute partial: vmap axis 1") == expected.tolist() == ok(fixed, "ppermute partial: on a mesh")
    assert ok(fixed, "ppermute partial: unbatched") == [[0.0, 0.0], [0.0, 0.0], [1.0, 2.0]]
    assert ok(fixed, "ppermute partial: full perm") == [2.0, 0.0, 1.0]
