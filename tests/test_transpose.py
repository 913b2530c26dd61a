"""Transposes: the adjoint identity for every collective, the design note's five examples, double transposes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives as C
import sim
from sim import P

MESH = {"i": 4}


def adjoint_sides(f: sim.ShardMapped, primals: tuple, cotangent_seed: int, linear_argnums=None):
    """<f(x), y> and <x, f^T(y)> for random integer cotangents y (exact in int64)."""
    run = f.run(*primals)
    outs = run.outputs if isinstance(run.outputs, tuple) else (run.outputs,)
    rng = np.random.default_rng(cotangent_seed)
    cts = [rng.integers(-9, 10, o.shape).astype(o.dtype) for o in outs]
    linear = tuple(range(len(primals))) if linear_argnums is None else linear_argnums
    others = [p for i, p in enumerate(primals) if i not in linear]
    back = C.linear_transpose(f, *primals, linear_argnums=linear_argnums).run(*others, *cts).outputs
    back = back if isinstance(back, tuple) else (back,)
    lhs = sum(int(np.vdot(o, c)) for o, c in zip(outs, cts))
    rhs = sum(int(np.vdot(primals[i], b)) for i, b in zip(linear, back))
    return lhs, rhs


def mapped(body, in_specs, out_specs, mesh=MESH):
    return sim.shard_map(body, mesh=sim.Mesh(mesh), in_specs=in_specs, out_specs=out_specs)


def ints(seed: int, shape) -> np.ndarray:
    return np.random.default_rng(seed).integers(-9, 10, shape).astype(np.int64)


ADJOINT_CASES = [  # (id, program, global input shapes)
    ("psum", mapped(lambda x: C.psum(x, "i"), P("i"), P()), [(8, 3)]),
    ("psum_invariant", mapped(lambda x: C.psum_invariant(x, "i"), P("i"), P()), [(8,)]),
    ("pvary", mapped(lambda x: C.pvary(x, "i"), P(), P("i")), [(2, 3)]),
    ("all_gather", mapped(lambda x: C.all_gather(x, "i"), P("i"), P("i")), [(8, 3)]),
    ("all_gather(axis=1, tiled)", mapped(lambda x: C.all_gather(x, "i", axis=1, tiled=True), P("i"), P("i")),
     [(8, 3)]),
    ("all_gather(groups)", mapped(lambda x: C.all_gather(x, "i", axis_index_groups=[[0, 2], [3, 1]]), P("i"),
                                  P("i")), [(8,)]),
    ("psum_scatter", mapped(lambda x: C.psum_scatter(x, "i"), P("i"), P("i")), [(16, 2)]),
    ("psum_scatter(tiled, dim 1)", mapped(lambda x: C.psum_scatter(x, "i", scatter_dimension=1, tiled=True),
                                          P("i"), P("i")), [(4, 8)]),
    ("all_to_all", mapped(lambda x: C.all_to_all(x, "i", 0, 1), P("i"), P("i")), [(16, 3)]),
    ("all_to_all(tiled)", mapped(lambda x: C.all_to_all(x, "i", 1, 0, tiled=True), P("i"), P("i")), [(8, 8)]),
    ("all_gather_invariant", mapped(lambda x: C.all_gather_invariant(x, "i", tiled=True), P("i"), P()), [(8,)]),
    ("pscatter", mapped(lambda x: C.pscatter(x, "i", axis=1, tiled=True), P(), P("i")), [(3, 8)]),
    ("ppermute", mapped(lambda x: C.ppermute(x, "i", [(0, 1), (1, 3), (3, 0)]), P("i"), P("i")), [(8,)]),
    ("psum(groups)", mapped(lambda x: C.psum(x, "i", axis_index_groups=[[0, 3], [2, 1]]), P("i"), P("i")),
     [(8, 2)]),
    ("pmean(groups)", mapped(lambda x: C.pmean(x, "i", axis_index_groups=[[0, 1], [2, 3]]), P("i"), P("i")),
     [(8,)]),
    ("psum over ('x','y')", mapped(lambda x: C.psum(x, ("y", "x")), P(("x", "y")), P(), {"x": 2, "y": 2}),
     [(8,)]),
    ("all_gather over 'y' of 2-D", mapped(lambda x: C.all_gather(x, "y", tiled=True), P("x", "y"), P("x", "y"),
                                          {"x": 2, "y": 2}), [(4, 4)]),
    ("local ops and psum", mapped(lambda x, y: C.psum((x * 3 - x[::-1]).sum(axis=0), "i") + y.sum(axis=0),
                                  (P("i"), P()), P()), [(8, 2), (5, 2)]),
]


@pytest.mark.parametrize("f, shapes", [c[1:] for c in ADJOINT_CASES], ids=[c[0] for c in ADJOINT_CASES])
@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_adjoint_identity(f, shapes, seed):
    """<A x, y> == <x, A^T y> exactly, for integer x and y, for every collective and a composite."""
    primals = tuple(ints(seed + k, s) for k, s in enumerate(shapes))
    lhs, rhs = adjoint_sides(f, primals, seed)
    assert lhs == rhs


def ragged_args(data):
    """Valid ragged arguments on 2 devices with zero-size slices next to non-empty ones."""
    rows, slices = 9, 2  # at most 4 slices of 2 rows each way, so some rows are padding
    sizes = [[data.draw(st.integers(0, 2)) for _ in range(slices * 2)] for _ in range(2)]
    send = np.array(sizes)
    # device d's slice for receiver r, k-th: its size is recv_sizes[r][d * slices + k]
    recv = np.array([[send[s][r * slices + k] for s in range(2) for k in range(slices)] for r in range(2)])
    input_offsets = np.array([np.concatenate([[0], np.cumsum(s)[:-1]]) for s in send])
    output_starts = np.array([np.concatenate([[0], np.cumsum(r)[:-1]]) for r in recv])
    output_offsets = np.array([[output_starts[r][s * slices + k] for r in range(2) for k in range(slices)]
                               for s in range(2)])
    return (ints(data.draw(st.integers(0, 99)), (2 * rows, 3)), ints(7, (2 * rows, 3)),
            input_offsets.reshape(-1), send.reshape(-1), output_offsets.reshape(-1), recv.reshape(-1))


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_ragged_adjoint_with_empty_slices(data):
    """ragged_all_to_all is linear in (operand, output) jointly: its transpose sends rows back to where they
    came from and keeps exactly the output rows no slice overwrote; zero-size slices included."""
    f = mapped(lambda *a: C.ragged_all_to_all(*a, axis_name="i"), (P("i"),) * 6, P("i"), {"i": 2})
    args = ragged_args(data)
    lhs, rhs = adjoint_sides(f, args, data.draw(st.integers(0, 99)), linear_argnums=(0, 1))
    assert lhs == rhs


def note_examples():
    """The design note's five examples on a 4-device mesh, with g(x) = 2x."""
    g = lambda x: x * 2.0
    return {
        "1: psum to an unmapped output": (mapped(lambda x: C.psum(g(x), "i"), P("i"), P()), (8,), None),
        "2: psum to a mapped output": (mapped(lambda x, y: C.psum(g(x), "i") * y, (P("i"), P("i")), P("i")),
                                       (8,), (0,)),
        "3: the cursed identity": (mapped(lambda x: x, P(), P()), (3,), None),
        "4: all_gather_invariant to an unmapped output": (
            mapped(lambda x: C.all_gather_invariant(x, "i", tiled=True), P("i"), P()), (8,), None),
        "5: all_gather to a mapped output": (
            mapped(lambda x, y: C.all_gather(x, "i", tiled=True) * y, (P("i"), P("i")), P("i")), (4,), (0,)),
    }


def run_both_ways(name):
    f, shape, linear = note_examples()[name]
    rng = np.random.default_rng(0)
    primals = (rng.standard_normal(shape),) if linear is None else (rng.standard_normal(shape),
                                                                   rng.standard_normal(4 * 4 if shape == (4,) else 8))
    forward = f.run(*primals)
    others = [p for i, p in enumerate(primals) if linear is not None and i not in linear]
    t = C.linear_transpose(f, *primals, linear_argnums=linear)
    ct = rng.standard_normal(forward.outputs.shape)
    back = t.run(*others, ct)
    tt = C.linear_transpose(t, *others, ct, linear_argnums=(len(others),))
    again = tt.run(*others, *(p for i, p in enumerate(primals) if linear is None or i in linear))
    return forward, back, again


@pytest.mark.parametrize("name", list(note_examples()))
def test_note_example_transposes_twice_without_growth(name):
    """Transposing twice gives back the original program, op for op, with the same values and bytes."""
    forward, _, again = run_both_ways(name)
    assert again.program().ops() == forward.program().ops()
    assert again.trace.total_bytes == forward.trace.total_bytes
    np.testing.assert_allclose(again.outputs, forward.outputs, rtol=1e-12)


@pytest.mark.parametrize("name, ops, sent_bytes", [
    ("1: psum to an unmapped output", ["pvary", "multiply"], 0),
    ("2: psum to a mapped output", ["multiply", "psum_invariant", "pvary", "multiply"], 4 * 3 * 2 * 8),
    ("3: the cursed identity", [], 0),
    ("4: all_gather_invariant to an unmapped output", ["pscatter"], 0),
    ("5: all_gather to a mapped output", ["multiply", "psum_scatter"], 4 * 3 * 1 * 8),
])
def test_note_example_transposes_as_the_note_says(name, ops, sent_bytes):
    """Each transposed example is the note's efficient program: psum -> pvary (no communication),
    all_gather_invariant -> pscatter (none), all_gather -> psum_scatter, the cursed identity -> nothing."""
    _, back, _ = run_both_ways(name)
    assert back.program().ops() == ops
    assert back.trace.total_bytes == sent_bytes


def test_cursed_identity_transposes_to_zero_bytes():
    """shard_map(lambda x: x, P(), P()) transposes to a program that sends nothing, however often."""
    f = mapped(lambda x: x, P(), P())
    x = np.arange(3.0)
    for _ in range(3):
        f = C.linear_transpose(f, x)
        run = f.run(x)
        assert run.trace.total_bytes == 0 and len(run.trace) == 0 and run.program().equations == []


def test_pmean_transposes_to_a_scaled_pvary():
    """<pmean(x), y> == <x, pvary(y) / n> in floats (pmean rounds 1/n, so not in integers)."""
    f = mapped(lambda x: C.pmean(x, "i"), P("i"), P())
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(8), rng.standard_normal(2)
    back = C.linear_transpose(f, x).run(y)
    assert back.program().ops() == ["pvary", "divide"] and back.trace.total_bytes == 0
    np.testing.assert_allclose(np.vdot(f(x), y), np.vdot(x, back.outputs), rtol=1e-12)


def test_nonlinear_program_is_rejected():
    """A program that multiplies two linear inputs has no transpose."""
    f = mapped(lambda x: C.psum(x * x, "i"), P("i"), P())
    with pytest.raises(sim.InvalidArgumentError, match=r"is not linear in the transposed arguments"):
        C.linear_transpose(f, np.ones(8)).run(np.ones(2))


def unchecked(body, in_specs, out_specs, mesh=MESH):
    return sim.shard_map(body, mesh=sim.Mesh(mesh), in_specs=in_specs, out_specs=out_specs, check_vma=False)


UNCHECKED_CASES = [  # (id, program with check_vma=False, global input shapes)
    ("psum to an unmapped output", unchecked(lambda x: C.psum(x, "i"), P("i"), P()), [(8,)]),
    ("psum to a mapped output", unchecked(lambda x: C.psum(x, "i") * 3.0, P("i"), P("i")), [(8,)]),
    ("pmean", unchecked(lambda x: C.pmean(x, "i"), P("i"), P()), [(8,)]),
    ("grouped psum", unchecked(lambda x: C.psum(x, "i", axis_index_groups=[[0, 2], [1, 3]]), P("i"), P("i")),
     [(8,)]),
    ("all_gather to an unmapped output", unchecked(lambda x: C.all_gather(x, "i", tiled=True), P("i"), P()),
     [(8,)]),
    ("all_gather to a mapped output", unchecked(lambda x: C.all_gather(x, "i"), P("i"), P("i")), [(8,)]),
    ("psum_scatter", unchecked(lambda x: C.psum_scatter(x, "i", tiled=True), P("i"), P("i")), [(32,)]),
    ("all_to_all", unchecked(lambda x: C.all_to_all(x, "i", 0, 0, tiled=True), P("i"), P("i")), [(16,)]),
    ("replicated input", unchecked(lambda w: w * 2.0, P(), P("i")), [(2,)]),
    ("cursed identity", unchecked(lambda x: x, P(), P()), [(3,)]),
    ("2-D mesh, psum over one axis", unchecked(lambda x: C.psum(x, "i"), P(("i", "j")), P("j"),
                                               {"i": 2, "j": 2}), [(8,)]),
]


@pytest.mark.parametrize("f, shapes", [c[1:] for c in UNCHECKED_CASES], ids=[c[0] for c in UNCHECKED_CASES])
def test_unchecked_programs_satisfy_the_adjoint_identity(f, shapes):
    """A check_vma=False program transposes the way JAX does (unmapped output cotangents divided by their
    replication, psum to psum, replicated inputs' cotangents psummed), and <A x, y> == <x, A^T y> exactly
    (integer values, divisions by powers of two)."""
    lhs, rhs = adjoint_sides(f, tuple(ints(i, s).astype(np.float64) for i, s in enumerate(shapes)), 7)
    assert lhs == rhs


def test_unchecked_psum_transposes_to_psum_of_the_divided_cotangent():
    """JAX's pre-vma transpose of psum to an unmapped output: divide by the axis size, then psum (the design
    note's Example 1 as JAX computes it without types): one all-reduce of messages, value ybar on every
    device."""
    f = unchecked(lambda x: C.psum(x, "i"), P("i"), P())
    back = C.linear_transpose(f, np.ones(8)).run(np.array([4.0, 8.0]))
    assert back.program().ops() == ["divide", "psum"]
    assert back.trace.total_bytes > 0
    np.testing.assert_array_equal(back.outputs, np.tile([4.0, 8.0], 4))


def test_unchecked_cursed_identity_grows_as_in_jax():
    """The note's cursed identity without types: t(f) = psum(x / 4) and t(t(f)) = psum(psum(x / 4) / 4):
    the program grows with each transpose, while the values stay the identity's."""
    f = unchecked(lambda x: x, P(), P())
    once = C.linear_transpose(f, np.zeros(3))
    twice = C.linear_transpose(once, np.zeros(3))
    y = np.array([1.0, 2.0, 3.0])
    assert once.run(y).program().ops() == ["divide", "psum"]
    assert twice.run(y).program().ops() == ["divide", "psum", "divide", "psum"]
    np.testing.assert_array_equal(twice(y), y)


def test_checked_programs_keep_the_typed_transposes():
    """With check_vma=True the same psum transposes to pvary: no division, no messages."""
    f = mapped(lambda x: C.psum(x, "i"), P("i"), P())
    back = C.linear_transpose(f, np.ones(8)).run(np.array([4.0, 8.0]))
    assert back.program().ops() == ["pvary"] and back.trace.total_bytes == 0


@pytest.mark.parametrize("f, shapes", [c[1:] for c in ADJOINT_CASES], ids=[c[0] for c in ADJOINT_CASES])
def test_adjoint_identity_in_floats(f, shapes):
    """<A x, y> == <x, A^T y> for float64 within the rounding of the two dot products and of the sums the
    collectives do: each side sums at most n products (n = elements involved), so the sides differ by at
    most 4 n eps times the sum of the absolute values of all terms (a standard bound for recursive sums)."""
    rng = np.random.default_rng(1)
    primals = tuple(rng.standard_normal(s) for s in shapes)
    run = f.run(*primals)
    ct = rng.standard_normal(run.outputs.shape)
    back = C.linear_transpose(f, *primals).run(ct).outputs
    back = back if isinstance(back, tuple) else (back,)
    lhs_terms = run.outputs * ct
    rhs_terms = [p * b for p, b in zip(primals, back)]
    # the dot products' terms, plus up to 8 addends (the mesh size) per element summed inside collectives
    n = lhs_terms.size + sum(t.size for t in rhs_terms) + run.outputs.size * 8
    bound = 4 * n * np.finfo(np.float64).eps * (np.abs(lhs_terms).sum() + sum(np.abs(t).sum() for t in rhs_terms))
    assert abs(lhs_terms.sum() - sum(t.sum() for t in rhs_terms)) <= bound


def test_non_linear_inputs_promoted_by_pvary_are_replayed():
    """A non-linear invariant input that meets a varying value is promoted by a recorded pvary (sim
    writes its axes as `axes`); replaying it calls pvary again, and the transpose scales by it."""
    f = mapped(lambda x, y: x * y, (P("i"), P()), P("i"), {"i": 2})
    x, y = np.arange(4.0), np.array([2.0, 3.0])
    assert "pvary" in f.run(x, y).program().ops()
    back = C.linear_transpose(f, x, y, linear_argnums=(0,))(y, np.ones(4))
    np.testing.assert_array_equal(back, np.array([2.0, 3.0, 2.0, 3.0]))
