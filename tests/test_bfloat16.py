"""bfloat16 (ml_dtypes') everywhere: every collective, layouts, memories, the scenario loader, and XLA:CPU's
reduction numerics (a bfloat16 psum is folded in float32 and rounded once) bit for bit, with and without JAX.

The JAX-backed tests carry the differential marker. Random bfloat16 data for the collectives that only move
values has canonical NaNs (see `strategies.Fill`); the reductions get arbitrary NaN payloads.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import strategies
from hypothesis import given, settings
from hypothesis import strategies as st
from reduction_cases import fill
from strategies import Case, check_agreement

import collectives
import collectives._allreduce
import layouts
import scenarios
import sim
from collectives._arithmetic import combine, identity
from layouts import Layout
from oracles import spec
from oracles._reordered import compare_reordered
from sim import P

BF16 = layouts.BFLOAT16
FLOATS = (BF16, np.dtype(np.float16), np.dtype(np.float32))
# The collectives that compute values (the reductions); the others only move them.
REDUCING = ("psum", "pmean", "pmax", "pmin", "psum_scatter", "psum_invariant")
assert set(REDUCING) <= set(collectives.REGISTRY)
MOVING = tuple(op for op in collectives.REGISTRY if op not in REDUCING and collectives.definition(op).arrays)
_EXAMPLES = max(10, settings().max_examples // 10)  # each case compiles its own program in the JAX worker

# bfloat16 bit patterns of every class: signed zeros, infinities, subnormals, the smallest normal, 1, -3,
# the largest finite, and NaNs (canonical, with a payload, signalling).
_SPECIAL_BITS = (0x0000, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x0080, 0x3F80, 0xC040, 0x7F7F, 0x7FC0, 0xFFC0)
_PAYLOAD_NANS = (0x7FC5, 0xFFC5, 0x7F81)


def bf16_values(rng: np.random.Generator, count: int, payloads: bool) -> np.ndarray:
    """Half special values, half normals of wide magnitude (so the order and width of additions show)."""
    specials = np.array(_SPECIAL_BITS + (_PAYLOAD_NANS if payloads else ()), np.uint16).view(BF16)
    wide = (rng.standard_normal(count) * np.exp2(rng.integers(-40, 40, count))).astype(BF16)
    return np.where(rng.random(count) < 0.5, rng.choice(specials, count), wide)


def _filler(payloads: bool) -> st.SearchStrategy[strategies.Filler]:
    """Fillers: bfloat16 from `bf16_values`, other floats from test_reductions' special or wide values."""
    def filler(seed: int, style: str) -> strategies.Filler:
        def make(shape: tuple[int, ...], dtype: np.dtype, salt: int) -> np.ndarray:
            if dtype == BF16:
                rng = np.random.default_rng([seed, salt])
                return bf16_values(rng, int(np.prod(shape)), payloads).reshape(shape)
            return fill(style, seed, shape, dtype, salt)
        return make
    return st.builds(filler, st.integers(0, 2**32 - 1), st.sampled_from(["special", "wide"]))


def bf16_cases(op: str, dtypes: tuple[np.dtype, ...] = (BF16,)) -> st.SearchStrategy[Case]:
    """Generated calls of `op` in `dtypes`; NaN payloads only where the collective computes."""
    return strategies.cases(op, dtypes=st.sampled_from(dtypes), fillers=_filler(payloads=op in REDUCING))


def bits(a: np.ndarray) -> list[int]:
    """The raw 16-bit patterns of a bfloat16 or float16 array."""
    return np.ascontiguousarray(a).view(np.uint16).ravel().tolist()


def per_device(mesh_shape: dict[str, int], body, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Each device's result of `body` on its row of `xs` (one array per device)."""
    names = tuple(mesh_shape)
    f = sim.shard_map(body, mesh=sim.Mesh(mesh_shape), in_specs=P(names), out_specs=P(names))
    return list(f(np.stack(xs)))


# 1 followed by seven quarters of bfloat16's last place at 1: float32 holds the sum 1 + 7 * 2^-9 exactly and
# rounds it once to 1 + 2^-6; adding in bfloat16 rounds every 1 + 2^-9 back to 1.
ONCE = [np.array([v], BF16) for v in [1.0] + [2.0**-9] * 7]
# 1 + 2^-8 + 2^-32: float32 rounds it to 1 + 2^-8, a tie bfloat16 breaks to even (1); the exact sum rounds up.
TIE = [np.array([v], BF16) for v in [1.0, 2.0**-8, 2.0**-32, 0.0]]


# ---------------------------------------------------------------------------------------------- no JAX


@pytest.mark.parametrize("op", REDUCING + MOVING)
@settings(max_examples=_EXAMPLES)
@given(data=st.data())
def test_every_collective_takes_bfloat16_as_the_spec_does(op, data):
    """Every registered collective accepts bfloat16 and gives the spec's bytes on every device."""
    check_agreement(data.draw(bf16_cases(op), label="case"))


def test_direct_rounds_a_bfloat16_sum_once_and_the_ring_every_step():
    """'direct' folds in float32 and rounds once (1 + 2^-6); the ring rounds each step to bfloat16 (1)."""
    ring_first = [ONCE[1], ONCE[0], *ONCE[2:]]  # the ring folds the element's chunk from member 1 on
    for algorithm, want in (("direct", 1.0 + 2.0**-6), ("ring", 1.0)):
        out = per_device({"x": 8}, lambda x, a=algorithm: collectives.psum(x, "x", algorithm=a), ring_first)
        assert [float(o[0]) for o in out] == [want] * 8, algorithm
    assert float(spec.psum(ONCE, {"x": 8}, "x")[0][0]) == 1.0 + 2.0**-6
    assert float(spec.psum(TIE, {"x": 4}, "x")[0][0]) == 1.0


@pytest.mark.parametrize("op", ["psum", "pmean", "pmax", "pmin", "psum_invariant"])
def test_one_device_reductions_canonicalise_bfloat16_nans_only(op):
    """On one device the all-reduce goes but its float32 conversions stay: NaNs come back as 0x7fc0 with their
    sign; subnormals, -0.0 and the rest keep their bits (measured on JAX CPU)."""
    x = np.array([0x7FC5, 0xFFC5, 0x7F81, 0x0001, 0x8001, 0x8000, 0x3F80], np.uint16).view(BF16)
    want = [0x7FC0, 0xFFC0, 0x7FC0, 0x0001, 0x8001, 0x8000, 0x3F80]
    f = sim.shard_map(lambda v: getattr(collectives, op)(v, "x"), mesh=sim.Mesh({"x": 1}), in_specs=P(),
                      out_specs=P(), check_vma=False)
    assert bits(f(x)) == want == bits(getattr(spec, op)([x], {"x": 1}, "x")[0])


def test_one_combine_step_rounds_back_to_bfloat16():
    """`combine` on bfloat16 adds in float32 and rounds the step's result; the identity is bfloat16's."""
    assert combine("sum", np.array(1.0, BF16), np.array(2.0**-9, BF16)).dtype == BF16
    assert float(combine("sum", np.array(1.0, BF16), np.array(2.0**-9, BF16))) == 1.0
    assert float(identity("max", BF16)) == -np.inf and identity("sum", BF16).dtype == BF16


def test_pmean_of_bfloat16_multiplies_by_the_float32_reciprocal():
    """pmean over 3 devices: the bfloat16 sum times float32(1/3), rounded to bfloat16 (not bfloat16(1/3))."""
    xs = [np.array([v], BF16) for v in (6.36837e15, -1.63709e-10, 5.50571e-20)]
    out = per_device({"x": 3}, lambda x: collectives.pmean(x, "x"), xs)
    total = np.float32(np.array(xs[0][0], np.float32))
    want = np.array(total * np.float32(1 / 3), np.float32).astype(BF16)
    assert bits(out[0]) == bits(want) == bits(spec.pmean(xs, {"x": 3}, "x")[0])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("n", [3, 8])
def test_every_algorithm_is_within_the_reordered_bound(dtype, n):
    """Each registered psum/pmean algorithm's float answer is within the stated bound of the direct fold."""
    rng = np.random.default_rng(n)
    xs = [(rng.standard_normal(64) * np.exp2(rng.integers(-8, 8, 64))).astype(dtype) for _ in range(n)]
    for op in ("psum", "pmean"):
        for record in collectives.definition(op).algorithms:
            if not record.fits(n) or record.in_network:  # a switch that reduces: tests/test_in_network.py
                continue
            algorithm = record.name
            fn = getattr(collectives, op)
            got = per_device({"x": n}, lambda x, f=fn, a=algorithm: f(x, "x", algorithm=a), xs)
            want = getattr(spec, op)(xs, {"x": n}, "x")
            params = {"axis_name": "x", "algorithm": algorithm}
            assert compare_reordered(op, params, {"x": n}, xs, want, got) == [], (op, algorithm)


def test_a_bfloat16_sum_off_by_more_than_the_bound_is_flagged():
    """The reordered comparison rejects a bfloat16 sum 8 bfloat16 ulps of a large term away from the fold."""
    xs = [np.array([1.0, 3.0], BF16), np.array([2.0, -1.0], BF16)]
    want = spec.psum(xs, {"x": 2}, "x")
    wrong = [w.copy() for w in want]
    wrong[1][0] = BF16.type(float(want[1][0]) + 8 * 2.0**-7 * 2)
    found = compare_reordered("psum", {"axis_name": "x", "algorithm": "ring"}, {"x": 2}, xs, want, wrong)
    assert [(d.device, d.count) for d in found] == [(1, 1)]


def test_numerics_benchmark_lists_every_algorithm_and_direct_rounds_correctly(monkeypatch):
    """benchmarks/numerics.py measures every registered psum algorithm; XLA's bfloat16 sum is correctly
    rounded on its gradients (the claim of docs/concepts/numerics.md), the ring's is not."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "numerics.py"
    module_spec = importlib.util.spec_from_file_location("numerics", path)
    numerics = importlib.util.module_from_spec(module_spec)
    monkeypatch.setitem(sys.modules, "numerics", numerics)  # its dataclass looks its module up there
    module_spec.loader.exec_module(numerics)
    rows = {row.algorithm: row for row in numerics.measure("bfloat16", 256, 8)}
    assert tuple(rows) == numerics.algorithms() and "ring" in rows
    assert rows["direct"].stats[2] <= 0.5 and rows["direct"].stats[4] == 1.0
    assert rows["ring"].stats[4] < 1.0
    assert "| bfloat16 | 256 | 8 | direct |" in numerics.table(list(rows.values()))


@pytest.mark.parametrize("order", [(0,), (1, 0), (0, 2, 1), (2, 0, 3, 1)], ids=str)
def test_layouts_round_trip_bfloat16_bytes(order):
    """encode/decode in any major_to_minor keep every bfloat16 bit pattern, NaN payloads included."""
    rng = np.random.default_rng(len(order))
    shape = (3, 2, 4, 2)[:len(order)]
    x = rng.integers(0, 1 << 16, int(np.prod(shape)), dtype=np.uint16).view(BF16).reshape(shape)
    layout = Layout(order)
    raw = layouts.encode(x, layout)
    assert raw.size == x.nbytes == layouts.nbytes(BF16, shape, layout)
    back = layouts.decode(raw, BF16, shape, layout)
    assert back.dtype == BF16 and bits(back) == bits(x)
    assert bits(raw.view(BF16)) == bits(x.transpose(order))


def test_device_put_and_memories_hold_bfloat16():
    """device_put places bfloat16 blocks in a column-major layout; reading them back gives the same bits."""
    x = np.arange(8, dtype=np.float32).reshape(4, 2).astype(BF16)
    array = sim.device_put(x, layouts.Format(Layout((0, 1)), sim.NamedSharding(sim.Mesh({"x": 2}), P("x"))))
    assert array.dtype == BF16 and bits(np.asarray(array)) == bits(x)


def test_programs_print_bfloat16_as_jax_does():
    """A device's program names bfloat16 `bf16`, as a jaxpr does."""
    f = sim.shard_map(lambda x: collectives.psum(x, "x"), mesh=sim.Mesh({"x": 2}), in_specs=P("x"),
                      out_specs=P())
    assert "bf16[1]" in str(f.run(np.ones(2, BF16)).program())


def _scenario(tmp_path, inputs: str) -> scenarios.Scenario:
    path = tmp_path / "bf16.toml"
    path.write_text(f'title = "t"\ndescription = "d"\n[mesh]\naxes = {{x = 4}}\n'
                    f'[collective]\nop = "psum"\naxis_name = "x"\n{inputs}')
    return scenarios.load(path)


def test_scenario_loader_reads_bfloat16_inputs(tmp_path):
    """`[inputs] dtype = "bfloat16"` draws bfloat16 inputs and literal tables cast to it; both run to the spec."""
    seeded = _scenario(tmp_path, '[inputs]\nseed = 1\nshape = [3]\ndtype = "bfloat16"\n')
    literal = _scenario(tmp_path, '[inputs]\ndtype = "bfloat16"\n'
                        + "".join(f"[[device]]\nx = [{d}.5, 1e-3]\n" for d in range(4)))
    for scenario in (seeded, literal):
        result = scenarios.run(scenario)
        xs = [inputs["x"] for inputs in scenario.inputs]
        assert xs[0].dtype == BF16 and [o.dtype for o in result.outputs] == [BF16] * 4
        assert [bits(o) for o in result.outputs] == [bits(w) for w in spec.psum(xs, {"x": 4}, "x")]
        assert json.loads(json.dumps(result.to_dict()))["devices"][0]["dtype"] == "bfloat16"


@pytest.mark.parametrize(("call", "match"), [
    (lambda: collectives.psum(np.array(["a"]), "x"), r"device 0: psum: x has dtype <U1; it must be numeric"),
    (lambda: collectives.all_gather(np.zeros(2, "int4"), "x"),
     r"device 0: all_gather: x has dtype int4; it must be numeric"),
    (lambda: collectives.pmax(np.zeros(2, "float8_e4m3fn"), "x"),
     r"device 0: pmax: x has dtype float8_e4m3fn; the float8 types are moved, not reduced"),
], ids=["psum-of-strings", "all_gather-of-int4", "pmax-of-float8"])
def test_non_numeric_dtypes_are_refused_as_before(call, match):
    """Strings and the int4 types are refused with the message naming the dtype; the float8 types by the
    reductions."""
    f = sim.shard_map(lambda x: call(), mesh=sim.Mesh({"x": 1}), in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(sim.InvalidTypeError, match=match):
        f(np.zeros(1))


def _folded_in_bfloat16(reduction: str, terms: np.ndarray) -> np.ndarray:
    """A wrong fold: one `combine` per term, so every partial sum is rounded to bfloat16."""
    acc = identity(reduction, terms.dtype)
    for term in terms:
        acc = combine(reduction, acc, term)
    return acc


def _folded_in_float64(reduction: str, terms: np.ndarray) -> np.ndarray:
    """A wrong fold: the float64 sum rounded once to the nearest bfloat16, where XLA rounds every float32
    partial sum first (the cast through float32 may round twice, so the nearest neighbour is picked)."""
    exact = np.add.reduce(terms.astype(np.float64), axis=0)
    near = exact.astype(np.float32).astype(BF16).view(np.uint16).astype(np.int64)
    candidates = np.stack([near - 1, near, near + 1]).astype(np.uint16).view(BF16)
    best = np.argmin(np.abs(candidates.astype(np.float64) - exact), axis=0)
    return np.take_along_axis(candidates, best[None], axis=0)[0]


@pytest.mark.parametrize(("mutant", "xs"), [(_folded_in_bfloat16, ONCE), (_folded_in_float64, TIE)],
                         ids=["accumulates-in-bfloat16", "accumulates-in-float64"])
def test_a_wrong_bfloat16_accumulation_is_caught(mutant, xs, monkeypatch):
    """A simulator that folds bfloat16 in the wrong width differs from the spec on the telling inputs."""
    monkeypatch.setattr(collectives._allreduce, "fold", mutant)
    case = Case("psum", {"x": len(xs)}, (tuple(xs),), {"axis_name": "x", "axis_index_groups": None})
    with pytest.raises(AssertionError, match=r"simulator != spec: bytes differ"):
        check_agreement(case)


# ---------------------------------------------------------------------------------------------- with JAX


@pytest.mark.differential
@pytest.mark.parametrize("op", REDUCING + MOVING)
@settings(max_examples=_EXAMPLES)
@given(data=st.data())
def test_every_collective_agrees_with_jax_in_bfloat16(op, data, jax_oracle):
    """Every registered collective in bfloat16: simulator, spec and JAX give the same bytes."""
    check_agreement(data.draw(bf16_cases(op), label="case"), jax_oracle)


@pytest.mark.differential
@pytest.mark.parametrize("op", REDUCING)
@settings(max_examples=_EXAMPLES)
@given(data=st.data())
def test_direct_reductions_are_bit_exact_with_jax(op, data, jax_oracle):
    """'direct' reductions in bfloat16, float16 and float32, specials and wide magnitudes: JAX's bytes."""
    check_agreement(data.draw(bf16_cases(op, FLOATS), label="case"), jax_oracle)


@pytest.mark.differential
@pytest.mark.parametrize(("mesh_shape", "groups"), [({"x": 8}, None), ({"x": 8}, [[7, 0, 5, 2], [1, 3, 6, 4]]),
                                                   ({"x": 3}, None)], ids=["8", "8-groups", "3"])
@pytest.mark.parametrize("op", ["psum", "pmean", "pmax", "pmin", "psum_scatter"])
def test_dense_bfloat16_reductions_are_bit_exact_with_jax(op, mesh_shape, groups, jax_oracle):
    """240 bfloat16 values per device (every class, NaN payloads): simulator == spec == JAX, bit for bit."""
    n = mesh_shape["x"]
    xs = tuple(bf16_values(np.random.default_rng([5, d]), 240, payloads=True) for d in range(n))
    params = {"axis_name": "x", "axis_index_groups": groups, **({"tiled": True} if op == "psum_scatter" else {})}
    check_agreement(Case(op, mesh_shape, (xs,), params), jax_oracle)


@pytest.mark.differential
def test_xla_folds_bfloat16_in_float32_and_rounds_once(jax_oracle):
    """JAX CPU's bfloat16 psum is neither a bfloat16 fold (1 + 2^-9 seven times stays 1 there) nor exact
    (1 + 2^-8 + 2^-32 rounds up exactly): it rounds float32 partial sums, then to bfloat16 once."""
    once = jax_oracle.run("psum", {"x": 8}, (ONCE,), {"axis_name": "x"}).outputs
    tie = jax_oracle.run("psum", {"x": 4}, (TIE,), {"axis_name": "x"}).outputs
    assert [float(o[0]) for o in once] == [1.0 + 2.0**-6] * 8
    assert [float(o[0]) for o in tie] == [1.0] * 4


@pytest.mark.differential
@pytest.mark.parametrize(("mutant", "xs"), [(_folded_in_bfloat16, ONCE), (_folded_in_float64, TIE)],
                         ids=["accumulates-in-bfloat16", "accumulates-in-float64"])
def test_a_wrong_bfloat16_accumulation_disagrees_with_jax(mutant, xs, monkeypatch, jax_oracle):
    """Either wrong width of accumulation gives other bytes than real JAX."""
    monkeypatch.setattr(collectives._allreduce, "fold", mutant)
    case = Case("psum", {"x": len(xs)}, (tuple(xs),), {"axis_name": "x", "axis_index_groups": None})
    with pytest.raises(AssertionError, match=r"simulator != jax: bytes differ"):
        check_agreement(case, jax_oracle)
    assert not strategies.differences(strategies.run_jax(case, jax_oracle), strategies.run_spec(case), "jax", "spec")

