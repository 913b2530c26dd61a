"""The bridge runs what JAX runs, bit for bit: tutorial-style programs with `mesh=`, `jax.set_mesh` of Auto and
Explicit meshes, forward, under `jax.grad` and `jax.vmap`, each equal to jitted JAX, and each simulating with
its local work compiled what it simulates with every equation evaluated on its own. The rest of the bridge's
reach (JAX's answer with the truth beside it, the MoE layer, keys, what is not simulated, every primitive's
status) is in `test_bridge_reach.py`, whose worker runs beside this one.

JAX runs in one worker process with 8 CPU devices (`tests/bridge_tutorial.py`); this process never imports jax.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest
from bridge_batches import result, run_batches

# the worker traces the same local work again and again (each run's segments, each generated program's
# forms): the run's compilation cache (conftest.py) compiles each program once
pytestmark = pytest.mark.differential

WORKER = Path(__file__).resolve().parent / "bridge_tutorial.py"
BATCHES = ("corpus",)
WAYS = {"mesh=", "set_mesh Auto", "set_mesh Explicit"}
# The rows whose bits differ from jitted JAX's, by a few ulps, because XLA fuses across a collective: it
# compiles the whole jitted program as one module and recomputes a product after the all-reduce, inside the
# fusion that subtracts the mean, as one fused multiply-add, where the bridge (which compiles the work between
# collectives as JAX compiles it) rounds the product before the collective; test_bridge_reach.py's
# `test_fusion_across_a_collective_is_the_only_difference` reproduces it in plain JAX.
FUSED = {("pmap migration", "vmap")}


@pytest.fixture(scope="module")
def results() -> dict:
    """Every batch's result from one worker process with 8 CPU devices."""
    return run_batches(WORKER, BATCHES, 900)


def test_every_tutorial_program_runs_every_way(results):
    """Each of the eighteen programs runs through the bridge with mesh=, with jax.set_mesh of an Auto mesh and
    of an Explicit mesh (inputs placed by their specs), in every form that applies, and compare_jax agrees
    (bit for bit or, for the fused rows, within float32 rounding)."""
    rows = result(results, "corpus")
    errors = [f"{name} / {way}: {report}" for name, way, form, *_, report, _ in rows if form == "error"]
    assert not errors, "\n".join(errors)
    programs = {name for name, *_ in rows}
    assert len(programs) == 18
    for name in programs:
        assert {way for n, way, *_ in rows if n == name} == WAYS, name
    forms = collections.Counter(form for _, _, form, *_ in rows)
    assert forms["forward"] == 54 and forms["grad"] >= 48 and forms["vmap"] >= 45, forms


def test_tutorial_programs_equal_jitted_jax_bit_for_bit(results):
    """Every row is bit-identical to jitted JAX except the rows named in FUSED, where XLA fuses across a
    collective; those agree within float32 rounding, and each way of giving the mesh gives the same verdict."""
    rows = result(results, "corpus")
    differing = {(name, form) for name, _, form, _, identical, *_ in rows if not identical}
    assert differing <= FUSED, differing - FUSED
    for name, _, form, _, identical, _, _, report, _ in rows:
        if not identical:
            diffs = [float(d) for d in re.findall(r"max \|diff\| ([0-9.e+-]+)", report)]
            assert diffs and max(diffs) < 1e-6, f"{name} {form}: {report}"
    identical = sum(1 for row in rows if row[4])
    assert identical >= len(rows) - 3 * len(FUSED), identical
    verdicts = collections.defaultdict(set)
    for name, _, form, _, same, *_ in rows:
        verdicts[(name, form)].add(same)
    assert all(len(v) == 1 for v in verdicts.values()), verdicts


def test_compiled_segments_simulate_what_stepwise_evaluation_simulates(results):
    """Every corpus program with mesh=, in every form, run with its local work compiled and with each
    equation evaluated on its own (compiled=False): the same runs, every trace column equal, the same end
    times, the same collective calls with the same types on every device, outputs of the same dtypes and
    shapes."""
    rows = [row for row in result(results, "corpus") if row[1] == "mesh="]
    assert len(rows) >= 40
    differing = {(name, form): differences for name, _, form, *_, differences in rows if differences}
    assert not differing, differing


def test_every_gradient_simulates_its_forward_and_backward_runs(results):
    """Every corpus program under jax.grad gives two simulated runs, the forward and the backward shard_map."""
    rows = result(results, "corpus")
    assert all(runs == 2 for _, _, form, _, _, _, runs, *_ in rows if form == "grad")
