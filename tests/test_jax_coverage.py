"""How much of JAX's collective rules the rules campaign runs (benchmarks/jax_coverage.py), and the findings
its vmap and control_flow programs and the bridge met (FINDINGS.md 17-30), pinned.

Both run in child processes (the benchmark runs the campaign under coverage.py with 8 CPU devices; the
findings' programs need 4); this process never imports jax.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [
    pytest.mark.differential,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None or importlib.util.find_spec("coverage") is None,
                       reason="needs the jax and test extras"),
]

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def psum_coverage(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("coverage") / "rows.json"
    run("benchmarks/jax_coverage.py", "--ops", "psum", "pbroadcast", "--kinds", "transpose", "vmap", "--json", str(out))
    return json.loads(out.read_text())


def row(report: dict, function: str) -> dict:
    [found] = [r for r in report["rows"] if r["function"] == function]
    return found


def test_coverage_is_measured_per_rule_function_found_in_jax_registries(psum_coverage):
    """The campaign of psum and pbroadcast under coverage.py: the rules JAX registers for them are rows (found
    in its tables, not listed by hand), the ones the campaign runs are covered (pbroadcast's transpose whole), a
    rule no program reaches is not (pbroadcast's GPU lowering), with its reason, and rules of other
    primitives are rows too, unreached."""
    transpose = row(psum_coverage, "_pbroadcast_transpose_rule")
    assert transpose["registered"] == ["pbroadcast transpose"]
    assert transpose["group"] == "collectives meshsim models"
    assert transpose["lines_run"] == transpose["lines"] > 0
    psum = row(psum_coverage, "_psum_transpose_rule")  # all but the branch for integer axes
    assert 0 < psum["lines_run"] < psum["lines"] and psum["registered"] == ["psum transpose"]
    lowering = row(psum_coverage, "_pbroadcast_lowering")
    assert lowering["lines_run"] == 0 and lowering["missing"]
    batcher = row(psum_coverage, "_pbroadcast_batcher")
    assert 0 < batcher["lines_run"] <= batcher["lines"]
    gather = row(psum_coverage, "_all_gather_transpose_rule")
    assert gather["lines_run"] == 0, "all_gather is not in this campaign"
    assert row(psum_coverage, "_shard_map_transpose")["group"] == "shard_map"
    assert row(psum_coverage, "_unreduced_psum_abstract_eval")["group"] == "outside meshsim's model"
    totals = psum_coverage["totals"]["parallel.py"]
    assert 0 < totals["covered_lines"] < totals["num_statements"]
    assert psum_coverage["new"] == []


def test_every_unreached_rule_of_the_benchmark_table_has_a_reason():
    """Every function the BENCHMARKS.md table shows with unreached lines or branches says why."""
    text = (ROOT / "BENCHMARKS.md").read_text()
    table = text[text.index("## Coverage of JAX's rules"):]
    cells = [[cell.strip() for cell in line.split("|")[1:-1]] for line in table.splitlines() if line.startswith("| `")]
    rows = [c for c in cells if len(c) == 6]  # function, registered as, lines, branches, unreached, why
    assert len(rows) > 60
    unexplained = [cells[0] for cells in rows if cells[4] != "-" and cells[5] in ("", "not judged")]
    assert unexplained == []


@pytest.fixture(scope="module")
def vmap_axis() -> dict:
    return json.loads(run("tests/jax_vmap_axis_child.py").stdout)


def test_jax_psum_over_a_vmap_axis_inside_shard_map_is_pinned(vmap_axis):
    """Pins FINDINGS.md 17: in a check_vma=True shard_map, psum over a vmap axis of a value not batched along
    it raises AssertionError (core.pvary drops the vmap axis, not a mesh axis); unchecked, the same program
    gives each member 3 * x, as a vmap without shard_map does."""
    assert vmap_axis["vmap-axis-typed-as-mesh-axis"].startswith("raised AssertionError")
    assert vmap_axis["vmap-axis-typed-as-mesh-axis unchecked"] == [[3.0, 6.0]] * 3


def test_jax_ppermute_over_a_tuple_with_a_vmap_axis_is_pinned(vmap_axis):
    """Pins FINDINGS.md 18, a silent wrong answer: ppermute over ('x', 'y') with 'y' a vmap axis applies the
    perm to 'x' alone; the same call with 'y' a mesh axis swaps (x0, y0) and (x0, y1)."""
    assert vmap_axis["vmap-axis-ppermute-tuple"] == [[2.0, 3.0], [0.0, 1.0]]
    assert vmap_axis["vmap-axis-ppermute-tuple on a mesh"] == [[1.0, 0.0], [0.0, 0.0]]


def test_jax_ppermute_partial_perm_over_a_vmap_axis_is_pinned(vmap_axis):
    """Pins FINDINGS.md 19: a partial perm over a vmap axis (the docs allow it: non-destinations get zeros,
    here [0, 1]) raises AssertionError."""
    assert vmap_axis["vmap-axis-ppermute-partial-perm"] == (
        "raised AssertionError: Permutation doesn't match the axis size!")


def test_jax_pbroadcast_over_a_vmap_axis_is_pinned(vmap_axis):
    """Pins FINDINGS.md 20: pbroadcast over a vmap axis (correct: [1, 1]) raises TypeError (a list handed to
    take)."""
    assert vmap_axis["vmap-axis-pbroadcast-take"].startswith("raised TypeError: take requires ndarray")


def test_jax_all_to_all_of_an_unbatched_operand_over_a_vmap_axis_is_pinned(vmap_axis):
    """Pins FINDINGS.md 21: all_to_all over a vmap axis of an unbatched x gives every member [x, x] (shape
    (2, 2)); with x batched as [x, x] it gives the right [1, 1] and [2, 2]."""
    assert vmap_axis["vmap-axis-all-to-all-unbatched"] == [[[1.0, 2.0], [1.0, 2.0]]] * 2
    assert vmap_axis["vmap-axis-all-to-all-unbatched batched"] == [[1.0, 1.0], [2.0, 2.0]]


def test_jax_vmap_of_psend_and_precv_is_pinned(vmap_axis):
    """Pins FINDINGS.md 22: jax.vmap of a program that sends with psend and receives with precv fails to trace
    (precv's batching rule is ppermute's, which takes no out_shape); the per-batch program traces to f32[4],
    so the batched one should be f32[3, 4]."""
    assert vmap_axis["vmap-psend-precv"].startswith("raised TypeError: _ppermute_batcher() got an unexpected keyword")
    assert vmap_axis["vmap-psend-precv per batch"] == [4]


def test_jax_eager_shard_map_of_a_zero_size_array_is_pinned(vmap_axis):
    """Pins FINDINGS.md 23: the result of an eager shard_map (outside jit) with a zero-size output cannot be
    read (its shards carry the global shape); the same program under jit reads as a (2, 0) array."""
    assert vmap_axis["eager-shard-map-zero-size"].startswith("raised ValueError: could not broadcast input array")
    assert vmap_axis["eager-shard-map-zero-size jit"] == [[], []]


def test_jax_grad_of_a_nested_shard_map_is_pinned(vmap_axis):
    """Pins FINDINGS.md 24: jax.grad of a shard_map manual over 'x' inside one manual over 'y', whose body keeps a
    residual, fails to lower under check_vma=True (a local shape halved on 1 x 2, 'y' bound twice on 2 x 2);
    unchecked, the same gradient is w = b + 1."""
    for mesh in ("1x2", "2x2"):
        found = vmap_axis[f"nested-shard-map-grad-residuals {mesh} check_vma=True"]
        assert found.startswith("raised ValueError: Cannot lower jaxpr with verifier errors"), (mesh, found)
        size = 4 if mesh == "1x2" else 8
        expected = (np.arange(size, dtype=float) + 1.0).reshape(-1, 2, 2).tolist()
        assert vmap_axis[f"nested-shard-map-grad-residuals {mesh} check_vma=False"] == expected, mesh


def test_jax_psum_over_a_size_one_axis_beside_a_nested_shard_map_is_pinned(vmap_axis):
    """Pins FINDINGS.md 25: on a 1 x 2 mesh, psum, pmax or pmean over 'x' (size 1) in a shard_map over 'x',
    followed by a shard_map over 'y', fails to compile (XLA's partitioner refuses the all-reduce outside manual
    mode), as does the reverse mode of psum over ('x', 'y') in nested shard_maps; the same psum without the
    nested shard_map gives its operand doubled, and on a 2 x 2 mesh every program runs."""
    refusal = "raised JaxRuntimeError: INTERNAL: RET_CHECK failure"
    for name in ("psum", "pmax", "pmean", "grad"):
        found = vmap_axis[f"size-one-axis-all-reduce {name} 1x2"]
        assert found.startswith(refusal) and "Cross-partition allreduce must be in (partial) manual" in found, found
    assert vmap_axis["size-one-axis-all-reduce psum 1x2 alone"] == [[2.0, 4.0]]
    assert vmap_axis["size-one-axis-all-reduce psum 2x2"] == vmap_axis["size-one-axis-all-reduce psum 2x2 alone"] \
        == [[8.0, 12.0]] * 2
    assert vmap_axis["size-one-axis-all-reduce pmax 2x2"] == [[6.0, 8.0]] * 2
    assert vmap_axis["size-one-axis-all-reduce grad 2x2"] == [[80.0, 80.0]] * 2


def test_jax_unchecked_shard_map_nested_in_a_checked_one_is_pinned(vmap_axis):
    """Pins FINDINGS.md 26: a check_vma=False shard_map over 'y' nested in a check_vma=True one over 'x',
    doubling its block, is typed invariant along 'x': the checked shard_map's out_specs=P() returns device 0's
    rows (the 'x' devices hold different ones), and the gradient fails to trace; unchecked on both, the
    gradient is 4 v and out_specs=P() returns the same rows, unchecked."""
    doubled = [[2.0 * (4 * r + c) for c in range(4)] for r in range(4)]
    assert vmap_axis["unchecked-nested True claim"] == doubled[:2] == vmap_axis["unchecked-nested False claim"]
    found = vmap_axis["unchecked-nested True grad"]
    assert found.startswith("raised ValueError: Expected cotangent type float32[2,2]{V:x} but got float32[2,2]"), found
    assert vmap_axis["unchecked-nested False grad"] == [[4.0 * (4 * r + c) for c in range(4)] for r in range(4)]


def test_jax_vmap_spmd_axis_of_a_partial_shard_map_is_pinned(vmap_axis):
    """Pins FINDINGS.md 27: jax.vmap with spmd_axis_name='x' of a shard_map over 'y' alone fails (checked: a
    ValueError on the types; unchecked: the lowering's verifier), while the same vmap without spmd_axis_name,
    and with it of a shard_map over both axes, give the doubled sum."""
    doubled = float(2 * sum(range(32)))
    assert vmap_axis["spmd-partial True"].startswith(
        "raised ValueError: Axes mentioned in `manual_axis_type` field of ShapedArray should be of type `Manual`")
    assert vmap_axis["spmd-partial False"].startswith("raised ValueError: Cannot lower jaxpr with verifier errors")
    assert vmap_axis["spmd-partial True plain"] == vmap_axis["spmd-partial False plain"] == doubled
    assert vmap_axis["spmd-partial whole mesh"] == doubled


def test_jax_ppermute_over_a_tuple_out_of_mesh_order_is_pinned(vmap_axis):
    """Pins FINDINGS.md 29: a ring over ('c', 'a') on a mesh ('a', 'c') runs in the mesh's order, so only device 0
    receives from its predecessor as axis_index(('c', 'a')) numbers them."""
    assert vmap_axis["ppermute-tuple-axis-order"] == [True, False, False, False]


def test_jax_grouped_pmax_typed_invariant_is_pinned(vmap_axis):
    """Pins FINDINGS.md 28: under check_vma=True, pmax and pmin over axis_index_groups [[0, 1], [2, 3]] are typed
    invariant, so out_specs=P() returns the first group's result, while each device holds its group's."""
    assert vmap_axis["grouped pmax claim"] == [1.0] and vmap_axis["grouped pmax each"] == [1.0, 1.0, 3.0, 3.0]
    assert vmap_axis["grouped pmin claim"] == [0.0] and vmap_axis["grouped pmin each"] == [0.0, 0.0, 2.0, 2.0]


def test_jax_rng_bit_generator_of_a_varying_key_typed_invariant_is_pinned(vmap_axis):
    """Pins FINDINGS.md 30: under check_vma=True the bits lax.rng_bit_generator makes from a key varying along 'i'
    are typed invariant, so out_specs=P() returns device 0's bits, while the two devices' bits (unchecked) differ."""
    claim, each = vmap_axis["rng bits claim"], vmap_axis["rng bits each"]
    assert isinstance(claim, list) and len(each) == 2, (claim, each)
    assert claim == each[0] != each[1]
