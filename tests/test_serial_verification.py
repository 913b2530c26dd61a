"""`oracles.serial_mlir_verification()`: a lowering that fails verification raises in every process.

Stock JAX 0.10.2 verifies a lowered module on a thread pool; when a check fails on a worker thread the MLIR
bindings deadlock, and the lowering of FINDINGS.md 24's ragged form hung in 4 of 6 processes (PYTHONHASHSEED 0,
1, 2, 5; 3 and 4 raised). With the guard, each of those processes raises the verifier's error: a process that
hung would be stopped by the timeout and fail the test. `oracles.compare_jax` of the same program, which hung in
both processes tried on stock JAX, raises JAX's error too: the bridge installs the guard as it loads.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.differential,
              pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs the jax extra")]

ROOT = Path(__file__).resolve().parent.parent


def child(mode: str, seed: str) -> dict:
    """The child's report (a hang would run into the timeout and fail the test)."""
    done = subprocess.run([sys.executable, "tests/serial_verify_child.py", mode], capture_output=True, text=True,
                          timeout=180, check=False, cwd=ROOT,
                          env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONHASHSEED": seed})
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["installed"] and not found["again"], found
    return found


@pytest.mark.parametrize("seed", ["0", "1", "2", "5"])
def test_a_lowering_that_fails_verification_raises_instead_of_hanging(seed):
    """The lowering ends in JAX's verifier error: the residual specs of FINDINGS.md 24 make a comparison of a
    2-element and a 1-element offset array."""
    ended = child("lower", seed)["ended"]
    assert ended.startswith("raised ValueError: Cannot lower jaxpr with verifier errors:"), ended
    assert "'stablehlo.compare' op all non-scalar operands/results must have the same shape" in ended, ended


@pytest.mark.parametrize("seed", ["0", "1"])
def test_compare_jax_of_a_program_jax_cannot_lower_raises_jax_error(seed):
    """compare_jax (the bridge loaded, the guard with it) ends in JAX's own lowering error: stock JAX hung on this
    call in both processes tried."""
    ended = child("compare", seed)["ended"]
    assert ended.startswith("raised ValueError: Cannot lower jaxpr with verifier errors:"), ended
