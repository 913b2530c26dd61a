"""`oracles.install_cpu_ragged_all_to_all()`: JAX's own ragged_all_to_all runs on CPU and agrees with meshsim.

JAX runs in child processes (`cpu_ragged_child.py`, a user's script that installs the lowering before
importing jax); generated cases go to it in batches, one round trip per batch, and every answer is compared
with the simulator (`strategies.run_simulator`) and the spec, bit for bit, through `strategies.differences`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import jax_child
import numpy as np
import pytest
from cpu_ragged_jobs import FORMS, ask_grouped, disagreements, expected, generated, job, one, outputs
from hypothesis import strategies as st
from jax_child import Child
from strategies import DOCS_RAGGED, Case, Fill, cases, differences, features, ragged_case, run_simulator, run_spec

import collectives as C
import sim
from oracles import spec

pytestmark = [
    pytest.mark.differential,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs the jax extra"),
]
# Each mutant's fresh child compiles the cases the mutant is shown on before it is installed: once, in the
# run's compilation cache (conftest.py).

CHILD = Path(__file__).resolve().parent / "cpu_ragged_child.py"
CASES = 120  # generated forward cases, sent in one round trip
FLOATS = st.sampled_from([np.dtype(t) for t in ("float16", "float32", "float64")])


def started() -> Iterator[Child]:
    yield from jax_child.started(CHILD)


child = pytest.fixture(scope="module")(started)
fresh_child = pytest.fixture(started)


# ---------------------------------------------------------------------------------------------- forward


def test_docs_example_under_jit_shard_map(child):
    """The docs' example runs under jax.jit(jax.shard_map(...)) on CPU, check_vma on and off: [1, 3, 0, 0]
    and [2, 2, 4, 0], equal to the spec and the simulator; the install ran before jax was imported."""
    assert child.ready == ("ready", {"installed": True, "devices": 8})
    for reply in child.ask([job("run", DOCS_RAGGED, vma) for vma in (True, False)]):
        got = one(reply, DOCS_RAGGED)
        assert [list(x) for x in got] == [[1, 3, 0, 0], [2, 2, 4, 0]]
        assert disagreements(DOCS_RAGGED, got) == []


@pytest.fixture(scope="module")
def forward_batch() -> list[tuple[Case, bool, tuple[list[np.ndarray], list[np.ndarray]]]]:
    """The generated forward cases with check_vma, and the simulator's and the spec's answers to each: drawn
    and worked out once for both forms of the lowering."""
    batch = generated(st.tuples(cases("ragged_all_to_all"), st.booleans()), CASES)
    return [(case, vma, expected(case)) for case, vma in batch]


@pytest.mark.parametrize("form", list(FORMS))
def test_generated_cases_agree_with_simulator(child, forward_batch, form):
    """120 generated valid cases (meshes of 1-8 devices, axis_index_groups, ranks 1-3, seven dtypes, check_vma
    on and off) in one round trip: JAX's primitive through the CPU lowering == simulator == spec, bit for bit,
    in either form of the lowering."""
    assert len(forward_batch) == CASES
    results = ask_grouped(child, "run", [((case, case.args), vma) for case, vma, _ in forward_batch], form)
    found = [text for (case, _, want), got in zip(forward_batch, results) for text in disagreements(case, got, want)]
    assert found == []


ROUNDS = [  # one receiver's slice much longer than the rounds' chunk of ceil(M / S) rows, the others idle
    ragged_case({"x": 4}, "x", [[9, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [0, 5, 0, 2]], trailing=(2,),
                dtype="float32"),
    ragged_case({"x": 4}, "x", [[0, 7], [0, 0], [1, 0], [2, 0]], axis_index_groups=[[0, 2], [3, 1]]),
    ragged_case({"x": 2}, "x", [[3, 0, 0, 0], [0, 0, 1, 0]]),
]


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("vma", [True, False])
def test_slices_longer_than_a_round_agree(child, vma, form):
    """Slices that need several rounds (up to one per slot) while other devices need none, with and
    without groups and several slots per peer: every device runs the group's rounds and the result equals
    the simulator's and the spec's (and so does the one-shot form)."""
    for reply, case in zip(child.ask([job("run", case, vma, form=form) for case in ROUNDS]), ROUNDS):
        assert disagreements(case, one(reply, case)) == []


@pytest.mark.parametrize("limit, form", [(128, "one shot"), (127, "rounds")])
def test_form_follows_the_one_shot_limit(child, limit, form):
    """The one-shot form (no loop) is chosen exactly when S x M rows with their row numbers fit the limit:
    on {'x': 2} with S = 2 slots and M = 8 output rows of one float32 (4 bytes, and 4 for an int32 row
    number), 2 x 8 x 8 = 128 bytes."""
    case = ragged_case({"x": 2}, "x", [[2, 4], [1, 2]], dtype="float32")
    assert case.args[1][0].shape == (8,)
    [reply] = child.ask([{**job("run", case), "one_shot_bytes": limit, "lowered": True}])
    assert ("stablehlo.while" in outputs(reply, case)) == (form == "rounds")
    [reply] = child.ask([{**job("run", case), "one_shot_bytes": limit}])
    assert disagreements(case, one(reply, case)) == []


@pytest.mark.parametrize("dtype", ["bool", "bfloat16", "complex64", "uint16"])
def test_docs_example_in_other_dtypes(child, dtype):
    """Dtypes the generated cases do not draw (bool, bfloat16, complex64, uint16) run too: the docs' numbers."""
    import ml_dtypes  # installed with jax

    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    data = tuple(tuple(x.astype(dt) for x in per) for per in DOCS_RAGGED.args[:2])
    case = Case("ragged_all_to_all", {"x": 2}, (*data, *DOCS_RAGGED.args[2:]), DOCS_RAGGED.params)
    [reply] = child.ask([job("run", case)])
    got = one(reply, case)
    assert all(x.dtype == dt for x in got)
    want = [np.array(v).astype(dt) for v in ([1, 3, 0, 0], [2, 2, 4, 0])]
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


def test_generated_batches_cover_the_input_space(forward_batch):
    """The generated batch reaches groups, every rank 1-3, float and integer dtypes and both index dtypes."""
    seen = {f for case, _, _ in forward_batch for f in features(case) | {f"index {case.args[2][0].dtype}"}}
    wanted = {"axis_index_groups", "rank 1", "rank 2", "rank 3", "dtype float16", "dtype int8", "index int32",
              "index int64", "zero-size ragged slice"}
    assert wanted <= seen


# ---------------------------------------------------------------------------------------------- autodiff


def transposable() -> st.SearchStrategy[Case]:
    """Float cases whose transpose is defined (send slices do not overlap) and that JAX's transpose rule
    takes (it exchanges offsets over the whole axis, so no axis_index_groups)."""
    readable = st.just(Fill("iota", 0).array)  # finite values, so the adjoint identity is exact in float64
    return cases("ragged_all_to_all", dtypes=FLOATS, fillers=readable, transposable=True).filter(
        lambda c: c.params["axis_index_groups"] is None)


def cotangents(case: Case) -> list[np.ndarray]:
    """Small non-negative integers as floats (exact in every float dtype; no signed zeros or NaNs)."""
    rng = np.random.default_rng(len(repr(case)))
    return [rng.integers(0, 9, x.shape).astype(x.dtype) for x in case.args[1]]


def simulator_transpose(case: Case, cotangent: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """meshsim's transpose (collectives' rule, through `collectives.linear_transpose`) at `cotangent`:
    per-device cotangents of operand and output."""
    mesh, spec = sim.Mesh(dict(case.mesh_shape)), sim.P(tuple(case.mesh_shape))
    stacked = [np.stack(per_device) for per_device in case.args]
    f = sim.shard_map(lambda *b: C.ragged_all_to_all(*(x[0] for x in b), **case.params)[None], mesh=mesh,
                      in_specs=(spec,) * 6, out_specs=spec)
    back = C.linear_transpose(f, *stacked, linear_argnums=(0, 1)).run(*stacked[2:], np.stack(cotangent)).outputs
    return [list(x) for x in back]


def adjoint_sides(case: Case, cotangent: list[np.ndarray], back: list[list[np.ndarray]]) -> tuple[float, float]:
    """<f(operand, output), ct> and <(operand, output), f^T(ct)>, in float64 (exact for these integers)."""
    forward = run_spec(case)
    lhs = sum(np.vdot(np.float64(y), np.float64(c)) for y, c in zip(forward, cotangent))
    rhs = sum(np.vdot(np.float64(x), np.float64(b)) for k in (0, 1) for x, b in zip(case.args[k], back[k]))
    return float(lhs), float(rhs)


def same_values(want: list[np.ndarray], got: list[np.ndarray]) -> bool:
    """Equal dtypes, shapes and values (a zero's sign aside: meshsim masks by multiplying, JAX by selecting)."""
    return all(w.dtype == g.dtype and w.shape == g.shape and np.array_equal(w, g) for w, g in zip(want, got))


def test_grad_and_vjp_equal_meshsim_transpose(child):
    """jax.vjp and jax.grad through the primitive (JAX's JVP and transpose rules, lowered for CPU) give the
    cotangents meshsim's transpose gives, and both satisfy the adjoint identity, check_vma on and off (40
    generated float cases)."""
    batch = generated(st.tuples(transposable(), st.booleans()), 40)
    calls = [((case, (*case.args, cotangents(case))), vma) for case, vma in batch]
    answers = {kind: ask_grouped(child, kind, calls) for kind in ("vjp", "grad")}
    for i, (case, _) in enumerate(batch):
        ct = cotangents(case)
        want = simulator_transpose(case, ct)
        lhs, rhs = adjoint_sides(case, ct, want)
        assert lhs == rhs, f"meshsim's transpose breaks the adjoint identity on\n{case!r}"
        for kind, got in answers.items():
            assert same_values(want[0], got[i][0]), f"{kind}: operand cotangent differs on\n{case!r}"
            if not shared_starts(case):  # there JAX's rule is wrong: test_jax_output_transpose_with_shared_start
                assert same_values(want[1], got[i][1]), f"{kind}: output cotangent differs on\n{case!r}"


def shared_starts(case: Case) -> bool:
    """Whether some receiver has two slices starting at one output row (then at least one of them empty)."""
    starts = spec.all_to_all(list(case.args[4]), case.mesh_shape, case.params["axis_name"], 0, 0,
                             axis_index_groups=case.params["axis_index_groups"], tiled=True)
    return any(len(set(map(int, s))) < len(s) for s in starts)


def test_jax_output_transpose_with_shared_start(child):
    """Pins JAX 0.10.2's transpose rule where it is wrong: a zero-size slice starting on the row where a
    non-empty slice starts (the docs allow it: it writes nothing). The output's cotangent must be zero on
    the rows the non-empty slice overwrote, [0, 0, 1, 1]; JAX builds its mask with `.at[starts].set(1)`,
    so the shared start counts once but its two ends count twice, and it answers [1, 1, 1, 1]. meshsim's
    transpose gives the right answer; when JAX fixes its rule this test fails and can be turned around."""
    args = ([np.arange(1, 5, dtype=np.float32)], [np.zeros(4, np.float32)],
            *([np.array(v, np.int32)] for v in ([0, 2], [2, 0], [0, 0], [2, 0])))
    case = Case("ragged_all_to_all", {"x": 1}, args, {"axis_name": "x", "axis_index_groups": None})
    ct = [np.ones(4, np.float32)]
    [reply] = child.ask([job("vjp", case, True, (ct,))])
    assert list(one(reply, case)[1][0]) == [1, 1, 1, 1]
    assert list(simulator_transpose(case, ct)[1][0]) == [0, 0, 1, 1]


@pytest.mark.parametrize("operand_rows, output_rows", [(0, 0), (2, 0), (0, 2)])
def test_empty_operand_or_output(child, operand_rows, output_rows):
    """Zero-row operands and outputs (legal when every size is 0) run forward and backward, check_vma on and
    off: the result is `output`, the cotangents are zeros and the output's cotangent itself."""
    args = ([np.arange(operand_rows, dtype=np.float32)] * 2, [np.ones(output_rows, np.float32)] * 2,
            *([np.zeros(2, np.int32)] * 2 for _ in range(4)))
    case = Case("ragged_all_to_all", {"x": 2}, args, {"axis_name": "x", "axis_index_groups": None})
    ct = [np.full(output_rows, 2, np.float32)] * 2
    for vma in (True, False):
        run, vjp = child.ask([job("run", case, vma), job("vjp", case, vma, (ct,))])
        assert [list(x) for x in one(run, case)] == [[1] * output_rows] * 2
        assert [list(x) for x in one(vjp, case)[0]] == [[0] * operand_rows] * 2
        assert [list(x) for x in one(vjp, case)[1]] == [[2] * output_rows] * 2


def test_jax_transpose_with_axis_index_groups_is_pinned(child):
    """Pins JAX 0.10.2's transpose rule where it is wrong: with axis_index_groups it exchanges the offsets
    with `all_to_all(..., axis_name)` over the whole axis, ignoring the groups. On {'x': 4} with groups
    [[0, 1], [2, 3]] it fails when the group's slot count (2) is not a multiple of the axis size, and
    otherwise (4 slots) gives cotangents other than meshsim's transpose (which satisfies the adjoint
    identity). When JAX fixes its rule this test fails and can be turned around."""
    groups = [[0, 1], [2, 3]]
    two = ragged_case({"x": 4}, "x", [[1, 2]] * 4, axis_index_groups=groups, dtype="float32")
    four = ragged_case({"x": 4}, "x", [[1, 0, 2, 1]] * 4, axis_index_groups=groups, dtype="float32")
    failed, wrong = child.ask([job("vjp", two, True, (cotangents(two),)), job("vjp", four, True, (cotangents(four),))])
    assert failed[:2] == ("error", "ValueError") and "has to be divisible by the size of the named axis" in failed[2]
    want = simulator_transpose(four, cotangents(four))
    assert adjoint_sides(four, cotangents(four), want)[0] == adjoint_sides(four, cotangents(four), want)[1]
    assert not same_values(want[0], one(wrong, four)[0])


# ---------------------------------------------------------------------------------------------- vmap


def batched(case: Case, size: int) -> tuple[list[Case], tuple[list[np.ndarray], ...]]:
    """`size` variants of `case` (data shifted per batch element, the same index tables) and their per-device
    arguments stacked on a new leading batch axis."""
    variants = []
    for b in range(size):
        with np.errstate(all="ignore"):  # random bits may overflow: any values do
            data = tuple(tuple(np.asarray(x + b).astype(x.dtype) for x in per) for per in case.args[:2])
        variants.append(Case(case.op, case.mesh_shape, (*data, *case.args[2:]), case.params))
    stacked = tuple([np.stack([v.args[k][d] for v in variants]) for d in range(case.devices)] for k in range(6))
    return variants, stacked


def test_vmap_equals_per_batch_loop(child):
    """jax.vmap of the primitive (JAX's batching rule merges the batch into the ragged axis, then the CPU
    lowering runs) equals the simulator run once per batch element (20 generated cases, batches of 3)."""
    # zero-size trailing dimensions break JAX's batching rule: test_jax_vmap_with_empty_rows_is_pinned
    batch = generated(cases("ragged_all_to_all").filter(
        lambda c: c.params["axis_index_groups"] is None and 0 not in c.args[0][0].shape[1:]), 20)
    prepared = [batched(case, 3) for case in batch]
    results = ask_grouped(child, "vmap", [((case, stacked), True) for case, (_, stacked) in zip(batch, prepared)])
    for (variants, _), got in zip(prepared, results):
        for b, variant in enumerate(variants):
            assert differences(run_simulator(variant), [x[b] for x in got], "simulator", "jax vmap") == []


def test_jax_vmap_with_empty_rows_is_pinned(child):
    """Pins JAX 0.10.2's batching rule where it fails: rows of zero elements (operand int32[2, 0]) are legal
    and the vmapped result is the batch of outputs unchanged, but the rule splits the merged result with
    `reshape(size, -1, *shape[1:])`, and -1 next to a zero dimension divides by zero. When JAX fixes it
    this test fails and can be turned around."""
    case = ragged_case({"x": 2}, "x", [[1, 0], [0, 1]], trailing=(0,))
    _, stacked = batched(case, 2)
    [reply] = child.ask([job("vmap", case, args=stacked)])
    assert reply[:3] == ("error", "ZeroDivisionError", "integer modulo by zero")


def test_vmap_with_axis_index_groups_is_jax_refusal(child):
    """JAX's batching rule rejects axis_index_groups; the refusal comes back as JAX's own error."""
    case = ragged_case({"x": 4}, "x", [[1, 0]] * 4, axis_index_groups=[[0, 1], [2, 3]])
    _, stacked = batched(case, 2)
    [reply] = child.ask([job("vmap", case, args=stacked)])
    assert reply[:2] == ("error", "NotImplementedError")


# ---------------------------------------------------------------------------------------------- undefined inputs


def small(operand: list[list[int]], output_rows: int, tables: list[list[list[int]]]) -> Case:
    """A hand-written 2-device case on {'x': 2}: operands, zero outputs and the four index tables."""
    args = ([np.array(o, np.int32) for o in operand], [np.full(output_rows, -1, np.int32)] * 2,
            *([np.array(t, np.int32) for t in table] for table in tables))
    return Case("ragged_all_to_all", {"x": 2}, args, {"axis_name": "x", "axis_index_groups": None})


UNDEFINED = {  # what the lowering does where the docs give no meaning, as its module docstring says
    "read past the operand: zeros": (
        small([[1, 2], [3, 4]], 3, [[[1, 0], [0, 0]], [[2, 0], [0, 0]], [[0, 0], [0, 0]], [[2, 0], [0, 0]]]),
        [[2, 0, -1], [-1, -1, -1]]),
    "write past the output: dropped": (
        small([[1, 2], [3, 4]], 3, [[[0, 0], [0, 0]], [[2, 0], [0, 0]], [[2, 0], [0, 0]], [[2, 0], [0, 0]]]),
        [[-1, -1, 1], [-1, -1, -1]]),
    "overlapping writes: the later slot wins": (
        small([[1, 2], [3, 4]], 3, [[[0, 0], [0, 0]], [[2, 0], [2, 0]], [[0, 0], [1, 0]], [[2, 2], [0, 0]]]),
        [[1, 3, 4], [-1, -1, -1]]),
    "one sender's overlapping slots: each writes its own recv_sizes rows, the later slot wins": (
        small([[1, 2], [3, 4]], 3, [[[0, 0, 0, 0], [0] * 4], [[2, 2, 0, 0], [0] * 4], [[0, 1, 0, 0], [0] * 4],
                                     [[2, 0, 0, 0], [0] * 4]]),
        [[1, 2, -1], [-1, -1, -1]]),
    "negative size: writes nothing": (
        small([[1, 2], [3, 4]], 3, [[[0, 0], [0, 0]], [[-1, 0], [0, 0]], [[0, 0], [0, 0]], [[-1, 0], [0, 0]]]),
        [[-1, -1, -1], [-1, -1, -1]]),
    "recv_sizes past send_sizes: zeros": (
        small([[1, 2], [3, 4]], 3, [[[0, 0], [0, 0]], [[1, 0], [0, 0]], [[0, 0], [0, 0]], [[3, 0], [0, 0]]]),
        [[1, 0, 0], [-1, -1, -1]]),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("name", list(UNDEFINED))
def test_undefined_inputs_are_treated_as_documented(child, name, form):
    """Inputs the docs leave undefined get the treatment the lowering documents (not a meaning of the op),
    the same in both forms."""
    case, want = UNDEFINED[name]
    [reply] = child.ask([job("run", case, form=form)])
    assert [list(x) for x in one(reply, case)] == want


def test_index_length_not_multiple_of_group_is_an_error(child):
    """Index arrays whose length the group size does not divide are refused with the values named."""
    case = small([[1, 2], [3, 4]], 3, [[[0, 0, 0]] * 2] * 4)
    [reply] = child.ask([job("run", case)])
    assert reply[0] == "error" and "len(input_offsets)=3 must be a multiple of the group size 2" in reply[2]


# ---------------------------------------------------------------------------------------------- the comparison can fail


MUTANT_CASES = {
    "short": [DOCS_RAGGED],
    "ungrouped": [ragged_case({"x": 4}, "x", [[1, 2], [2, 1], [0, 3], [1, 1]], axis_index_groups=[[0, 2], [3, 1]],
                              trailing=(2,), dtype="float32"),
                  ragged_case({"x": 2, "y": 2}, "y", [[1, 2], [2, 1], [0, 3], [1, 1]],
                              axis_index_groups=[[1], [0]])],
}


@pytest.mark.parametrize("mutant", list(MUTANT_CASES))
def test_a_wrong_lowering_is_caught(fresh_child, mutant):
    """With a deliberately wrong lowering installed (slices one row short; groups forgotten) every case
    here disagrees with the simulator or fails, while the right lowering agrees on the same cases."""
    chosen = MUTANT_CASES[mutant]
    for reply, case in zip(fresh_child.ask([job("run", c) for c in chosen]), chosen):
        assert disagreements(case, one(reply, case)) == []
    assert fresh_child.ask([{"kind": "mutant", "name": mutant}]) == [("ok", mutant)]
    for reply, case in zip(fresh_child.ask([job("run", c) for c in chosen]), chosen):
        assert reply[0] == "error" or disagreements(case, reply[1][0]) != []
