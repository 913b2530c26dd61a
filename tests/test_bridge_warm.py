"""A warm `simulate_jax` call simulates exactly what the first call of the same jitted program simulated: the
same output bytes, every column of every run's trace, the end times, each device's typed program, the labels
and the diagnostics, whatever the bridge keeps between calls (the trace, segment plans, compiled segments,
typed segments and the mapped programs of `oracles._bridge_mapped`). JAX runs in `bridge_warm_child.py` on 4
CPU devices; the comparison is shown to fail where one byte, one trace entry or one program differs. Each
compiled case is also called with its segments' equations recorded as they run, not when a program is read:
the same in every part."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.differential
CHILD = Path(__file__).with_name("bridge_warm_child.py")
CASES = ("moe forward", "moe grad", "collective matmul", "moe forward, roofline", "collective matmul, roofline",
         "moe forward, sanitize", "moe forward, strict", "collective matmul, stepwise")


@pytest.fixture(scope="module")
def calls() -> dict:
    if importlib.util.find_spec("jax") is None:
        pytest.skip("needs the jax extra: pip install -e '.[jax]'")
    env = dict(os.environ, PYTHONPATH=str(CHILD.parents[1]))
    done = subprocess.run([sys.executable, str(CHILD)], capture_output=True, text=True, env=env, timeout=900,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def differences(first: dict, other: dict) -> list[str]:
    """Where two calls' summaries differ: outputs, labels, diagnostics, the number of runs, and per run each
    trace column, the end time and each device's program."""
    found = [part for part in ("outputs", "labels", "diagnostics") if first[part] != other[part]]
    if len(first["runs"]) != len(other["runs"]):
        found.append(f"{len(first['runs'])} runs against {len(other['runs'])}")
    for k, (a, b) in enumerate(zip(first["runs"], other["runs"])):
        found += [f"run {k}: trace column {name}" for name in sorted(set(a["columns"]) | set(b["columns"]))
                  if a["columns"].get(name) != b["columns"].get(name)]
        if a["end_time_s"] != b["end_time_s"]:
            found.append(f"run {k}: end time {a['end_time_s']} against {b['end_time_s']}")
        found += [f"run {k}: device {d}'s program" for d, (p, q) in enumerate(zip(a["programs"], b["programs"]))
                  if p != q]
        found += [f"run {k}: device {d}'s variable links" for d, (p, q) in enumerate(zip(a["links"], b["links"]))
                  if p != q]
    return found


@pytest.mark.parametrize("case", CASES)
def test_warm_call_simulates_what_the_first_did(calls: dict, case: str) -> None:
    """Every warm call of the case equals its first call in outputs, traces, times, programs and reports."""
    first, *warm = calls[case]
    assert warm
    assert first["runs"] and first["runs"][0]["columns"]["src"], "the case sent no message"
    for k, other in enumerate(warm, 2):
        assert differences(first, other) == [], f"{case}: call {k}"


@pytest.mark.parametrize("case", [case for case in CASES if "stepwise" not in case])
def test_equations_recorded_when_read_equal_those_recorded_as_run(calls: dict, case: str) -> None:
    """Each compiled segment's equations, made when the program is read (`record_late`), are those made as
    the segment runs (`record_now`): the same text and the same variable objects read and written, and so
    are the outputs, traces, times and reports of the two calls."""
    (first, *_), (now,) = calls[case], calls[f"{case}, recorded as run"]
    assert differences(first, now) == []
    assert any(len(links) > 100 for run in now["runs"] for links in run["links"])


def test_the_runs_hold_messages_and_programs(calls: dict) -> None:
    """The gradient simulates a forward and a backward shard_map; every run traced messages and typed programs
    with equations (so the comparison above compares something)."""
    assert len(calls["moe grad"][0]["runs"]) == 2
    for case in CASES:
        for run in calls[case][0]["runs"]:
            assert len(run["columns"]["src"]) > 0 and all("=" in program for program in run["programs"]), case


def test_the_comparison_fails_where_a_call_differs(calls: dict) -> None:
    """One changed output byte, trace entry, end time or program line is found, and so are two programs."""
    first = calls["moe forward"][0]
    assert differences(first, calls["collective matmul"][0])
    changed = copy.deepcopy(first)
    dtype, shape, data = changed["outputs"][0]
    changed["outputs"][0] = [dtype, shape, ("1" if data[0] == "0" else "0") + data[1:]]
    assert differences(first, changed) == ["outputs"]
    changed = copy.deepcopy(first)
    column = changed["runs"][0]["columns"]["arrival_time_s"]
    column[-1] = repr(float(column[-1]) * 2 + 1)
    assert differences(first, changed) == ["run 0: trace column arrival_time_s"]
    changed = copy.deepcopy(first)
    changed["runs"][0]["end_time_s"] = repr(float(changed["runs"][0]["end_time_s"]) + 1e-9)
    assert len(differences(first, changed)) == 1
    changed = copy.deepcopy(first)
    program = changed["runs"][0]["programs"][2]
    changed["runs"][0]["programs"][2] = program.replace(" = ", " = neg ", 1)
    assert differences(first, changed) == ["run 0: device 2's program"]
    changed = copy.deepcopy(first)
    links = changed["runs"][0]["links"][1]
    links[-1] = links[-1] + 1
    assert differences(first, changed) == ["run 0: device 1's variable links"]
