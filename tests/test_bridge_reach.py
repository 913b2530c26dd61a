"""The bridge's reach beyond the tutorial corpus: JAX's answer with the truth beside it where JAX's typing is
wrong; what is not simulated named; forward and backward runs with their total; asynchronous collectives;
unreduced types; every primitive JAX registers with its status; the expert-parallel MoE layer bit for bit;
keys and calls; the plain-JAX reproducers of the two differences XLA's fusion across a collective makes.

JAX runs in one worker process with 8 CPU devices (`tests/bridge_tutorial.py`, batches from
`tests/bridge_reach.py`), beside the corpus's worker of `test_bridge_tutorial.py`; this process never imports
jax.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bridge_batches import result, run_batches

# the worker traces the same local work again and again (each run's segments, each generated program's
# forms): the run's compilation cache (conftest.py) compiles each program once
pytestmark = pytest.mark.differential

WORKER = Path(__file__).resolve().parent / "bridge_tutorial.py"
SNAPSHOT = Path(__file__).resolve().parent / "bridge_primitives.txt"
BATCHES = ("diagnostics", "reach", "explicit_types", "primitives", "fusion", "fusion_across_runs", "cut_programs",
           "moe", "moe_fp8", "operands", "segments")


@pytest.fixture(scope="module")
def results() -> dict:
    """Every batch's result from one worker process with 8 CPU devices."""
    return run_batches(WORKER, BATCHES, 900)


def test_gradients_show_their_forward_and_backward_runs(results):
    """A jax.grad program simulates its forward and its backward shard_map: two runs, each line labelled with
    the shard_map's source line, and a total that is the sum of their messages and times."""
    found = result(results, "reach")
    assert found["grad messages"] == [16, 0] and found["grad total"] == 16
    total, each = found["grad time"]
    assert total == pytest.approx(sum(each)) and total > 0
    text = found["grad"]
    assert re.search(r"run 1 of 2 \(the shard_map of <lambda> at .*bridge_reach\.py:\d+\)", text), text
    assert "run 2 of 2" in text and "total: 2 runs, 16 messages" in text, text


def test_compare_jax_never_agrees_for_work_it_did_not_simulate(results):
    """A shard_map JAX runs inside custom_linear_solve (whose bodies the bridge does not walk) is named as not
    simulated, and compare_jax does not report agreement although the values are equal; the same shard_map
    alone is simulated and agrees."""
    found = result(results, "reach")
    assert not found["solved agrees"]
    assert "bit-identical" in found["solved"] and "total: 0 runs" in found["solved"]
    assert re.search(r"not simulated: a shard_map inside 'custom_linear_solve' at .*bridge_reach\.py:\d+",
                     found["solved"]), found["solved"]
    assert found["alone agrees"] and found["alone runs"] == 1


def test_asynchronous_collectives_equal_jitted_jax(results):
    """psum_start, all_gather_start, ppermute_start, psum_scatter_start and all_to_all_start, each waited for
    with .done(): run as meshsim's collectives when they start, bit for bit equal to jitted JAX."""
    same, report = result(results, "reach")["async"]
    assert same, report
    assert "5 collective calls" in report


def test_what_the_bridge_cannot_run_is_refused_with_the_users_line(results):
    """A mutable reference (jax.new_ref) in a body is refused before anything runs: the primitive, the user's
    file and line, and why."""
    said = result(results, "reach")["refused"]
    assert re.match(r"UnsupportedPrimitiveError: primitive 'new_ref' at .*bridge_reach\.py:\d+:\d+ "
                    r"\(reach\.<locals>\.mutated\) cannot run on the simulated mesh: mutable references", said), said


def test_unreduced_outputs_and_their_reduction(results):
    """On an Explicit mesh, a shard_map returning P(unreduced={'i'}) gives each device's partial value, equal
    to JAX's shards bit for bit; resharding it to a replicated value runs the all-reduce JAX runs there as a
    second simulated run, bit for bit."""
    found = result(results, "explicit_types")
    agrees, identical, runs, report = found["unreduced output"]
    assert agrees and identical and runs == 1, report
    assert "float32[4, 2]" in report
    agrees, identical, runs, report = found["reshard of it"]
    assert agrees and identical and runs == 2, report
    assert "the all-reduce of reshard at" in report and "12 between devices" in report, report


DIAGNOSED = {
    # label: [(kind, primitive, devices, finding), ...]
    "argsort": [("typing slip", "sort", (1,), 4), ("false replication claim", "shard_map output 0", (1,), 4)],
    "argsort of a replicated array": [],
    "unchecked replication": [("false replication claim", "shard_map output 0", (1, 2, 3), None)],
    "cond on the device index": [("false replication claim", "shard_map output 0", (1, 2, 3), 13)],
    "pure_callback of a varying value": [("typing slip", "pure_callback", (1, 2, 3), 15),
                                         ("false replication claim", "shard_map output 0", (1, 2, 3), 15)],
    "rng_bit_generator of a varying key": [("typing slip", "rng_bit_generator", (1, 2, 3), 30),
                                           ("false replication claim", "shard_map output 0", (1, 2, 3), 30)],
}


@pytest.mark.parametrize("label", sorted(DIAGNOSED))
def test_jax_answer_with_the_truth_beside_it(results, label):
    """Where JAX's typing slips (argsort, a callback, the bits of a varying key), its choice of branch is untyped
    (cond) or its out_specs claim goes unchecked (check_vma=False), the bridge returns JAX's answer bit for bit,
    and each problem is a Diagnostic (kind, primitive, line, differing devices, FINDINGS.md entry) and a
    BridgeWarning;
    strict=True raises JaxSlipError. A program JAX types right gets none."""
    found = result(results, "diagnostics")[label]
    assert found["same"], found
    assert [(kind, primitive, devices, finding) for kind, primitive, _, _, devices, finding in
            found["diagnostics"]] == DIAGNOSED[label]
    assert len(found["warnings"]) == len(DIAGNOSED[label])
    for (_, _, line, axes, devices, finding), said in zip(found["diagnostics"], found["warnings"]):
        assert axes == ("i",) and line != "<unknown line>"
        assert (f"FINDINGS.md {finding}" if finding else "no FINDINGS.md entry") in said
        assert str(list(devices)) in said
    if DIAGNOSED[label]:
        assert found["strict"].startswith("JaxSlipError: "), found["strict"]
    else:
        assert found["strict"] == ""


def test_every_jax_primitive_has_a_status(results):
    """Every primitive JAX 0.10.2 registers is listed with whether the bridge runs it (the snapshot in
    tests/bridge_primitives.txt, regenerated by `python tests/bridge_tutorial.py --primitives`); the statuses
    of known primitives are right, each refusal has a reason."""
    table = result(results, "primitives")
    snapshot = dict(line.split() for line in SNAPSHOT.read_text().splitlines() if not line.startswith("#"))
    assert {name: status for name, (status, _) in table.items()} == snapshot
    assert len(table) > 250
    expected = {"sin": "local", "dot_general": "local", "sort": "local", "pure_callback": "local",
                "random_bits": "local", "psum_invariant": "collective", "ragged_all_to_all": "collective",
                "unreduced_psum": "collective", "preduced": "collective", "cond": "walked", "scan": "walked",
                "remat2": "walked", "custom_vjp_call": "walked", "psum_invariant_start": "collective",
                "psum_done": "collective", "new_ref": "refused", "get": "refused", "shard_map": "walked",
                "cudnn_fusion": "refused"}
    assert {name: table[name][0] for name in expected} == expected
    assert all(reason for status, reason in table.values() if status == "refused")


def test_fusion_across_a_collective_is_the_only_difference(results):
    """The plain-JAX reproducer of the FUSED rows: jitted JAX is the single rounding of the exact value (XLA
    recomputed the product after the all-reduce and fused it with the subtraction), the program cut at the
    collective and jitted on each side is the double rounding, they differ by a few ulps, and simulate_jax
    equals the cut program bit for bit."""
    found = result(results, "fusion")
    assert found["jitted is the single rounding"] and found["cut is the double rounding"], found
    assert found["differ"] > 0 and 1 <= found["ulps"] <= 8, found
    assert found["bridge is the cut program"], found


def test_fusion_across_the_forward_and_backward_runs(results):
    """The plain-JAX reproducer of the tensor-parallel gelu MLP's gradient: jitted whole, XLA recomputes the
    forward's residuals inside the backward's fusions and some elements of dw1 move by a few ulps (more where
    the terms nearly cancel, never more than an ulp of the largest gradient); cut between forward and
    backward, JAX computes what simulate_jax computes, bit for bit."""
    found = result(results, "fusion_across_runs")
    assert 0 < found["differ"] < found["elements"] and 1 <= found["median ulps"] <= 4, found
    assert found["relative to the largest"] < 2 ** -22, found
    assert found["bridge is the cut program"] and found["dw2 identical"], found


def test_the_bridge_is_jax_cut_at_its_collectives(results):
    """Each program, cut at its collectives in plain JAX (every run of local work and every collective a
    shard_map of its own), is what simulate_jax computes, bit for bit. Jitted JAX equals it too except in the
    four programs where XLA fuses across a collective or across a gradient's forward and backward; the
    bridge's op-by-op evaluation rounds differently somewhere, so the comparison can fail."""
    found = result(results, "cut_programs")
    assert all(row["bridge"] for row in found.values()), found
    fused = {"pmap migration under vmap", "gelu MLP gradient", "layer norm gradient", "MoE layer gradient, width 8"}
    assert {name for name, row in found.items() if not row["jitted"]} == fused, found
    assert not all(row["stepwise"] for row in found.values()), found


def test_moe_layer_equals_jitted_jax_bit_for_bit(results):
    """An expert-parallel MoE layer as open-source ones write it (RNG state passed into the shard_map, top-k,
    dropped tokens, an empty expert, argsort by expert, all_gather of counts, ragged dispatch into an empty
    buffer, ragged_dot, ragged combine) on 4 and 8 devices with check_vma on and off, forward and gradient:
    the simulation equals jitted JAX bit for bit; on 4 devices forward the simulation with compiled=False
    sends the same messages at the same times with the same collective calls, and (check_vma=False) equals
    JAX evaluating the program op by op bit for bit; under check_vma=True the two argsorts are JAX's typing slip
    (FINDINGS.md 4), reported and run as JAX runs them."""
    rows = result(results, "moe")
    assert [(n, check_vma, form) for n, check_vma, form, *_ in rows] == [
        (n, c, f) for n in (4, 8) for c in (True, False) for f in ("forward", "grad")]
    for n, check_vma, form, jitted, differences, eager, diagnostics, messages, report in rows:
        assert jitted, f"{n} devices, check_vma={check_vma}, {form}: {report}"
        expected = [] if (n, form) == (4, "forward") else None
        assert differences == expected, f"{n} devices, check_vma={check_vma}, {form}: {differences}"
        assert eager is (True if (n, check_vma, form) == (4, False, "forward") else None)
        assert diagnostics == ([("typing slip", "sort", 4)] * 2 if check_vma else [])
        assert len(messages) == (1 if form == "forward" else 2) and all(m > 0 for m in messages)


def test_moe_layer_dispatching_float8_equals_jax_bit_for_bit(results):
    """The MoE layer sending its rows as float8_e4m3fn with their float32 scales (as fp8 MoE layers dispatch),
    on 4 and 8 devices: the float8 rows go through the simulated ragged_all_to_all; forward, the simulation
    equals jitted JAX bit for bit; under jax.grad it equals the layer cut at its collectives in plain JAX bit
    for bit, and jitted JAX differs from both in dx alone (its one module fuses the forward's scales into the
    backward, and a cotangent rounded to float8 turns a last-place difference into a float8 step)."""
    rows = result(results, "moe_fp8")
    assert [(n, form) for n, form, *_ in rows] == [(n, f) for n in (4, 8) for f in ("forward", "grad")]
    for n, form, jitted, cut, differing, ulps, moved in rows:
        assert moved, f"{n} devices, {form}: no float8 ragged_all_to_all in device 0's program"
        if form == "forward":
            assert jitted and cut is None and differing == [], (n, form, differing)
        else:
            assert cut, f"{n} devices, {form}: the simulation differs from the program cut at its collectives"
            assert not jitted and differing == [0] and 0 < ulps <= 1024, (n, form, differing, ulps)


def test_compiled_and_stepwise_runs_are_compared_column_by_column(results):
    """The comparison of two simulations (`bridge_checks.run_differences`) can fail: a program run on twice the
    rows sends the same messages with other sizes and ends later, and it says so."""
    differences = result(results, "segments")["different programs"]
    assert "run 0: trace column size_bytes" in differences, differences
    assert any(d.startswith("run 0: ends at") for d in differences), differences


def test_keys_and_calls_equal_jitted_jax(results):
    """A legacy PRNG key operand, typed keys sharded one per device, keys returned from the body, a nested jit
    holding a psum, a custom_jvp function under grad and an ordered io_callback: jitted JAX's outputs bit for
    bit (key outputs compared as their key data)."""
    rows = result(results, "operands")
    assert [label for label, _, _ in rows] == ["legacy key", "typed keys, one per device", "keys out", "nested jit",
                                               "custom_jvp under grad", "ordered io_callback"]
    for label, same, report in rows:
        assert same, f"{label}: {report}"
    assert "uint32[4, 2, 2]" in rows[2][2]
