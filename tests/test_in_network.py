"""'in_network': psum and psum_scatter with the switch doing the sum (NVLS on a switch, SHARP on the NIC
switch of a hierarchical network): the results of 'direct' and of the spec, bit for bit, under any layouts,
groups and dtypes; the time the cost model charges; the errors where the network cannot reduce.

No JAX here.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import layouts
import sim
from collectives import _in_network
from layouts import Layout
from oracles import spec
from sim import P

FREE = sim.CopyCost(bandwidth_bytes_per_s=1e30, run_overhead_s=0.0)
SWITCH = sim.Network(1e-6, 10e9, "switch", switch_reduces=True)


def run(network: sim.Network | None, mesh_axes: dict, body: Any, xs: list, copy_cost: sim.CopyCost = FREE) -> sim.Run:
    """`body` on each device of `mesh_axes` with its own row of `xs`."""
    mesh = sim.Mesh(mesh_axes, network=network, copy_cost=copy_cost)
    spec_ = P(mesh.axis_names)
    f = sim.shard_map(lambda x: body(x[0])[None], mesh=mesh, in_specs=(spec_,), out_specs=spec_, check_vma=False)
    return f.run(np.stack(xs))


def outputs(outcome: sim.Run) -> list[np.ndarray]:
    return [np.asarray(outcome.outputs)[d] for d in range(len(outcome.outputs))]


def same_bits(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(a, b))


# ---------------------------------------------------------------------------------------------- results


def test_the_docstring_example():
    """On 2 devices holding [1, 2] and [10, 20], psum gives [11, 22] on both, psum_scatter 11 and 22."""
    xs = [np.array([1, 2], np.int32), np.array([10, 20], np.int32)]
    summed = run(SWITCH, {"x": 2}, lambda x: collectives.psum(x, "x", algorithm="in_network"), xs)
    assert [o.tolist() for o in outputs(summed)] == [[11, 22], [11, 22]]
    scattered = run(SWITCH, {"x": 2}, lambda x: collectives.psum_scatter(x, "x", algorithm="in_network"), xs)
    assert [o.tolist() for o in outputs(scattered)] == [11, 22]


def test_the_psum_docstring_example():
    """On 4 devices holding [d, 10 d] on a switch that reduces: [6, 60] everywhere, one switch latency plus
    the operand over a port (1 us + 8 bytes / 10 GB/s)."""
    xs = [np.array([d, 10 * d], np.int32) for d in range(4)]
    outcome = run(SWITCH, {"x": 4}, lambda x: collectives.psum(x, "x", algorithm="in_network"), xs)
    assert [o.tolist() for o in outputs(outcome)] == [[6, 60]] * 4
    assert max(c.exit_s for c in outcome.calls) == pytest.approx(1e-6 + 8 / 10e9, rel=1e-12)


DTYPES = [np.int32, np.int8, np.uint16, np.float16, np.float32, np.float64, layouts.BFLOAT16, np.complex64]


@settings(max_examples=40)
@given(n=st.integers(1, 9), op=st.sampled_from(["psum", "pmean", "pmax", "pmin", "psum_scatter"]),
       dtype=st.sampled_from(DTYPES), width=st.integers(1, 3), seed=st.integers(0, 2**32 - 1),
       store_and_forward=st.booleans())
def test_results_are_directs_and_the_specs_bit_for_bit(n, op, dtype, width, seed, store_and_forward):
    """The switch folds every shard in group order, so every dtype (floats of mixed signs and magnitudes,
    bfloat16 folded in float32 and rounded once, wrapping integers) comes out with 'direct''s bits and the
    executable spec's, for any group size (shards of unequal sizes included)."""
    if op in ("pmax", "pmin") and np.dtype(dtype).kind == "c":
        dtype = np.float32
    rng = np.random.default_rng(seed)
    rows = n * width if op == "psum_scatter" else width * 3 + n % 2
    wide = rng.standard_normal(rows) * 10.0 ** rng.integers(-3, 4, rows) * 40
    with np.errstate(over="ignore", invalid="ignore"):  # integers and float16 wrap or overflow as they may
        xs = [(wide * rng.standard_normal(rows)).astype(dtype) for _ in range(n)]
    extra = {"tiled": True} if op == "psum_scatter" else {}
    fn = getattr(collectives, op)
    network = dataclasses.replace(SWITCH, store_and_forward=store_and_forward)
    got = outputs(run(network, {"x": n}, lambda x: fn(x, "x", algorithm="in_network", **extra), xs))
    want = outputs(run(None, {"x": n}, lambda x: fn(x, "x", **extra), xs))
    assert same_bits(got, want)
    assert same_bits(got, [np.asarray(w) for w in getattr(spec, op)(xs, {"x": n}, "x", **extra)])


@settings(max_examples=25)
@given(data=st.data())
def test_layouts_groups_and_several_axes_change_no_value(data):
    """Operands and results in any layout, axis_index_groups and tuples of mesh axes: the values are
    'direct''s, and the result's buffer holds them in the requested layout."""
    op = data.draw(st.sampled_from(["psum", "psum_scatter"]))
    grouped = data.draw(st.booleans())
    mesh_axes, axis_name, groups = ({"x": 4, "y": 2}, ("x", "y"), None) if not grouped else \
        ({"x": 6}, "x", [[0, 2, 4], [5, 3, 1]])
    n = 3 if grouped else 8
    shape = (n * 2, 3, 2) if op == "psum_scatter" else (3, 2, 5)
    xs = [np.arange(math.prod(shape), dtype=np.int32).reshape(shape) * (d + 1) - d for d in range(math.prod(
        mesh_axes.values()))]
    in_order = tuple(data.draw(st.permutations(range(3))))
    out_order = tuple(data.draw(st.permutations(range(3))))
    fn = getattr(collectives, op)
    extra = {"tiled": True} if op == "psum_scatter" else {}

    def body(algorithm: str) -> Any:
        def call(x: np.ndarray) -> Any:
            x = sim.with_layout_constraint(x, Layout(in_order))
            out = fn(x, axis_name, axis_index_groups=groups, algorithm=algorithm, out_layout=Layout(out_order),
                     **extra)
            memory = sim.current().memory
            raw = memory.raw(memory.find(np.asarray(out))).tobytes()
            assert raw == layouts.encode(np.asarray(out), Layout(out_order)).tobytes()
            return out
        return call

    got = outputs(run(SWITCH, mesh_axes, body("in_network"), xs))
    want = outputs(run(None, mesh_axes, body("direct"), xs))
    assert same_bits(got, want)


# ---------------------------------------------------------------------------------------------- time


def _hierarchical(rate: float | None = None) -> sim.Network:
    nodes = sim.Network.hierarchical(4, None, 1e-6, 40e9, 5e-6, 10e9)
    return dataclasses.replace(nodes, switch_reduces=True, switch_reduction_bytes_per_s=rate)


TIMED = [  # (id, network, mesh axes, axis_name, groups, device 0's group, (latency, bytes per second))
    ("switch", SWITCH, {"x": 8}, "x", None, range(8), (1e-6, 10e9)),
    ("switch, 5", SWITCH, {"x": 5}, "x", None, range(5), (1e-6, 10e9)),
    ("switch, slow adders", dataclasses.replace(SWITCH, switch_reduction_bytes_per_s=4e9), {"x": 8}, "x", None,
     range(8), (1e-6, 4e9)),
    ("nodes, across", _hierarchical(), {"x": 8}, "x", None, range(8), (5e-6, 10e9)),
    ("nodes, within", _hierarchical(), {"n": 2, "g": 4}, "g", None, range(4), (1e-6, 40e9)),
    ("nodes, within, slow adders", _hierarchical(20e9), {"n": 2, "g": 4}, "g", None, range(4), (1e-6, 20e9)),
    ("switch, groups", SWITCH, {"x": 6}, "x", [[0, 3], [1, 4], [2, 5]], (0, 3), (1e-6, 10e9)),
]


@pytest.mark.parametrize("op", ["psum", "psum_scatter"])
@pytest.mark.parametrize("floats", [16, 64 * 1024])
@pytest.mark.parametrize("network, mesh_axes, axis_name, groups, members, link", [t[1:] for t in TIMED],
                         ids=[t[0] for t in TIMED])
def test_the_simulated_time_is_the_cost_models(op, floats, network, mesh_axes, axis_name, groups, members, link):
    """With free copies, a call's simulated time equals the cost model's estimate for 'in_network' exactly:
    one switch latency (the node switch's within a node, the NIC switch's across nodes) plus the operand over
    the smaller of the port rate and the switch's reduction rate (worked out by hand in `link`)."""
    devices, members = math.prod(mesh_axes.values()), tuple(members)
    n = len(members)
    xs = [np.ones(floats * n, np.float32) for _ in range(devices)]
    fn = getattr(collectives, op)
    extra = {"tiled": True} if op == "psum_scatter" else {}
    outcome = run(network, mesh_axes, lambda x: fn(x, axis_name, axis_index_groups=groups, algorithm="in_network",
                                                   **extra), xs)
    mesh = sim.Mesh(mesh_axes, network=network)
    estimate = collectives.estimate_s(op, "in_network", mesh, members, (n,), xs[0].nbytes)
    simulated = max(c.exit_s for c in outcome.calls)
    assert simulated == pytest.approx(estimate, rel=1e-9)
    assert simulated == pytest.approx(link[0] + xs[0].nbytes / link[1], rel=1e-9)


def test_the_time_is_one_latency_plus_the_operand_over_the_port():
    """On a switch of w = 10 GB/s the psum of s bytes over 8 takes a + s/w; nccl-tests' busbw,
    2 (p - 1)/p s / t, passes the port rate, which no algorithm of point-to-point messages can."""
    s = 8 << 20
    xs = [np.ones(s // 4, np.float32) for _ in range(8)]
    t = max(c.exit_s for c in run(SWITCH, {"x": 8}, lambda x: collectives.psum(x, "x", algorithm="in_network"),
                                  xs).calls)
    assert t == pytest.approx(1e-6 + s / 10e9, rel=1e-12)
    assert 2 * 7 / 8 * s / t > 10e9 * 1.7


def test_auto_takes_in_network_only_where_the_switch_reduces():
    """'auto' picks 'in_network' for a large psum on a switch that reduces (the fastest there), never on one
    that does not, and 'direct' for psum_scatter on a reducing switch (each egress port carries (p - 1)/p of
    the operand instead of all of it)."""
    xs = [np.ones(1 << 16, np.float32) for _ in range(8)]

    def pick(network: sim.Network, fn: Any, **extra: Any) -> str:
        return run(network, {"x": 8}, lambda x: fn(x, "x", algorithm="auto", **extra), xs).calls[0].algorithm

    assert pick(SWITCH, collectives.psum) == "in_network"
    assert pick(dataclasses.replace(SWITCH, switch_reduces=False), collectives.psum) != "in_network"
    assert pick(SWITCH, collectives.psum_scatter, tiled=True) == "direct"
    h100 = sim.Network.preset("h100-nvlink")
    assert run(h100, {"x": 8}, lambda x: collectives.psum(x, "x", algorithm="auto"), xs).calls[0].algorithm == \
        "in_network"


def test_the_trace_shows_contributions_and_the_multicast():
    """psum on 4: each member's 4 shards go to the shards' owners and each owner's sum to all 4, every record
    arriving when the sums do; the switch's egress and ingress loads are the operand each way."""
    xs = [np.ones(64, np.float32) * d for d in range(4)]
    outcome = run(SWITCH, {"x": 4}, lambda x: collectives.psum(x, "x", algorithm="in_network"), xs)
    records = [m for m in outcome.trace if isinstance(m, sim.MessageRecord) and m.kind == "message"]
    reduce = [m for m in records if m.detail.get("switch") == "reduce"]
    multicast = [m for m in records if m.detail.get("switch") == "multicast"]
    assert sorted((m.src, m.dst) for m in reduce) == [(s, d) for s in range(4) for d in range(4)]
    assert sorted((m.src, m.dst) for m in multicast) == [(s, d) for s in range(4) for d in range(4)]
    assert len({m.arrival_time_s for m in records}) == 1 and all(m.size_bytes == 64 for m in records)


# ---------------------------------------------------------------------------------------------- failures


def test_a_switch_folding_another_way_is_caught(monkeypatch):
    """The bit-for-bit comparison is not vacuous: a switch that adds float32 terms in float64 and rounds once
    gives 2 for 1e8 + 1 - 1e8 + 1, where the group-order fold in float32 gives 1."""
    xs = [np.full(4, v, np.float32) for v in (1e8, 1.0, -1e8, 1.0)]
    want = outputs(run(None, {"x": 4}, lambda x: collectives.psum(x, "x"), xs))
    got = outputs(run(SWITCH, {"x": 4}, lambda x: collectives.psum(x, "x", algorithm="in_network"), xs))
    assert same_bits(got, want) and want[0].tolist() == [1.0] * 4
    def wide(terms: list) -> np.ndarray:
        return np.sum(np.stack(terms).astype(np.float64), axis=0).astype(np.float32)

    monkeypatch.setattr(_in_network, "reducer", lambda reduction: wide)
    got = outputs(run(SWITCH, {"x": 4}, lambda x: collectives.psum(x, "x", algorithm="in_network"), xs))
    assert not same_bits(got, want) and got[0].tolist() == [2.0] * 4
