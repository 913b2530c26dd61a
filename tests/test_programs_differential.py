"""Generated programs on a 2-D mesh: the simulator's types and transposes against real JAX."""

from __future__ import annotations

import numpy as np
import programs as gen
import pytest
from hypothesis import given, settings

import collectives as C
import sim
from oracles.programs import program_transpose, program_types

pytestmark = pytest.mark.differential


def simulator_types(program: dict) -> tuple[str, object]:
    """The simulator's verdict: ('ok', [sorted vma per output]) or ('rejected', message)."""
    args = [np.zeros(gen.global_shape(s), np.float32) for s in program["inputs"]]
    try:
        run = gen.shard_mapped(program).run(*args)
    except (sim.InvalidArgumentError, sim.InvalidTypeError) as error:
        return ("rejected", str(error))
    return ("ok", [sorted(o.vma) if isinstance(o, sim.Var) else [] for o in run.program().outputs])


@settings(max_examples=150, deadline=None)
@given(gen.programs())
def test_inferred_types_match_jax(jax_oracle, program):
    """Every output's inferred variance equals the {V:...} JAX gives it under check_vma=True, and a
    program JAX rejects is rejected by the simulator too (and the other way round)."""
    shapes = [gen.global_shape(s) for s in program["inputs"]]
    expected = program_types(jax_oracle, gen.MESH_SHAPE, program, shapes)
    got = simulator_types(program)
    assert got[0] == expected[0], f"JAX: {expected}\nsimulator: {got}\n  {gen.describe(program)}"
    if got[0] == "ok":
        assert got[1] == expected[1], f"JAX: {expected}\nsimulator: {got}\n  {gen.describe(program)}"


@settings(max_examples=60, deadline=None)
@given(gen.programs(ops=gen.LINEAR_OPS))
def test_transpose_matches_jax_linear_transpose(jax_oracle, program):
    """For linear programs the simulator's transpose gives the values `jax.linear_transpose` gives, exactly
    (small integers in float64 make every sum exact)."""
    _transposes_agree(jax_oracle, program)


@settings(max_examples=60, deadline=None)
@given(gen.programs(ops=[op for op in gen.LINEAR_OPS if op != "pvary"]))
def test_unchecked_transpose_matches_jax_linear_transpose(jax_oracle, program):
    """With check_vma=False the simulator transposes the way JAX does without types (psum to psum, unmapped
    outputs' cotangents divided, replicated inputs' cotangents psummed): `jax.linear_transpose`'s values,
    exactly (small integers, divisions by powers of two)."""
    _transposes_agree(jax_oracle, dict(program, check_vma=False))


def _transposes_agree(jax_oracle, program: dict) -> None:
    rng = np.random.default_rng(0)
    primals = [rng.integers(-4, 5, gen.global_shape(s)).astype(np.float64) for s in program["inputs"]]
    f = gen.shard_mapped(program)
    try:
        outputs = f(*primals)
    except (sim.InvalidArgumentError, sim.InvalidTypeError):
        return  # not a well-typed program; the type test covers rejections
    cts = [rng.integers(-4, 5, o.shape).astype(np.float64) for o in outputs]
    expected = program_transpose(jax_oracle, gen.MESH_SHAPE, program, primals, cts)
    got = C.linear_transpose(f, *primals).run(*cts).outputs
    got = got if isinstance(got, tuple) else (got,)
    for want, have in zip(expected, got):
        assert want.shape == have.shape and want.tobytes() == have.tobytes(), (
            f"JAX {want.tolist()}\nsimulator {have.tolist()}\n  {gen.describe(program)}")
