"""The reductions and their kin: simulator == executable spec == real JAX (0.10.2, CPU devices), bit for bit.

Cases come from `reduction_cases.reduction_cases`: 1-D and 2-D meshes of up to 8 devices, tuple axis
names in either order, axis_index_groups for the collectives that take them, int8/int32/float16/float32/
float64 filled with readable integers, random bits (NaN payloads, subnormals), floats of wide magnitude
(so the order of summation shows) or special values. The simulator runs as a user runs it, through
`sim.shard_map` over per-device inputs stacked along a leading axis sharded over every mesh axis.
"""

from __future__ import annotations

import numpy as np
import pytest
import strategies
from hypothesis import given, settings
from hypothesis import strategies as st
from reduction_cases import OPS, ReductionCase, fill, reduction_cases, run_spec

import collectives
from oracles import spec

pytestmark = pytest.mark.differential

_EXAMPLES = min(50, settings().max_examples)  # each case compiles its own program in the JAX worker


def check_with_jax(case: ReductionCase, oracle) -> None:
    """Assert simulator == spec == JAX on every device (dtype, shape, bytes), and that JAX ran the op by the path
    its binding states (the real op, JAX's own primitive through meshsim's CPU lowering, or its documented
    equivalent)."""
    want, got = run_spec(case), strategies.run_simulator(case)
    result = oracle.run(case.op, dict(case.mesh_shape), case.args, dict(case.params))
    found = strategies.differences(want, got, "spec", "simulator")
    found += strategies.differences(result.outputs, want, "jax", "spec")
    found += strategies.differences(result.outputs, got, "jax", "simulator")
    strategies.CHECKED[case.op, "jax"] += 1
    assert not found, f"{len(found)} difference(s) on\n{case!r}\n  " + "\n  ".join(found)
    grouped = case.op in ("psum", "pmean") and case.params.get("axis_index_groups") is not None
    assert result.path == ("real, check_vma=False" if grouped else collectives.definition(case.op).jax.on_cpu)


@pytest.mark.parametrize("op", OPS)
@settings(max_examples=_EXAMPLES)
@given(data=st.data())
def test_agrees_with_jax(op, data, jax_oracle):
    """Each op on generated cases: simulator, spec and JAX give the same bytes on every device."""
    check_with_jax(data.draw(reduction_cases(op), label="case"), jax_oracle)


_MESHES = [({"x": 3}, "x", None), ({"x": 2, "y": 4}, ("y", "x"), None), ({"x": 8}, "x", [[7, 0, 5, 2], [1, 3, 6, 4]])]
_DENSE = [(op, dtype, style, *where) for op in ("psum", "pmean", "pmax", "pmin", "psum_scatter")
          for dtype in ("float16", "float32", "float64") for style in ("special", "wide") for where in _MESHES]
_DENSE += [(op, dtype, "wide", *_MESHES[1]) for op in ("psum", "pmean") for dtype in ("int8", "int32")]


def dense_case(op: str, dtype: str, style: str, mesh_shape: dict[str, int], axis_name, groups) -> ReductionCase:
    """240 values per device, so that every arithmetic rule (flushing, NaN choice, rounding) is exercised."""
    n = int(np.prod(list(mesh_shape.values())))
    xs = tuple(fill(style, 11, (240,), np.dtype(dtype), salt=d) for d in range(n))
    params = {"axis_name": axis_name, "axis_index_groups": groups}
    if op == "psum_scatter":
        params["tiled"] = True
    return ReductionCase(op, mesh_shape, (xs,), params)


@pytest.mark.parametrize("op, dtype, style, mesh_shape, axis_name, groups", _DENSE,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}-{c[4]}-{'groups' if c[5] else 'all'}" for c in _DENSE])
def test_arithmetic_rules_on_dense_inputs(op, dtype, style, mesh_shape, axis_name, groups, jax_oracle):
    """Many special or wide-ranging values per device: signed zeros, subnormals, NaN payloads, rounding."""
    check_with_jax(dense_case(op, dtype, style, mesh_shape, axis_name, groups), jax_oracle)


def _adversarial(n: int, dtype: str, size: int = 512) -> tuple[np.ndarray, ...]:
    return tuple(fill("wide", 7, (size,), np.dtype(dtype), salt=d) for d in range(n))


ORDER_CASES = [
    ({"x": 4}, "x", None),
    ({"x": 8}, "x", [[7, 0, 5, 2], [1, 3, 6, 4]]),
    ({"x": 6}, "x", [[4, 0, 2], [5, 3, 1]]),
    ({"x": 2, "y": 4}, ("y", "x"), None),
    ({"x": 2, "y": 4}, ("y", "x"), [[5, 0, 2, 7], [1, 3, 6, 4]]),
    ({"x": 4, "y": 2}, "x", [[3, 1, 0, 2]]),
]


@pytest.mark.parametrize("mesh_shape, axis_name, groups", ORDER_CASES,
                         ids=[f"{m}-{a}-{g}" for m, a, g in ORDER_CASES])
@pytest.mark.parametrize("op", ["psum", "psum_scatter"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_sum_is_a_left_fold_in_group_order(mesh_shape, axis_name, groups, op, dtype, jax_oracle):
    """JAX's CPU sum adds the members one by one in group order (tuple order, groups as listed) to 0.

    The inputs span many binades, so the fold in sorted device order gives other bits: the test would see
    a different order.
    """
    n = int(np.prod(list(mesh_shape.values())))
    xs = _adversarial(n, dtype)
    params = {"axis_name": axis_name, "axis_index_groups": groups}
    if op == "psum_scatter":
        size = len(groups[0]) if groups else len(spec.groups(mesh_shape, axis_name)[0])
        xs = tuple(x[: len(x) // size * size] for x in xs)
        params["tiled"] = True
    check_with_jax(ReductionCase(op, mesh_shape, (xs,), params), jax_oracle)
    group = spec.groups(mesh_shape, axis_name, groups)[0]
    reordered = spec.psum([xs[d] for d in sorted(group)], {"i": len(group)}, "i")[0]
    in_order = spec.psum([xs[d] for d in group], {"i": len(group)}, "i")[0]
    assert group == sorted(group) or reordered.tobytes() != in_order.tobytes()


def test_ppermute_tuple_axis_numbering(jax_oracle):
    """JAX 0.10.2's ppermute numbers a tuple axis not in mesh order by sorted device id, unlike axis_index.

    On mesh {'x': 2, 'y': 2} (device = 2x + y), axis ('y', 'x') gives device 1 the axis index 2. The
    simulator and the spec send perm=[(0, 1)] to the device whose axis_index is 1 (device 2); JAX sends it
    to device 1. This test pins that difference down so a change in JAX shows up.
    """
    xs = tuple(np.array([d + 1], np.int32) for d in range(4))
    case = ReductionCase("ppermute", {"x": 2, "y": 2}, (xs,), {"axis_name": ("y", "x"), "perm": [(0, 1)]})
    index = jax_oracle.run("axis_index", {"x": 2, "y": 2}, (), {"axis_name": ("y", "x")}).outputs
    assert [int(i) for i in index] == [0, 2, 1, 3]
    assert [int(x[0]) for x in strategies.run_simulator(case)] == [0, 0, 1, 0] == [int(x[0]) for x in run_spec(case)]
    jax_result = jax_oracle.run("ppermute", case.mesh_shape, case.args, case.params).outputs
    assert [int(x[0]) for x in jax_result] == [0, 1, 0, 0]


def test_psum_with_groups_needs_check_vma_false_in_jax(jax_oracle):
    """jax.lax.psum/pmean reject axis_index_groups under check_vma=True; pmax, pmin, psum_scatter accept them."""
    xs = (tuple(np.arange(4, dtype=np.int32) + d for d in range(4)),)
    params = {"axis_name": "x", "axis_index_groups": [[0, 1], [2, 3]]}
    for op, path in (("psum", "real, check_vma=False"), ("pmean", "real, check_vma=False"), ("pmax", "real"),
                     ("pmin", "real")):
        assert jax_oracle.run(op, {"x": 4}, xs, params).path == path
    assert jax_oracle.run("psum_scatter", {"x": 4}, xs, {**params, "tiled": True}).path == "real"


def test_complex_sum_and_mean_agree(jax_oracle):
    """complex64 psum and pmean: the componentwise fold, and complex division by n, as JAX computes them."""
    rng = np.random.default_rng(3)
    xs = tuple((rng.standard_normal(64) + 1j * rng.standard_normal(64)).astype(np.complex64) * 2.0 ** (5 * d)
               for d in range(3))
    for op in ("psum", "pmean"):
        check_with_jax(ReductionCase(op, {"x": 3}, (xs,), {"axis_name": "x", "axis_index_groups": None}), jax_oracle)
