"""The float8 types (ml_dtypes', by JAX's names): every collective that only moves data moves their bytes as
the spec does, NaN payloads included, and as real JAX does but for the NaNs XLA:CPU merges (pinned here);
the reductions refuse them, naming the rule; abstract payloads and device_put take them.

The JAX-backed tests carry the differential marker; their data has no NaN (XLA:CPU rewrites NaN bits while
it moves them: `test_xla_cpu_merges_float8_nans_that_meshsim_moves_unchanged`).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from strategies import Case, Fill, cases, check_agreement, differences, run_jax, run_simulator, run_spec

import collectives
import layouts
import scenarios
import sim
from oracles import spec
from scenarios.campaign._cases import XLA_CPU_FLOAT8_NANS, campaign_dtypes
from sim import P

FLOAT8 = layouts.FLOAT8
REDUCING = ("psum", "pmean", "pmax", "pmin", "psum_scatter", "psum_invariant")
MOVING = tuple(op for op in collectives.REGISTRY if op not in REDUCING and collectives.definition(op).arrays)
_EXAMPLES = max(10, settings().max_examples // 10)  # each case compiles its own program in the JAX worker
_JAX_EXAMPLES = max(5, _EXAMPLES // 2)  # besides every bit pattern through all_gather (the NaN test below)


def _filler(nans: bool) -> st.SearchStrategy:
    """Fillers of uniformly drawn bit patterns: every class of value, NaNs (with any payload) only if `nans`."""
    def filler(seed: int) -> object:
        def make(shape: tuple[int, ...], dtype: np.dtype, salt: int) -> np.ndarray:
            rng = np.random.default_rng([seed, salt])
            values = rng.integers(0, 256, int(np.prod(shape)), dtype=np.uint8).view(dtype).reshape(shape)
            return values if nans else np.where(np.isnan(values.astype(np.float32)), np.ones((), dtype), values)
        return make
    return st.builds(filler, st.integers(0, 2**32 - 1))


def float8_cases(op: str, nans: bool) -> st.SearchStrategy[Case]:
    return cases(op, dtypes=st.sampled_from(FLOAT8), fillers=_filler(nans))


@pytest.mark.parametrize("op", MOVING)
@settings(max_examples=_EXAMPLES)
@given(data=st.data())
def test_every_moving_collective_takes_float8_as_the_spec_does(op, data):
    """Every collective that only moves data gives the spec's bytes on every device, NaN payloads included."""
    check_agreement(data.draw(float8_cases(op, nans=True), label="case"))


@pytest.mark.parametrize("op", REDUCING)
@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_reductions_refuse_float8_naming_the_rule(op, dtype):
    """A reduction of a float8 operand is refused on device 0, naming the operand, its dtype and the rule."""
    f = sim.shard_map(lambda x: collectives.definition(op).function(x, "x"), mesh=sim.Mesh({"x": 2}),
                      in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(sim.InvalidTypeError, match=rf"device 0: {op}: x has dtype {dtype}; the float8 types are "
                                                   rf"moved, not reduced"):
        f(np.ones(4, dtype))


def test_a_move_through_float16_is_caught():
    """The comparison can fail: moving float8 through float16 (as XLA:CPU does) changes NaN bits, and the
    spec comparison names the device and the element."""
    bits = np.arange(256, dtype=np.uint8).view(FLOAT8[FLOAT8.index(np.dtype("float8_e5m2"))])
    case = Case("all_gather", {"x": 4}, (bits.reshape(4, 64),), {"axis_name": "x", "tiled": True})
    through = [np.asarray(out).astype(np.float16).astype(out.dtype) for out in run_simulator(case)]
    found = differences(through, run_spec(case), "simulator", "spec")
    assert found and "device 0" in found[0] and "bytes differ" in found[0], found
    assert not differences(run_simulator(case), run_spec(case), "simulator", "spec")


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_abstract_payloads_and_device_put_take_float8(dtype):
    """A float8 ShapeDtypeStruct moves as sizes (an all_gather comes back as one), a reduction of one is refused,
    and device_put places float8 bytes unchanged."""
    mesh = sim.Mesh({"x": 4})
    gather = sim.shard_map(lambda v: collectives.all_gather(v, "x", tiled=True), mesh=mesh, in_specs=P("x"),
                           out_specs=P("x"))
    out = gather.run(sim.ShapeDtypeStruct((64,), dtype)).outputs
    assert isinstance(out, sim.ShapeDtypeStruct) and out.shape == (256,) and np.dtype(out.dtype) == dtype
    total = sim.shard_map(lambda v: collectives.psum(v, "x"), mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(sim.InvalidTypeError, match="moved, not reduced"):
        total.run(sim.ShapeDtypeStruct((64,), dtype))
    bits = np.arange(256, dtype=np.uint8).view(dtype)
    placed = sim.device_put(bits, sim.NamedSharding(mesh, P("x")))
    assert np.concatenate([np.asarray(s.data) for s in placed.shards]).view(np.uint8).tolist() == list(range(256))


def test_scenario_files_move_float8_and_refuse_to_reduce_it(tmp_path):
    """`[inputs] dtype` names any float8 type: drawn inputs and literal bits (a NaN among them) run through
    `meshsim run` to the spec's bytes, the JSON summary gives their values as floats; a psum of float8 exits 2
    with the rule."""
    from scenarios.cli import main

    head = 'title = "t"\ndescription = "d"\n[mesh]\naxes = {e = 4}\n'
    drawn = tmp_path / "drawn.toml"
    drawn.write_text(head + '[collective]\nop = "all_to_all"\naxis_name = "e"\nsplit_axis = 0\nconcat_axis = 0\n'
                     'tiled = true\n[inputs]\nseed = 3\nshape = [8, 2]\ndtype = "float8_e4m3fn"\n')
    literal = tmp_path / "literal.toml"
    literal.write_text(head + '[collective]\nop = "ppermute"\naxis_name = "e"\nperm = [[0, 1], [2, 3]]\n'
                       '[inputs]\ndtype = "float8_e8m0fnu"\n' + "".join(
                           f'[[device]]\nx = {{bits = ["0x{7 + d:02x}", "0xff"]}}\n' for d in range(4)))
    for path, dtype, evaluate in ((drawn, "float8_e4m3fn", spec.all_to_all),
                                  (literal, "float8_e8m0fnu", spec.ppermute)):
        scenario = scenarios.load(path)
        xs = [inputs["x"] for inputs in scenario.inputs]
        assert {x.dtype.name for x in xs} == {dtype}
        wanted = evaluate(xs, {"e": 4}, **scenario.params)
        assert [o.tobytes() for o in scenarios.run(scenario).outputs] == [w.tobytes() for w in wanted]
    assert [x.view(np.uint8).tolist() for x in (i["x"] for i in scenarios.load(literal).inputs)] == [
        [7 + d, 0xFF] for d in range(4)]
    assert main(["run", str(literal), "--json"]) == 0
    reduced = tmp_path / "reduced.toml"
    reduced.write_text(head + '[collective]\nop = "psum"\naxis_name = "e"\n[inputs]\nseed = 1\nshape = [4]\n'
                       'dtype = "float8_e5m2"\n')
    assert main(["run", str(reduced)]) == 2


def test_a_sweep_over_float8_runs_the_moves_and_reports_the_reductions(tmp_path, capsys):
    """A sweep point of all_gather in float8_e5m2 runs (a 1 KiB result is 256 elements per device); the psum
    point of the same dtype is a row that names the rule, not a failure of the sweep."""
    from scenarios.cli import main

    path = tmp_path / "fp8.toml"
    path.write_text('title = "t"\ncollective = ["all_gather", "psum"]\nmesh = {e = 4}\naxis_name = "e"\n'
                    'size = ["1 KiB"]\ndtype = ["float8_e5m2"]\n')
    assert main(["sweep", str(path), "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"1024 +256 +float8_e5m2 +none +[0-9.]+", out), out
    assert re.search(r"float8_e5m2 +sum +rejected: device 0: psum: x has dtype float8_e5m2; the float8 types are "
                     r"moved, not reduced", out), out


@pytest.mark.parametrize("op", ["all_gather", "ppermute", "psum", "psum_scatter"])
def test_the_generator_draws_float8_for_moves_only(op):
    """The cases of `meshsim campaign` draw float8 operands for the collectives that only move data, never for a
    reduction; and a float8_e5m2 NaN comes as the one XLA:CPU leaves (0x7f)."""
    float8 = lambda case: np.asarray(case.args[0][0]).dtype in FLOAT8
    drawn = cases(op, dtypes=campaign_dtypes(op))
    if op in REDUCING:
        with pytest.raises(NoSuchExample):
            find(drawn, float8, settings=settings(max_examples=200, database=None, derandomize=True))
    else:
        found = find(drawn, float8, settings=settings(database=None, derandomize=True,
                                                      phases=[p for p in Phase if p != Phase.explain]))
        assert float8(found)
    e5m2 = Fill("bits", 7).array((256,), np.dtype("float8_e5m2"), 0).view(np.uint8)
    nan = np.isnan(e5m2.view(np.dtype("float8_e5m2")).astype(np.float32))
    assert nan.any() and set(e5m2[nan].tolist()) == {0x7F}


# ---------------------------------------------------------------------------------------------- real JAX


@pytest.mark.differential
@pytest.mark.parametrize("op", MOVING)
@settings(max_examples=_JAX_EXAMPLES)
@given(data=st.data())
def test_every_moving_collective_agrees_with_jax_in_float8(op, data, jax_oracle):
    """Simulator == spec == real JAX, bit for bit, on float8 values without NaNs (JAX on CPU cannot run
    ragged_all_to_all: its cases are checked against the spec alone)."""
    case = data.draw(float8_cases(op, nans=False), label="case")
    check_agreement(case, jax_oracle if op != "ragged_all_to_all" else None)


@pytest.mark.differential
@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_xla_cpu_merges_float8_nans_that_meshsim_moves_unchanged(dtype, jax_oracle):
    """All 256 patterns through a tiled all_gather on 4 devices: meshsim and the spec give every pattern back;
    JAX on CPU gives back every pattern but the NaNs of the types that merge them, each turned into the NaN
    the generator's table (`XLA_CPU_FLOAT8_NANS`, by sign bit) names. Pinned: when XLA:CPU stops merging, this
    fails, and the table and the docs change."""
    bits = np.arange(256, dtype=np.uint8)
    case = Case("all_gather", {"x": 4}, (bits.view(dtype).reshape(4, 64),), {"axis_name": "x", "tiled": True})
    ours = [np.asarray(out).view(np.uint8).tolist() for out in run_simulator(case)]
    assert ours == [bits.tolist()] * 4
    assert not differences(run_simulator(case), run_spec(case), "simulator", "spec")
    nan = np.isnan(bits.view(dtype).astype(np.float32))
    merged = XLA_CPU_FLOAT8_NANS.get(dtype.name)
    wanted = bits.copy()
    if merged is not None:
        wanted[nan] = [merged[int(b) >> 7] for b in bits[nan]]
    theirs = [np.asarray(out).view(np.uint8).tolist() for out in run_jax(case, jax_oracle)]
    assert theirs == [wanted.tolist()] * 4
