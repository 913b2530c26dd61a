"""The JAX stage: run `jax_worker.py` in a fresh process with 8 CPU virtual devices and read its report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _stages import ResultMismatch
from _timing import Timing, check_repeat
from _workload import DEVICES, Workload

WORKER = Path(__file__).with_name("jax_worker.py")


class WorkerFailed(RuntimeError):
    """The JAX worker process exited with an error or printed no report."""


def worker_env() -> dict[str, str]:
    """This process's environment with XLA asked for `DEVICES` CPU devices (set before JAX starts)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    return env


def run_worker(case: str, workload: Workload, repeat: int) -> dict:
    """Run the worker for `case` on `workload` and return its JSON report."""
    command = [sys.executable, str(WORKER), "--case", case, "--rows", str(workload.rows),
               "--repeat", str(check_repeat(repeat))]
    done = subprocess.run(command, env=worker_env(), capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise WorkerFailed(f"{' '.join(command)} exited with {done.returncode}:\n{done.stderr.strip()[-2000:]}")
    return json.loads(lines[-1])


def time_jax(case: str, workload: Workload, repeat: int, expected_digest: str) -> Timing:
    """Best-of-`repeat` wall time of JAX's `case`; its output digest must equal `expected_digest`."""
    report = run_worker(case, workload, repeat)
    if report["digest"] != expected_digest:
        raise ResultMismatch(f"jax: {case}: output digest {report['digest']} differs from numpy's {expected_digest}")
    path = "the real op" if report["path"] == "real" else (
        "XLA:CPU cannot run the op: timed its decomposition into a gather, tiled all_to_alls and a "
        "gather-select (benchmarks/_jax_ragged.py)")
    note = f"{path}; jax {report['jax']}, {report['devices']}, compile {report['compile_s']:.2f} s (not timed)"
    if report.get("peak_resident_gib") is not None:
        note += f", worker peak resident memory {report['peak_resident_gib']:.2f} GiB"
    return Timing("jax", tuple(report["runs_s"]), "digest equals numpy's", note=note)
