"""The multi-axis algorithms (every named axis busy at once, one part of the data per axis) and the trees and
chains that follow the topology: the same results as 'direct', the times the cost model gives, concurrent steps
timed as such, fewer hops on a 4x4x4 torus."""

from __future__ import annotations

import math

import numpy as np
import pytest

import collectives
import sim
from collectives import _cost, _hop_order
from collectives._multi_axis import gather_orders
from sim import P

_C = collectives
CALLS = {
    "all_gather": lambda a, algorithm: lambda x: _C.all_gather(x, a, tiled=True, algorithm=algorithm),
    "psum_scatter": lambda a, algorithm: lambda x: _C.psum_scatter(x, a, tiled=True, algorithm=algorithm),
    "psum": lambda a, algorithm: lambda x: _C.psum(x, a, algorithm=algorithm),
    "pmin": lambda a, algorithm: lambda x: _C.pmin(x, a, algorithm=algorithm),
    "all_to_all": lambda a, algorithm: lambda x: _C.all_to_all(x, a, 0, 0, tiled=True, algorithm=algorithm),
}
TORUS = dict(latency_s=1e-6, bandwidth_bytes_per_s=10e9)
FREE_COPIES = sim.CopyCost(bandwidth_bytes_per_s=1e30, run_overhead_s=0.0)  # the network's time alone


def run(axes: dict, body, x: np.ndarray, network: sim.Network | None = None) -> sim.Run:
    names = tuple(axes)
    mesh = sim.Mesh(axes, network=network, copy_cost=FREE_COPIES) if network is not None else sim.Mesh(axes)
    return sim.shard_map(body, mesh=mesh, in_specs=(P(names),), out_specs=P(names), check_vma=False).run(x)


@pytest.mark.parametrize("axes", [{"x": 2, "y": 3}, {"x": 3, "y": 4}, {"x": 2, "y": 2, "z": 2},
                                  {"x": 2, "y": 3, "z": 2}], ids=lambda a: "x".join(map(str, a.values())))
@pytest.mark.parametrize("op", list(CALLS))
@pytest.mark.parametrize("per_member", [1, 5, 24])
def test_multi_axis_gives_the_bytes_of_direct(op, axes, per_member):
    """Integers (exact in any order) come out bit for bit as 'direct''s on grids of 2 and 3 axes, odd sizes and
    blocks smaller than the number of parts included; the run records 'multi_axis'."""
    n = math.prod(axes.values())
    x = np.random.default_rng(n + per_member).integers(-99, 99, n * n * per_member).astype(np.int32)
    names = tuple(axes)
    want = run(axes, CALLS[op](names, "direct"), x)
    got = run(axes, CALLS[op](names, "multi_axis"), x)
    assert np.array_equal(np.asarray(want.outputs), np.asarray(got.outputs))
    assert {c.algorithm for c in got.calls} == {"multi_axis"}


def test_over_one_axis_multi_axis_is_its_inner_algorithm():
    """With one axis name, 'multi_axis' runs (and records) its inner algorithm."""
    x = np.arange(6 * 6, dtype=np.float32)
    got = run({"x": 6}, CALLS["psum"]("x", "multi_axis"), x)
    assert got.calls[0].algorithm == "bidirectional_ring"
    exchanged = run({"x": 6}, CALLS["all_to_all"]("x", "multi_axis"), x)
    assert exchanged.calls[0].algorithm == "direct"


def test_each_part_goes_round_the_axes_in_its_own_rotation():
    """Part r starts on a different axis: in every phase each axis carries exactly one part."""
    for d in (1, 2, 3, 4):
        orders = gather_orders(d)
        assert all(sorted(o) == list(range(d)) for o in orders)
        assert all(sorted(o[i] for o in orders) == list(range(d)) for i in range(d))


@pytest.mark.parametrize("shape", [(4, 4), (4, 4, 4), (4, 8)])
@pytest.mark.parametrize("op", ["all_gather", "psum_scatter", "psum", "all_to_all"])
@pytest.mark.parametrize("size", [256, 64 << 10])
def test_the_cost_model_times_multi_axis_as_simulated_on_a_torus(op, shape, size):
    """On a torus the cost model's estimate of 'multi_axis' (lanes on different axes alongside each other in
    one step) is the simulated time, tiny and mid-sized, within 0.5% (the model cuts the bytes into d equal
    parts; the run cuts whole elements, the first parts one element longer)."""
    axes = dict(zip("xyz", shape))
    n = math.prod(shape)
    network = sim.Network.torus(shape, True, **TORUS)
    mesh = sim.Mesh(axes, network=network, copy_cost=FREE_COPIES)
    x = np.zeros(n * size // 4, np.float32)
    f = sim.shard_map(CALLS[op](tuple(axes), "multi_axis"), mesh=mesh, in_specs=(P(tuple(axes)),),
                      out_specs=P(tuple(axes)), check_vma=False)
    simulated = max(c.exit_s for c in f.run(x).calls)
    estimate = _cost.estimate_s(op, "multi_axis", mesh, tuple(range(n)), shape, size)
    assert estimate == pytest.approx(simulated, rel=5e-3)


def test_patterns_alongside_each_other_share_only_the_links_they_share():
    """A step's alongside patterns on other links add nothing but their latency; on the same links their
    bytes add up; with nothing alongside a step costs what it did."""
    mesh = sim.Mesh({"x": 4, "y": 4}, network=sim.Network.torus((4, 4), True, **TORUS))
    members, shape, b = tuple(range(16)), (4, 4), 1e6
    one = collectives.Pattern("bishift", 1, 1)
    alone = _cost.step_s(one, b, mesh, members, shape)
    assert alone == pytest.approx(1e-6 + b / 10e9)
    other_axis = collectives.Pattern("bishift", 1, 1, ((collectives.Pattern("bishift", 1, 0), b / 2),))
    assert _cost.step_s(other_axis, b, mesh, members, shape) == pytest.approx(alone)
    same_axis = collectives.Pattern("bishift", 1, 1, ((collectives.Pattern("bishift", 1, 1), b / 2),))
    assert _cost.step_s(same_axis, b, mesh, members, shape) == pytest.approx(1e-6 + 1.5 * b / 10e9)


def test_multi_axis_all_gather_runs_both_axes_at_once():
    """On a 4x4 torus the first step of a multi-axis all-gather sends along both axes at the same time (one
    part each), and with copies free the whole takes about half the bidirectional ring's time."""
    axes, block = {"x": 4, "y": 4}, 1 << 16
    network = sim.Network.torus((4, 4), True, **TORUS)
    x = np.zeros(16 * block // 4, np.float32)
    multi = run(axes, CALLS["all_gather"](("x", "y"), "multi_axis"), x, network)
    first = [m for m in multi.trace if m.src == 0 and m.src != m.dst and m.send_time_s == 0.0]
    assert {m.dst for m in first} == {1, 3, 4, 12}
    ring = run(axes, CALLS["all_gather"](("x", "y"), "bidirectional_ring"), x, network)
    assert multi.end_time_s < 0.55 * ring.end_time_s


# ---------------------------------------------------------------------------------------------- hop order


def _torus64() -> sim.Mesh:
    return sim.Mesh({"x": 4, "y": 4, "z": 4}, network=sim.Network.torus((4, 4, 4), True, **TORUS))


def test_a_broadcast_chain_on_a_4x4x4_torus_crosses_63_links_not_81():
    """The chain from any source goes round the ring: 63 one-hop messages instead of group order's 81 hops;
    the tree and Bruck keep an order of no more hops than group order."""
    mesh, listed = _torus64(), tuple(range(64))
    ordered = lambda order: tuple(listed[i] for i in order)
    chain = _hop_order.chain_pairs(64)
    assert _hop_order.hops(mesh, listed, chain) == 81
    assert _hop_order.hops(mesh, ordered(_hop_order.rooted_order(mesh, listed, "chain")), chain) == 63
    tree = _hop_order.tree_pairs(64)
    assert _hop_order.hops(mesh, ordered(_hop_order.rooted_order(mesh, listed, "tree")), tree) <= \
        _hop_order.hops(mesh, listed, tree)
    bruck = _hop_order.bruck_pairs(64)
    assert _hop_order.hops(mesh, ordered(_hop_order.cyclic_order(mesh, listed)), bruck) <= \
        _hop_order.hops(mesh, listed, bruck)


@pytest.mark.parametrize("source", [0, 21, 63])
def test_a_broadcast_chain_follows_the_torus_and_keeps_its_result(source):
    """pbroadcast 'ring' over a 4x4x4 torus: every message crosses one link, every device ends with the
    source's array, and the time is 63 one-hop steps."""
    mesh = _torus64()
    x = np.arange(64 * 3, dtype=np.float32)
    f = sim.shard_map(lambda v: _C.pbroadcast(v, ("x", "y", "z"), source, algorithm="ring"), mesh=mesh,
                      in_specs=(P(("x", "y", "z")),), out_specs=P(("x", "y", "z")), check_vma=False)
    done = f.run(x)
    assert np.array_equal(np.asarray(done.outputs).reshape(64, 3), np.tile(x.reshape(64, 3)[source], (64, 1)))
    assert {len(m.route) for m in done.trace if m.src != m.dst} == {1}
    assert done.end_time_s == pytest.approx(63 * (1e-6 + 12 / 10e9), rel=1e-9)


@pytest.mark.parametrize("algorithm", ["tree", "auto"])
def test_broadcast_trees_and_bruck_keep_their_results_on_a_torus(algorithm):
    """pbroadcast's tree (and auto) and all_to_all's Bruck give 'direct''s bytes on a 4x4x4 torus."""
    mesh = _torus64()
    names = ("x", "y", "z")
    x = np.arange(64 * 64, dtype=np.float32)
    go = lambda body: np.asarray(sim.shard_map(body, mesh=mesh, in_specs=(P(names),), out_specs=P(names),
                                               check_vma=False).run(x).outputs)
    assert np.array_equal(go(lambda v: _C.pbroadcast(v, names, 5, algorithm=algorithm)),
                          go(lambda v: _C.pbroadcast(v, names, 5)))
    assert np.array_equal(go(CALLS["all_to_all"](names, "bruck")), go(CALLS["all_to_all"](names, "direct")))
