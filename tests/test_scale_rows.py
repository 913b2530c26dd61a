"""`benchmarks/scale.py`'s rows (`benchmarks/_scale_cases.py`): issue 26's table and one row per algorithm of
all_gather, psum and psum_scatter, each workload's numpy evaluation equal to the simulator's run on a small
mesh (the check the benchmark makes at full size), and the raw SimPy rate it compares against."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import collectives
import sim

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _scale_cases as cases


def test_every_algorithm_of_the_three_collectives_has_a_1024_device_row():
    """One row per registered algorithm of all_gather, psum and psum_scatter over 1024 devices, and the
    issue's seven cases before them; no row twice (the ring all_gather is one of the issue's), so keys are
    unique (`--only` picks by key)."""
    rows = cases.rows()
    for op in ("all_gather", "psum", "psum_scatter"):
        names = {row.algorithm for row in rows if row.op == op and row.devices == 1024}
        assert names == {a.name for a in collectives.definition(op).algorithms}
    assert [(row.op, row.devices) for row in rows[:7]] == [
        ("all_to_all", 1024), ("all_to_all", 2048), ("ragged_all_to_all", 1024), ("psum", 4096),
        ("all_gather", 4096), ("all_gather", 1024), ("ppermute_program", 256)]
    assert len({row.key for row in rows + cases.QUICK}) == len(rows + cases.QUICK)


@pytest.mark.parametrize(("op", "algorithm"), [("all_to_all", "direct"), ("ragged_all_to_all", "direct"),
                                               ("psum", "direct"), ("psum", "ring"), ("all_gather", "ring"),
                                               ("psum_scatter", "recursive_halving"), ("ppermute_program", "direct")])
def test_a_workload_and_its_numpy_evaluation_agree_on_8_devices(op, algorithm):
    """The simulator's global output equals the row's numpy evaluation bit for bit; a wrong evaluation
    (the input itself) would not."""
    inputs, evaluate = cases.workload(op, 8)
    f = sim.shard_map(cases.body(op, 8, algorithm, collectives), mesh=sim.Mesh({"x": 8}),
                      in_specs=tuple(sim.P("x") for _ in inputs), out_specs=sim.P("x"), check_vma=False)
    out = f(*inputs)
    np.testing.assert_array_equal(out, evaluate(*inputs))
    assert not np.array_equal(out, inputs[0]) or out.shape != inputs[0].shape


def test_raw_simpy_rate_is_measured():
    """The SimPy reference is a positive rate measured now, not a constant."""
    assert cases.simpy_events_per_s(processes=50, steps=20) > 1000
