"""The differential campaign (`campaign.py`) against JAX's own transpose and batching rules, and its findings.

The campaign runs in its own process with 8 CPU devices (as `python tests/campaign.py` does); this process
never imports jax. FINDINGS.md lists every disagreement the campaign or the bridge found, each pinned by a
test that expects JAX's current behaviour; the two the campaign found are pinned here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cpu_ragged_jobs import job, one
from strategies import Case, ragged_case
from test_cpu_ragged import batched, child, simulator_transpose  # noqa: F401  (child: a fixture)

import collectives as C

pytestmark = [
    pytest.mark.differential,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs the jax extra"),
]
# The campaigns draw the same derandomized calls again (each mutant its collective's, `--answers` with and
# without the fixes in test_jax_fixes_rules.py): the run's compilation cache (conftest.py) compiles each once.

ROOT = Path(__file__).resolve().parent.parent
CAMPAIGN = ROOT / "tests" / "campaign.py"
FINDINGS = ROOT / "FINDINGS.md"


def campaign(*args: str, timeout: int = 900) -> dict[str, Any]:
    """The JSON report of `python tests/campaign.py *args`."""
    done = subprocess.run([sys.executable, str(CAMPAIGN), *args], capture_output=True, text=True, timeout=timeout,
                          check=False, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def known_ids() -> set[str]:
    """The campaign's ids of the known findings, read from its source (this process does not import jax)."""
    source = (ROOT / "oracles" / "_rules.py").read_text()
    table = source[source.index("KNOWN: dict"):source.index("def classify")]
    return set(re.findall(r'^    "([a-z0-9-]+)":', table, flags=re.M))


@pytest.fixture(scope="module")
def default() -> dict[str, Any]:
    return campaign("--profile", "default")


def test_default_campaign_finds_nothing_new(default):
    """The default profile transposes every linear collective (jax.vjp, jax.grad, jax.linear_transpose ==
    meshsim's transpose, which satisfies the adjoint identity) and vmaps every collective (== a per-batch
    loop) on its examples; every disagreement is one of FINDINGS.md's, none is new, and batch axes placed
    anywhere in the arguments reach JAX's batching rules (FINDINGS.md 7 is among the known ones met)."""
    rows = default["rows"]
    new = [f"{r['op']} {r['kind']}: {text}" for r in rows for text in r["new"]]
    assert new == [], "\n\n".join(new)
    kinds = {(r["op"], r["kind"]) for r in rows if r["examples"] >= 6}
    linear = {"all_gather", "all_to_all", "ragged_all_to_all", "psum", "pmean", "psum_scatter", "ppermute",
              "psum_invariant", "pvary", "all_gather_invariant", "pscatter"}
    assert {(op, "transpose") for op in linear} <= kinds
    assert {(op, "vmap") for op in linear | {"pmax", "pmin"}} <= kinds
    assert {name for r in rows for name in r["known"]} <= known_ids()
    # vmap takes arguments whole, so a batch axis after psum_scatter's scatter_dimension is reached
    assert "untiled-psum-scatter-vmap-axis" in {name for r in rows if r["kind"] == "vmap" for name in r["known"]}


def test_default_campaign_types_every_primitive_and_partial_program(default):
    """The vma kind types every multi-operand jax.lax primitive of its table on drawn programs (JAX's typed
    jaxpr against the rule, and out_specs claiming invariance where JAX says so against each device's own
    result), and meets FINDINGS.md 4 (argsort typed invariant) among the known ones; the partial_manual kind
    runs every collective with arrays manual over part of the mesh against the fully manual program."""
    rows = {(r["op"], r["kind"]): r for r in default["rows"]}
    primitives = {op for op, kind in rows if kind == "vma"}
    assert {"sort", "argsort", "top_k", "scatter", "scatter_add", "gather", "dynamic_slice", "dynamic_update_slice",
            "select_n", "where", "cond", "while_loop", "cumsum", "cumprod", "cummax", "associative_scan", "concatenate",
            "pad", "dot_general", "custom_jvp", "custom_vjp", "pure_callback"} <= primitives
    assert all(rows[p, "vma"]["examples"] >= 3 for p in primitives)
    assert "argsort-typed-invariant" in rows["argsort", "vma"]["known"]
    partial = {op for op, kind in rows if kind == "partial_manual" and rows[op, kind]["examples"] >= 2}
    assert {"psum", "all_gather", "all_to_all", "ppermute", "psum_scatter", "ragged_all_to_all", "pvary"} <= partial


def test_every_finding_is_written_up_and_pinned():
    """FINDINGS.md has an entry for every id of the campaign's KNOWN table, and every test it names as the
    pin of a finding exists."""
    text = FINDINGS.read_text()
    assert [name for name in sorted(known_ids()) if f"[{name}]" not in text] == []
    pins = re.findall(r"`tests/(test_\w+\.py)::(test_\w+)", text)
    assert len(pins) >= 9
    for module, name in pins:
        assert f"def {name}(" in (ROOT / "tests" / module).read_text(), f"{module}::{name}"


def test_default_campaign_runs_the_forward_kinds(default):
    """The default profile also runs JAX's forward mode (jvp, every linear collective), compositions of
    transformations (compose, every linear collective) and control flow (control_flow, every collective with
    arrays) on at least two programs each, and every disagreement they meet is a known finding."""
    rows = default["rows"]
    ran = {(r["op"], r["kind"]) for r in rows if r["examples"] >= 2}
    linear = {r["op"] for r in rows if r["kind"] == "transpose"}
    batched = {r["op"] for r in rows if r["kind"] == "vmap"}
    assert {(op, kind) for op in linear for kind in ("jvp", "compose")} <= ran
    assert {(op, "control_flow") for op in batched} <= ran
    assert [r["new"] for r in rows if r["kind"] in ("jvp", "compose", "control_flow") and r["new"]] == []


@pytest.mark.parametrize(("mutant", "op", "kind", "says"), [
    ("psum-transpose", "psum", "transpose", "adjoint identity"),
    # the per-batch loop (positional vmap) or the mesh axis (vmap with axis_name) tells the batch reversed
    ("all-gather-batching", "all_gather", "vmap", "differs from the"),
    ("dot-general-typing", "dot_general", "vma", "dot_general result 0 typed varying along []"),
    ("partial-psum", "psum", "partial_manual", "differs from the fully manual one"),
    ("all-gather-jvp", "all_gather", "jvp", "differs from the float64 finite difference"),
    ("psum-scatter-batching", "all_gather", "compose", "vmap_of_grad"),
    ("scan-transpose", "psum", "control_flow", "differs from jax.vjp of the unrolled program"),
    ("scan-batching", "psum", "control_flow", "jax.vmap differs from the unrolled program run per batch element"),
])
def test_a_wrong_rule_is_caught(mutant, op, kind, says):
    """With a deliberately wrong rule (meshsim's psum transposed to twice the cotangent; JAX's all_gather
    batching rule reversing the batch; JAX's dot_general typed invariant; JAX's psum lowered to twice the
    sum in partial-manual programs; JAX's all_gather JVP doubling the tangent; JAX's psum_scatter batching
    rule reversing the batch, met by all_gather's transpose under vmap; JAX's scan transpose doubling the
    cotangents; JAX's scan batching rule reversing the batch) the campaign reports a new disagreement on that
    collective or primitive (the forward-mode and control-flow kinds with 12 programs, their default being 2)."""
    more = ("--examples", "12") if kind in ("jvp", "compose", "control_flow") else ()
    report = campaign("--profile", "default", "--ops", op, "--kinds", kind, "--mutant", mutant, "--no-shrink", *more)
    [row] = [r for r in report["rows"] if r["kind"] == kind]
    assert row["new"] and says in row["new"][0], row


def test_jax_transpose_with_overlapping_reads_is_pinned(child):  # noqa: F811
    """Pins JAX 0.10.2's transpose rule where it is wrong: two send slices read operand row 0 (the docs allow
    it; they constrain only writes into `output`), so f(x) = [x0, x0] and the operand's cotangent at
    ct = [1, 2] is [3, 0]. JAX writes the returned rows with a ragged_all_to_all, an overlapping write
    (the CPU lowering keeps the later slot: [2, 0]). meshsim's transpose adds them: [3, 0]."""
    args = ([np.array([5.0, 6.0], np.float32)], [np.zeros(2, np.float32)],
            *([np.array(v, np.int32)] for v in ([0, 0], [1, 1], [0, 1], [1, 1])))
    case = Case("ragged_all_to_all", {"x": 1}, args, {"axis_name": "x", "axis_index_groups": None})
    ct = [np.array([1.0, 2.0], np.float32)]
    [reply] = child.ask([job("vjp", case, True, (ct,))])
    assert list(one(reply, case)[0][0]) == [2, 0]
    assert list(simulator_transpose(case, ct)[0][0]) == [3, 0]


def test_jax_vmap_with_unbatched_index_is_pinned(child):  # noqa: F811
    """Pins JAX 0.10.2's batching rule where it fails: vmap over operand and output with the index arrays
    shared (in_axes=(0, 0, None, None, None, None)) raises AssertionError (`bdim_at_second` asserts a
    batched index before its own broadcast branch); meshsim's rule broadcasts the shared arrays
    (test_batching.py::test_batched_ragged_all_to_all_with_unbatched_output_and_sizes)."""
    case = ragged_case({"x": 2}, "x", [[1, 0], [0, 1]], dtype="float32")
    _, stacked = batched(case, 2)
    [reply] = child.ask([job("vmap_data", case, args=(*stacked[:2], *case.args[2:]))])
    assert reply[:2] == ("error", "AssertionError")


_UNCHECKED_GATHER = r"""
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
sys.path.insert(0, sys.argv[1])
import jax, jax.numpy as jnp
from jax._src.lax import parallel
from jax.sharding import PartitionSpec as P
import oracles

f = jax.shard_map(lambda x: parallel.all_gather_invariant(x, "i", tiled=True), mesh=oracles.cpu_mesh({"i": 2}),
                  in_specs=P("i"), out_specs=P("i"), check_vma=False)
print(jax.vjp(f, jnp.array([1.0, 2.0]))[1](jnp.array([1.0, 2.0, 3.0, 4.0]))[0].tolist())
"""


def test_jax_unchecked_all_gather_invariant_transpose_is_pinned():
    """Pins JAX 0.10.2's transpose of all_gather_invariant under check_vma=False where it is wrong: with the
    output mapped over the axis, f(x) = [x0, x1, x0, x1] and the cotangent at ct = [1, 2, 3, 4] is [4, 6];
    JAX slices each device's own cotangent ([1, 4]). meshsim's transpose (psum_scatter when untyped) gives
    [4, 6]."""
    done = subprocess.run([sys.executable, "-c", _UNCHECKED_GATHER, str(ROOT)], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[1.0, 4.0]"
    import sim

    f = sim.shard_map(lambda x: C.all_gather_invariant(x, "i", tiled=True), mesh=sim.Mesh({"i": 2}),
                      in_specs=sim.P("i"), out_specs=sim.P("i"), check_vma=False)
    x = np.array([1.0, 2.0], np.float32)
    back = C.linear_transpose(f, x).run(np.array([1.0, 2.0, 3.0, 4.0], np.float32)).outputs
    assert np.asarray(back).tolist() == [4.0, 6.0]
