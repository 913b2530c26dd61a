"""The bridge tests' JAX side: a worker script run once per test module in a process with 8 CPU devices,
its batches' results read back (`run_batches`), each one's value or its failure (`result`)."""

from __future__ import annotations

import importlib.util
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest


def run_batches(worker: Path, batches: tuple[str, ...], timeout_s: float) -> dict:
    """Every batch's (status, value) from one run of `worker` with 8 CPU devices (skipped without jax)."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("needs the jax extra: pip install -e '.[jax]'")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(worker.parents[1]), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(worker), *batches], capture_output=True, env=env, timeout=timeout_s,
                          check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return pickle.loads(done.stdout)


def result(results: dict, name: str):
    """Batch `name`'s value; its failure if it failed."""
    status, value = results[name]
    assert status == "ok", value
    return value
