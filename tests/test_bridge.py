"""The bridge (`oracles.simulate_jax`, `oracles.compare_jax`): real JAX programs on the simulated mesh.

Every case runs in one worker process started with `XLA_FLAGS=--xla_force_host_platform_device_count=8`
(`tests/bridge_programs.py`), as a JAX user runs the bridge; this process never imports jax.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from bridge_batches import result, run_batches

# the worker traces the same local work again and again (each run's segments, each generated program's
# forms): the run's compilation cache (conftest.py) compiles each program once
pytestmark = pytest.mark.differential

WORKER = Path(__file__).resolve().parent / "bridge_programs.py"
# "errors" runs before "moe_ragged", which installs the CPU ragged lowering in the worker
BATCHES = ("bridge_page", "control_flow", "transforms", "batching", "moe", "errors", "moe_ragged", "mutation",
           "reductions", "gathers", "exchanges", "laid_out", "newops", "canonical", "comparison", "remat",
           "compositions", "partial", "nested", "vmap_axes")
PER_COLLECTIVE = 50


@pytest.fixture(scope="module")
def results() -> dict:
    """Every batch's result from one worker process with 8 CPU devices."""
    return run_batches(WORKER, BATCHES, 900)


def test_the_bridge_page_runs_in_a_jax_process(results):
    """The code cells of docs/reference/jax-bridge.md run as written: grad of a psum program, its program and its
    messages, and a psum on a simulated tpu-v5e slice."""
    printed = "".join(result(results, "bridge_page"))
    assert "psum_invariant[axis_name='i']" in printed and "{V:i}" in printed
    assert "16 messages" in printed
    assert "64 messages, simulated time" in printed  # the tpu-v5e slice: 8 chips, each to each


def test_numpy_64_bit_operands_are_canonicalised_as_jax_does(results):
    """A float64 or int64 numpy operand runs as JAX takes it in (float32, int32): `simulate_jax` returns
    jitted JAX's dtype and bits (`psum(np.linspace(0, 1, 8)) * 3` was float64 and 4.8e-7 off)."""
    rows = result(results, "canonical")
    assert [(label, want, got) for label, want, got, _ in rows] == [("float64 linspace", "float32", "float32"),
                                                                   ("int64 arange", "int32", "int32")]
    assert all(same for *_, same in rows)


def test_compare_jax_runs_f_as_jax_runs_it(results):
    """An unjitted `f` is compared with equation-by-equation evaluation, as eager JAX runs it, a jitted one with
    the compiled segments: both agree bit for bit, where the unjitted `f` against compiled segments differed
    (22 ulps: XLA fuses `psum(v @ w) * 0.3 + v * 1.7` where eager JAX rounds each step); and a bfloat16 output
    that differs shows its difference and is accepted within `atol` (its dtype's kind is 'V', not a float's);
    the host's sum of a shard_map's output sharded over the summed axis, and a product contracting it, equal
    JAX's (each device's partial sum, then their sum: 96 ulps apart when summed whole), jitted or not."""
    found = result(results, "comparison")
    assert found == {"unjitted": True, "jitted": True, "unjitted, compiled": False, "bfloat16 diff": 297.0,
                     "bfloat16 within atol": True, "host sum over the sharded axis": True,
                     "host sum over the sharded axis, unjitted": True, "host gram": True,
                     "host gram, unjitted": True}


def test_checkpoint_runs_through_the_bridge(results):
    """`jax.checkpoint` (`remat2`) in a body and around a shard_map, forward and under grad: simulated (a run
    forward; under grad forward and backward, and around the shard_map the recomputed forward too) and equal
    to jitted JAX (forward bit for bit, gradients within 1e-5: op-by-op evaluation against XLA's fusion);
    around a shard_map the bridge walks into it rather than letting JAX run it unsimulated."""
    rows = result(results, "remat")
    assert [(label, runs) for label, _, runs, _ in rows] == [
        ("checkpoint in the body", 1), ("checkpoint around the shard_map", 1),
        ("grad, checkpoint in the body", 2), ("grad, checkpoint around", 3)]
    for label, agrees, _, report in rows:
        assert agrees, f"{label}: {report}"


def test_jax_0_10_2_collectives_run_through_the_bridge(results):
    """pshuffle, pswapaxes (with groups), pcast and axis_size equal real JAX bit for bit through
    `simulate_jax`, and so does pbroadcast, run in JAX under `oracles.install_cpu_lowerings()`; a psend/precv
    pipeline traces with JAX's types and equals the same program with a ppermute run in JAX (XLA:CPU has no
    Send/Recv: ppermute is JAX's documented equivalent); JAX's own gradient of a non-scalar pbroadcast fails
    to trace (pinned); axis_size over a tuple of axes gives JAX's int32[] constant."""
    rows = result(results, "newops")
    assert [label for label, _, _ in rows] == ["pshuffle", "pswapaxes", "pcast", "pbroadcast", "psend/precv",
                                               "axis_size", "jax: grad of pbroadcast"]
    for label, agrees, report in rows:
        assert agrees, f"{label}: {report}"


def test_control_flow_with_collectives_equals_jax(results):
    """cond (a device-dependent one and one on a psum), scan with ppermute and psum in its body, and
    while_loop with psum in its body, walked per device: JAX's outputs bit for bit, and its gradient too; and
    local loops that JAX types by variance under check_vma=True (a scan, a while_loop), compiled whole."""
    rows = result(results, "control_flow")
    assert [label for label, _, _ in rows] == ["program", "grad", "scan typed by variance",
                                               "while_loop typed by variance"]
    for label, agrees, report in rows:
        assert agrees and "bit-identical" in report, f"{label}: {report}"
    for label, _, report in rows[2:]:  # compiled whole, not walked (and rounded) iteration by iteration
        assert report.endswith(": True"), f"{label}: {report}"


def test_jvp_vjp_linear_transpose_and_inner_vmap_equal_jax(results):
    """Programs made by jax.jvp, jax.vjp and jax.linear_transpose, a vmap inside the shard_map body, and
    custom_jvp / custom_vjp / checkpoint calls give JAX's outputs bit for bit through the bridge."""
    rows = result(results, "transforms")
    assert [label for label, _, _ in rows] == ["jvp", "vjp", "linear_transpose", "vmap inside shard_map",
                                               "custom_jvp, custom_vjp, checkpoint"]
    for label, agrees, report in rows:
        assert agrees, f"{label}: {report}"


def test_linearize_and_composed_transformations_equal_jax(results):
    """jax.linearize, vmap of grad, grad of vmap and jvp of vmap of a shard_map with all_gather, psum_scatter
    and ppermute, and a fori_loop of checkpointed ppermute steps with its gradient (the rules campaign's
    jvp, compose and control_flow surfaces as whole programs): JAX's outputs bit for bit."""
    rows = result(results, "compositions")
    assert [label for label, _, _ in rows] == ["linearize", "vmap of grad", "grad of vmap", "jvp of vmap",
                                               "fori_loop with checkpoint", "grad of fori_loop with checkpoint"]
    for label, agrees, report in rows:
        assert agrees and "bit-identical" in report, f"{label}: {report}"


def test_meshsim_batching_rules_equal_jax_vmap(results):
    """collectives.vmap on the simulated mesh gives what jax.vmap of the same jax.lax collective gives on
    real devices, on every device, for every batch axis of all_gather, psum_scatter, all_to_all (tiled and
    untiled), psum, pmin and ppermute."""
    rows = result(results, "batching")
    failures = [f"{label}: {detail}" for label, agrees, detail in rows if not agrees]
    assert not failures and len(rows) >= 40, failures


def test_reductions_over_a_vmap_axis_equal_jax(results):
    """psum, pmax, pmin and pmean over a vmap axis inside a body, alone and with a mesh axis, of floats and
    ints, and the gradient, equal jitted JAX bit for bit (JAX binds them over a positional axis, which the
    bridge took for a mesh axis named 0)."""
    rows = result(results, "vmap_axes")
    failures = [f"{label}: {report}" for label, agrees, report in rows if not agrees]
    assert not failures and len(rows) == 11, failures


@pytest.mark.parametrize("batch", ["reductions", "gathers", "exchanges"])
def test_generated_programs_equal_jax_bit_for_bit(results, batch):
    """Fifty generated programs per collective (plain, under jax.grad, under jax.vmap; manual over every
    mesh axis, over some, or nested in a shard_map over the others) give JAX's outputs bit for bit through
    the bridge."""
    rows = result(results, batch)
    failures = [f"{label}\n    {report}" for _, label, agrees, report in rows if not agrees]
    assert not failures, f"{len(failures)} of {len(rows)} differ:\n" + "\n".join(failures[:10])
    counts = collections.Counter(name for name, *_ in rows)
    assert all(n >= PER_COLLECTIVE for n in counts.values()), counts
    forms = collections.Counter(label.split(" ")[0] for _, label, _, _ in rows)
    assert sum(" auto=" in label and "nested=" not in label for _, label, _, _ in rows) >= 10  # axis_names=
    assert sum(" nested=" in label for _, label, _, _ in rows) >= 10  # the collective in a nested shard_map
    assert forms["grad"] > 0 and sum(n for form, n in forms.items() if form.startswith("vmap")) > 0, forms


def test_moe_dispatch_and_combine_with_grad_agrees(results):
    """A mixture-of-experts layer (all_to_all dispatch, expert, all_to_all combine, psum loss): the loss is
    bit-identical to JAX's and its gradient agrees within float32 rounding."""
    rows = result(results, "moe")
    assert [label for label, _, _ in rows] == ["loss", "grad"]
    for label, agrees, report in rows:
        assert agrees, f"{label}: {report}"
    assert "bit-identical" in rows[0][2]


def test_ragged_moe_with_grad_runs_through_the_bridge(results):
    """The MoE layer with ragged_all_to_all dispatch and combine (JAX's own transpose rule of the ragged
    op in its gradient) runs on the simulated mesh and gives the dense layer's loss and gradient as real
    JAX computes them; with `oracles.install_cpu_ragged_all_to_all` the ragged program's gradient is also
    compared with real JAX running it (key "jax")."""
    found = result(results, "moe_ragged")
    assert found["loss"] and found["grad"], found
    assert found["grad messages"] > found["loss messages"] > 0
    assert found["jax"], found


ERRORS = [
    ("no shard_map", "BridgeError", "has no jax.shard_map.*wrap the per-device body in jax.shard_map"),
    ("collective outside shard_map", "BridgeError", "unbound axis name.*wrap the body in jax.shard_map"),
    ("unsupported primitive", "UnsupportedPrimitiveError",
     r"primitive 'new_ref' at .*bridge_errors\.py:\d+:\d+ .*mutable references.*\(in `.*new_ref\["),
    ("cpu_mesh too large", "DeviceCountError",
     r"\{'i': 16\} has 16 devices but JAX has 8.*xla_force_host_platform_device_count=16"),
    ("compare on a mesh too large", "DeviceCountError", "has 16 devices but JAX has 8"),
    ("a shape without values", "BridgeError",
     r"a shape and dtype without values: simulate_jax runs .* takes arrays.*sim\.ShapeDtypeStruct operands"),
    ("simulate on a mesh too large", "no error", r"\[240\. 256\.\]"),
    ("static argument", "no error", r"^True\[36\. 48\.\] True\[48\. 64\.\]$"),
    ("ragged without the lowering", "LoweringMissingError",
     r"JAX cannot run ragged_all_to_all .*oracles.install_cpu_lowerings\(\)"),
    ("ragged simulated", "no error", r"\[0\.0, 4\.0, 8\.0, 12\.0, 1\.0"),
    # JAX 0.10.2's own rules, wrong today: the transpose of an untiled all_to_all adds the untiled axis
    # again, and the batching rule of an untiled psum_scatter indexes past the operand's rank
    ("jax: grad of an untiled all_to_all", "ValueError", r"Expected cotangent type float32\[4,3,1\]"),
    ("jax: vmap of an untiled psum_scatter", "IndexError", "tuple index out of range"),
    # JAX types argsort's result (sort's second operand, permuted by varying keys) invariant, so out_specs=P()
    # passes its check and returns device 0's order ([1 2 0]; device 1's is [0 1 2]); the bridge returns the
    # same with the slip beside it, and strict=True stops there
    ("jax: argsort of a varying array typed invariant", "JaxSlipError",
     r"'sort' at .* invariant along \['i'\], but it depends on the device.*FINDINGS\.md 4"),
    ("jax: argsort's replicated output", "no error", r"^\[1 2 0\] typing slip sort .*FINDINGS\.md 4"),
    # pmax over axis_index_groups is typed invariant under check_vma=True (psum refuses groups there): JAX
    # returns the first group's maxima, the bridge the same with the slip beside it
    ("jax: grouped pmax's replicated output", "no error",
     r"^\[2\. 3\.\] typing slip pmax .*devices \[2, 3\] differ .*FINDINGS\.md 28"),
    # ppermute over a tuple of axes out of the mesh's order: JAX 0.10.2 numbers its pairs in the mesh's order,
    # where axis_index numbers the tuple in its own; the bridge runs JAX's pairs and says so (FINDINGS.md 29)
    ("jax: ppermute over ('c', 'a') numbered in the mesh's order", "no error",
     r"^\[7\. 0\. 1\. 2\. 3\. 4\. 5\. 6\.\] numbering slip ppermute .*axis_name=\('c', 'a'\) in the mesh's axis "
     r"order \('a', 'c'\).*devices \[1, 2, 3, 4, 5, 6, 7\] receive another device's value.*FINDINGS\.md 29"),
    ("jax: its gradient", "no error", r"^True \['numbering slip', 'numbering slip'\]$"),
    ("jax: ppermute numbering under strict", "JaxSlipError", r"numbers the pairs of 'ppermute'.*FINDINGS\.md 29"),
    # JAX types ragged_all_to_all's result as its `output` operand: with an invariant output buffer the
    # received rows are typed invariant, and out_specs=P() passes JAX's check
    ("jax: ragged_all_to_all typed as its output", "JaxSlipError",
     r"'ragged_all_to_all' at .*bridge_errors\.py:\d+.* invariant along \['i'\].*FINDINGS\.md 5"),
]


@pytest.mark.parametrize(("case", "kind", "match"), ERRORS, ids=[case for case, _, _ in ERRORS])
def test_bad_input_is_a_clear_error(results, case, kind, match):
    """Each bad input raises the named error whose message says what is wrong and what to do (and a mesh
    larger than JAX's devices still simulates); JAX's own rules that are wrong today give the result pinned
    here, so a change in JAX is noticed."""
    import re

    found_kind, message = result(results, "errors")[case]
    assert found_kind == kind, message
    assert re.search(match, message, flags=re.S), message


def test_shard_maps_over_some_mesh_axes_run_on_every_device(results):
    """A shard_map with `axis_names=` a strict subset of the mesh runs on every device of the mesh, each
    holding its block whole along the other axes: a matmul, a sharding constraint in the body, two of three
    axes, an Explicit mesh without `jax.set_mesh`, forward and gradient, bit-identical to jitted JAX; a
    false replication claim names the manual axes only. A bfloat16 psum over some axes, whose compile in JAX
    aborts the process (FINDINGS.md 16), runs and gives what JAX gives manual over every axis; so does
    `jax.smap` (a shard_map manual over its one axis)."""
    rows = result(results, "partial")
    assert len(rows) == 13
    for label, ok, report in rows:
        assert ok, f"{label}: {report}"


def test_nested_shard_maps_run_on_the_same_devices(results):
    """A shard_map nested in a shard_map body (six programs: psum over both axes, a replicated psum, an
    all_gather, a ppermute ring in a fori_loop, a psum_scatter, and two of three axes manual) with check_vma
    on and off, forward and under jax.grad (and mixed between the two shard_maps, forward), equals jitted JAX
    bit for bit; where JAX cannot lower the gradient under check_vma=True (FINDINGS.md 24) the bridge gives
    JAX's unchecked gradient. So do three levels of shard_map, one in a cond and PRNG keys into one. The nested
    outputs are gathered under its line; an unchecked false claim is reported, and stops a strict run; an
    unchecked shard_map nested in a checked one, whose result JAX types invariant (FINDINGS.md 26), gives
    JAX's answer with the false claim beside it, naming that entry; a warm call reports only what its own run
    met."""
    rows = result(results, "nested")
    assert len(rows) == 37
    assert sum("(JAX: ValueError)" in label for label, _, _ in rows) >= 2
    for label, ok, report in rows:
        assert ok, f"{label}: {report}"


def test_a_wrong_collective_in_the_bridge_is_caught(results):
    """With the bridge's psum_invariant deliberately run as meshsim's pmax, compare_jax reports the output
    as different from JAX's."""
    agrees, report = result(results, "mutation")
    assert not agrees
    assert "DIFFERS" in report


def test_device_bytes_are_compared_where_a_layout_is_given(results):
    """A result JAX lays out column-major (`out_shardings=Format(Layout((1, 0)), ...)`): compare_jax checks
    every device buffer byte for byte against meshsim's shard in that layout, and the check refuses other
    values."""
    found = result(results, "laid_out")
    assert found["agrees"] and found["layout"] == (1, 0) and found["checked"] is True, found["row"]
    assert "device bytes in layout (1, 0) equal" in found["row"]
    assert found["other values refused"]
