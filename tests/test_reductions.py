"""psum, pmean, pmax, pmin, psum_scatter, ppermute, axis_index, psum_invariant, pvary, all_gather_invariant, pscatter.

No JAX here: the docstrings' examples, XLA:CPU's arithmetic rules on literal bits, the algorithms agreeing
(integers exactly, floats within the bound their summation order allows), their timings against closed
forms, and simulator == executable spec on generated cases (drawn by `reduction_cases.py`, shared with
test_reductions_differential.py, which adds real JAX).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import strategies
from hypothesis import given, settings
from hypothesis import strategies as st
from reduction_cases import OPS, ReductionCase, reduction_cases, run_spec

import collectives
import sim
from collectives._arithmetic import combine, identity
from sim import P

_SIDE = max(10, settings().max_examples // 5)


def check_against_spec(case: ReductionCase) -> list[np.ndarray]:
    """Assert simulator == spec bit for bit (dtype, shape, bytes) on every device; return the spec's answer."""
    want, got = run_spec(case), strategies.run_simulator(case)
    found = strategies.differences(want, got, "spec", "simulator")
    strategies.CHECKED[case.op, "spec"] += 1
    assert not found, f"{len(found)} difference(s) on\n{case!r}\n  " + "\n  ".join(found)
    return want


def per_device(mesh_axes: dict, body, *args_per_device, run: bool = False):
    """Run `body` on each device with its own arguments (lists by device); outputs stacked, or the Run."""
    mesh = sim.Mesh(mesh_axes)
    stacked = [np.stack([np.asarray(a) for a in arg]) for arg in args_per_device]
    spec_ = P(mesh.axis_names)
    # Inputs split over every axis are varying, which pvary and pscatter reject: values only here.
    f = sim.shard_map(lambda *xs: body(*(x[0] for x in xs))[None], mesh=mesh,
                      in_specs=(spec_,) * len(stacked), out_specs=spec_, check_vma=False)
    return f.run(*stacked) if run else f(*stacked)


def bits(a: Any) -> str:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]).tobytes().hex()


# ---------------------------------------------------------------------------------------------- docstrings


_FOUR, _ONES, _SQUARE = [[d, 10 * d] for d in range(4)], [[d + 1] for d in range(4)], [[[1, 2], [3, 4]]] * 2
_C = collectives
DOC_EXAMPLES = [  # (id, mesh, body, per-device inputs, result stacked over devices)
    ("psum", {"x": 4}, lambda x: _C.psum(x, "x"), _FOUR, [[6, 60]] * 4),
    ("psum-groups", {"x": 4}, lambda x: _C.psum(x, "x", axis_index_groups=[[0, 1], [2, 3]]), _FOUR,
     [[1, 10], [1, 10], [5, 50], [5, 50]]),
    ("pmean", {"x": 2}, lambda x: _C.pmean(x, "x"), [np.int32([1, 2]), np.int32([2, 2])], [[1.5, 2.0]] * 2),
    ("pmax", {"x": 2}, lambda x: _C.pmax(x, "x"), [[1, 5], [3, 2]], [[3, 5]] * 2),
    ("pmin", {"x": 2}, lambda x: _C.pmin(x, "x"), [[1, 5], [3, 2]], [[1, 2]] * 2),
    ("psum_scatter", {"x": 2}, lambda x: _C.psum_scatter(x, "x"), [[1, 2], [10, 20]], [11, 22]),
    ("psum_scatter-tiled", {"x": 2}, lambda x: _C.psum_scatter(x, "x", tiled=True), [[1, 2], [10, 20]], [[11], [22]]),
    ("ppermute-ring", {"x": 4}, lambda x: _C.ppermute(x, "x", [(0, 1), (1, 2), (2, 3), (3, 0)]), _ONES,
     [[4], [1], [2], [3]]),
    ("ppermute-one-pair", {"x": 4}, lambda x: _C.ppermute(x, "x", [(0, 2)]), _ONES, [[0], [0], [1], [0]]),
    ("axis_index-y", {"x": 2, "y": 2}, lambda x: _C.axis_index("y") + 0 * x, [0] * 4, [0, 1, 0, 1]),
    ("axis_index-(y,x)", {"x": 2, "y": 2}, lambda x: _C.axis_index(("y", "x")) + 0 * x, [0] * 4, [0, 2, 1, 3]),
    ("psum_invariant", {"i": 2}, lambda x: _C.psum_invariant(x, "i"), [[1, 2], [3, 4]], [[4, 6]] * 2),
    ("pvary", {"i": 2}, lambda x: _C.pvary(x, "i"), [[1, 2]] * 2, [[1, 2]] * 2),
    ("all_gather_invariant", {"i": 2}, lambda x: _C.all_gather_invariant(x, "i"), [[1], [2]], [[[1], [2]]] * 2),
    ("all_gather_invariant-tiled", {"i": 2}, lambda x: _C.all_gather_invariant(x, "i", tiled=True), [[1], [2]],
     [[1, 2]] * 2),
    ("pscatter", {"i": 2}, lambda x: _C.pscatter(x, "i"), _SQUARE, [[1, 2], [3, 4]]),
    ("pscatter-tiled-axis=1", {"i": 2}, lambda x: _C.pscatter(x, "i", axis=1, tiled=True), _SQUARE,
     [[[1], [3]], [[2], [4]]]),
]


@pytest.mark.parametrize("mesh_axes, body, inputs, want", [c[1:] for c in DOC_EXAMPLES],
                         ids=[c[0] for c in DOC_EXAMPLES])
def test_docstring_example(mesh_axes, body, inputs, want):
    """Each worked example in the new collectives' docstrings gives its literal numbers."""
    assert per_device(mesh_axes, body, inputs).tolist() == want


# ---------------------------------------------------------------------------------------------- XLA:CPU facts


def test_sum_starts_from_positive_zero_and_flushes_subnormals():
    """psum of -0.0s is +0.0; float32 subnormals count as zeros; float16 keeps its subnormals (XLA:CPU)."""
    tiny32, tiny16 = np.finfo(np.float32).smallest_subnormal, np.finfo(np.float16).smallest_subnormal
    x32 = [np.float32([-0.0, tiny32, 1.0]), np.float32([-0.0, tiny32, tiny32])]
    out = per_device({"x": 2}, lambda x: collectives.psum(x, "x"), x32)
    assert bits(out[0]) == bits(np.float32([0.0, 0.0, 1.0]))
    x16 = [np.float16([tiny16]), np.float16([tiny16])]
    assert bits(per_device({"x": 2}, lambda x: collectives.psum(x, "x"), x16)[0]) == bits(np.float16([2 * tiny16]))


def test_max_never_picks_nan_and_keeps_the_first_signed_zero():
    """pmax: NaN alone gives -inf, NaN with a number gives the number; max(-0.0, +0.0) is -0.0."""
    xs = [np.float32([np.nan, np.nan, -0.0]), np.float32([np.nan, 2.0, 0.0])]
    out = per_device({"x": 2}, lambda x: collectives.pmax(x, "x"), xs)[0]
    assert bits(out) == bits(np.float32([-np.inf, 2.0, -0.0]))


def test_nan_payload_of_the_later_addend_wins():
    """float32: of two NaN addends the later one (quieted) survives; float16 keeps the earlier sign, canonical."""
    first, second = np.uint32([0x7FC00001]).view(np.float32), np.uint32([0xFF800002]).view(np.float32)
    out = per_device({"x": 2}, lambda x: collectives.psum(x, "x"), [first, second])[0]
    assert bits(out) == bits(np.uint32([0xFFC00002]).view(np.float32))
    half = [np.uint16([0xFD41]).view(np.float16), np.uint16([0x7C1B]).view(np.float16)]
    assert bits(per_device({"x": 2}, lambda x: collectives.psum(x, "x"), half)[0]) == bits(np.uint16([0xFE00]))


def test_pmean_dtypes_and_reciprocal():
    """pmean: int8/int32/bool -> float32, int64 -> float64, floats keep theirs; it multiplies by round(1/n)."""
    for dtype, want in (("int8", "float32"), ("int32", "float32"), ("bool", "float32"), ("int64", "float64"),
                        ("float16", "float16"), ("float64", "float64")):
        out = per_device({"x": 3}, lambda x: collectives.pmean(x, "x"), [np.ones(2, dtype)] * 3)
        assert out.dtype == np.dtype(want), dtype
    xs = [np.float32([1.0]), np.float32([1.0]), np.float32([0.0])]
    out = per_device({"x": 3}, lambda x: collectives.pmean(x, "x"), xs)[0]
    assert bits(out) == bits(np.float32([2.0]) * (np.float32(1) / np.float32(3)))


def test_one_device_mesh_returns_the_value_untouched():
    """On a one-device mesh XLA compiles the all-reduce away: -0.0 and subnormals come back as they went in."""
    x = np.float32([-0.0, np.finfo(np.float32).smallest_subnormal])
    for op in ("psum", "pmean", "pmax", "pmin", "psum_invariant"):
        # per_device runs the lambda before the loop moves on, so it sees this iteration's op.
        out = per_device({"x": 1}, lambda v: getattr(collectives, op)(v, "x"), [x])[0]  # noqa: B023
        assert bits(out) == bits(x), op
    scattered = per_device({"x": 1}, lambda v: collectives.psum_scatter(v, "x", tiled=True), [x])[0]
    assert bits(scattered) == bits(np.float32([0.0, 0.0]))  # reduce-scatter is not removed


def test_python_scalars_are_constants():
    """psum(1, 'x') is the axis size without messages, as in JAX; pmean and pmax of a scalar give it back."""
    def body(x):
        assert collectives.psum(1, "x") == 4 and collectives.psum(0.5, ("x",)) == 2.0
        assert collectives.pmean(3, "x") == 3.0 and collectives.pmax(7, "x") == 7
        assert collectives.psum(1, "x", axis_index_groups=[[0, 1], [2, 3]]) == 2
        return x
    run = per_device({"x": 4}, body, [[0]] * 4, run=True)
    assert len(run.trace) == 0
    with pytest.raises(sim.InvalidArgumentError, match=r"the Python scalar x is int 1 but device 0 has int 0"):
        per_device({"x": 2}, lambda x: np.asarray(collectives.psum(int(x[0]), "x")) + x, [[0], [1]])


def test_pytree_leaves_reduce_separately():
    """A dict/tuple pytree is reduced leaf by leaf; the structure is kept."""
    def body(x):
        tree = collectives.psum({"a": x, "b": (x * 2, x.astype(np.float32))}, "x")
        return np.concatenate([tree["a"], tree["b"][0], tree["b"][1].astype(x.dtype)])
    assert per_device({"x": 2}, body, [[1], [2]]).tolist() == [[3, 6, 3]] * 2


# ---------------------------------------------------------------------------------------------- algorithms


@settings(max_examples=_SIDE)
@given(case=reduction_cases("psum", styles=("bits", "special")),
       algorithm=st.sampled_from(["ring", "recursive_doubling"]), op=st.sampled_from(["psum", "pmax", "pmin"]))
def test_algorithms_agree(case, algorithm, op):
    """Every algorithm gives the direct algorithm's bytes for integers; for float max/min the same values.

    Float max/min may differ in the sign of a zero: a tie of -0.0 and +0.0 keeps whichever comes first in
    the algorithm's order (the ring starts each chunk at a different member).
    """
    params = dict(case.params)
    names = params["axis_name"] if isinstance(params["axis_name"], tuple) else (params["axis_name"],)
    groups = params["axis_index_groups"]
    size = len(groups[0]) if groups else int(np.prod([case.mesh_shape[a] for a in names]))
    if algorithm == "recursive_doubling" and size & (size - 1):
        algorithm = "ring"
    floats = case.args[0][0].dtype.kind == "f"
    op = "pmax" if op == "psum" and floats else op
    base = strategies.run_simulator(ReductionCase(op, case.mesh_shape, case.args, params))
    other = strategies.run_simulator(ReductionCase(op, case.mesh_shape, case.args, {**params, "algorithm": algorithm}))
    if floats:
        assert all(np.array_equal(a, b, equal_nan=True) and a.dtype == b.dtype for a, b in zip(base, other))
    else:
        assert not strategies.differences(base, other, "direct", algorithm)


def _ring_order(n: int, c: int) -> list[int]:
    """The documented ring order of chunk c: members c+1, c+2, ..., c (mod n)."""
    return [(c + 1 + k) % n for k in range(n)]


def _tree(values: list[np.ndarray]) -> np.ndarray:
    """The documented recursive-doubling order: pairs, then pairs of pairs, each from the identity."""
    level = [combine("sum", identity("sum", v.dtype), v) for v in values]
    while len(level) > 1:
        level = [combine("sum", level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_and_recursive_doubling_sum_in_their_documented_order(n):
    """Ring: chunk c folds members c+1, ..., c from 0; recursive doubling: the balanced tree; bit for bit."""
    rng = np.random.default_rng(n)
    xs = [(rng.standard_normal(2 * n + 1) * np.exp2(rng.integers(-20, 20, 2 * n + 1))).astype(np.float32)
          for _ in range(n)]
    ring = per_device({"x": n}, lambda x: collectives.psum(x, "x", algorithm="ring"), xs)[0]
    for c, positions in enumerate(np.array_split(np.arange(2 * n + 1), n)):
        acc = identity("sum", np.float32)
        for member in _ring_order(n, c):
            acc = combine("sum", acc, xs[member][positions])
        assert bits(ring[positions]) == bits(acc)
    if n & (n - 1) == 0:
        tree = per_device({"x": n}, lambda x: collectives.psum(x, "x", algorithm="recursive_doubling"), xs)[0]
        assert bits(tree) == bits(_tree(xs))


@settings(max_examples=_SIDE)
@given(n=st.integers(1, 8), dtype=st.sampled_from(["float16", "float32", "float64"]), seed=st.integers(0, 2**32 - 1),
       algorithm=st.sampled_from(["direct", "ring", "recursive_doubling"]))
def test_float_sums_stay_within_their_error_bound(n, dtype, seed, algorithm):
    """Every algorithm's float sum is within (n-1) eps sum|x_i| + 2n tiny of the exact sum, elementwise.

    Each algorithm adds the n terms in some fixed order: n-1 roundings, each with relative error at most
    u = eps/2 of its partial sum, whose magnitude is at most sum|x_i|; so the error is at most
    (n-1) u sum|x_i| / (1 - (n-1) u) <= (n-1) eps sum|x_i| (Higham, Accuracy and Stability, 4.2). The first
    addition, identity + x, is exact. float32/float64 also flush subnormals: each of the n operands and
    n-1 results may lose less than the smallest normal number `tiny`, hence + 2n tiny (float16 keeps its
    subnormals, and a sum that lands among them is exact).
    """
    if algorithm == "recursive_doubling" and n & (n - 1):
        algorithm = "ring"
    dt = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    spread = 6 if dtype == "float16" else 30
    xs = [(rng.standard_normal(7) * np.exp2(rng.integers(-spread, spread, 7))).astype(dt) for _ in range(n)]
    out = per_device({"x": n}, lambda x: collectives.psum(x, "x", algorithm=algorithm), xs)[0]
    info = np.finfo(dt)
    flush_slack = 2 * n * Fraction(float(info.smallest_normal)) if dt != np.float16 else 0
    for e in range(7):
        terms = [Fraction(float(x[e])) for x in xs]
        bound = (n - 1) * Fraction(float(info.eps)) * sum(abs(t) for t in terms) + flush_slack
        assert abs(Fraction(float(out[e])) - sum(terms)) <= bound, (e, [float(x[e]) for x in xs], float(out[e]))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_timings_follow_the_closed_forms(n):
    """direct: alpha + S/B; ring: 2(n-1)(alpha + S/(nB)); recursive doubling: log2(n)(alpha + S/B).

    On the default fully connected network (alpha = 1 us, B = 100 GB/s), S = the operand's bytes. The ring
    sends 2n(n-1) messages and direct n(n-1) over the network, recursive doubling n log2(n).
    """
    size, alpha, bandwidth = 8 * n * 1000, 1e-6, 100e9
    xs = [np.ones(size // 8, np.float64)] * n
    # per_device runs each lambda at once, while `a` still names its own algorithm.
    runs = {a: per_device({"x": n}, lambda x: collectives.psum(x, "x", algorithm=a), xs, run=True)  # noqa: B023
            for a in ("direct", "ring", "recursive_doubling")}
    steps = int(math.log2(n))
    assert runs["direct"].end_time_s == pytest.approx(alpha + size / bandwidth)
    assert runs["ring"].end_time_s == pytest.approx(2 * (n - 1) * (alpha + size / n / bandwidth))
    assert runs["recursive_doubling"].end_time_s == pytest.approx(steps * (alpha + size / bandwidth))
    crossing = {a: sum(m.src != m.dst for m in r.trace) for a, r in runs.items()}
    assert crossing == {"direct": n * (n - 1), "ring": 2 * n * (n - 1), "recursive_doubling": n * steps}
    assert runs["ring"].end_time_s != runs["direct"].end_time_s


def test_psum_scatter_ring_agrees_and_takes_longer():
    """psum_scatter: 'ring' gives the direct bytes for integers and needs n-1 steps instead of one."""
    xs = [np.arange(8, dtype=np.int32).reshape(4, 2) * (d + 1) for d in range(4)]
    direct = per_device({"x": 4}, lambda x: collectives.psum_scatter(x, "x", tiled=True), xs, run=True)
    ring = per_device({"x": 4}, lambda x: collectives.psum_scatter(x, "x", tiled=True, algorithm="ring"), xs, run=True)
    assert ring.outputs.tolist() == direct.outputs.tolist()
    assert ring.end_time_s == pytest.approx(3 * direct.end_time_s)


# ---------------------------------------------------------------------------------------------- the rest


def test_ppermute_leaves_zeros_where_nothing_arrives_and_counts_negative_indices_from_the_end():
    """Non-destinations get zeros of the dtype; index -1 is the last member."""
    out = per_device({"x": 4}, lambda x: collectives.ppermute(x, "x", [(-1, 0), (0, -2)]),
                     [np.float16([d + 1]) for d in range(4)])
    assert out.dtype == np.float16 and out.tolist() == [[4], [0], [1], [0]]


def test_invariant_collectives_relate_as_the_design_note_says():
    """all_gather_invariant sends what all_gather sends; pscatter undoes it with no messages; pvary too."""
    xs = [np.arange(3) + 10 * d for d in range(4)]
    plain = per_device({"i": 4}, lambda x: collectives.all_gather(x, "i", axis=1), xs, run=True)
    invariant = per_device({"i": 4}, lambda x: collectives.all_gather_invariant(x, "i", axis=1), xs, run=True)
    assert invariant.outputs.tolist() == plain.outputs.tolist()
    sent = lambda run: [(m.src, m.dst, m.size_bytes) for m in run.trace]
    assert sent(invariant) == sent(plain)
    back = per_device({"i": 4}, lambda x: collectives.pscatter(collectives.all_gather_invariant(x, "i", axis=1), "i",
                                                               axis=1), xs, run=True)
    assert back.outputs.tolist() == np.stack(xs).tolist()
    assert len(back.trace) == len(plain.trace)  # only the gather's messages
    quiet = per_device({"i": 4}, lambda x: collectives.pvary(x, "i") + collectives.axis_index("i"), [xs[0]] * 4,
                       run=True)
    assert len(quiet.trace) == 0 and quiet.outputs[:, 0].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("op", OPS)
@settings(max_examples=_SIDE)
@given(data=st.data())
def test_simulator_agrees_with_the_spec(op, data):
    """Simulator == executable spec, bit for bit, on generated cases of every op (no JAX needed)."""
    check_against_spec(data.draw(reduction_cases(op), label="case"))


def test_the_design_note_names_are_jax_names_here():
    """The note's psum2 is `psum_invariant` itself (one function, one definition), reachable by either name;
    the note's pbroadcast is `pvary`, and `pcast(to='varying')` records the same `pvary` equation."""
    assert collectives.psum2 is collectives.psum_invariant
    assert collectives.definition("psum2") is collectives.definition("psum_invariant")
    assert "psum2" not in collectives.REGISTRY
    f = sim.shard_map(lambda x: collectives.pcast(x, "i", to="varying"), mesh=sim.Mesh({"i": 2}), in_specs=P(),
                      out_specs=P("i"))
    run = f.run(np.arange(3.0))
    assert run.program(0).ops() == ["pvary"] and run.trace.total_bytes == 0
    assert np.array_equal(f(np.arange(3.0)), np.tile(np.arange(3.0), 2))
