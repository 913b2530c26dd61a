"""The algorithms for nodes joined by a slower fabric: the hierarchical ones of psum, psum_scatter and
all_gather (`collectives._hierarchical`) and psum's tree (`collectives._tree`): their results, the bound on
reordered float sums, where their messages go, what they do without nodes, and the cost model's time for them."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import sim
from collectives import _algorithms, _tree
from collectives._nodes import node_grid
from oracles._reordered import compare_reordered
from sim import P

FREE = sim.CopyCost(bandwidth_bytes_per_s=1e30, run_overhead_s=0.0)
_C = collectives
BODIES = {
    "psum": lambda a, **kw: lambda x: _C.psum(x, "x", algorithm=a, **kw),
    "pmax": lambda a, **kw: lambda x: _C.pmax(x, "x", algorithm=a, **kw),
    "pmean": lambda a, **kw: lambda x: _C.pmean(x, "x", algorithm=a, **kw),
    "psum_scatter": lambda a, **kw: lambda x: _C.psum_scatter(x, "x", tiled=True, algorithm=a, **kw),
    "all_gather": lambda a, **kw: lambda x: _C.all_gather(x, "x", tiled=True, algorithm=a, **kw),
}
ALGORITHMS = [("psum", "hierarchical"), ("psum_scatter", "hierarchical"), ("all_gather", "hierarchical"),
              ("pmax", "hierarchical"), ("psum", "tree"), ("pmax", "tree")]


def nodes(node_size: int, **links) -> sim.Network:
    return sim.Network.hierarchical(node_size, None, **links)


def run(n: int, body, xs: np.ndarray, network: sim.Network | None, placement=None) -> sim.Run:
    """`body` on each of the n devices of a 1-D mesh, device d with row d of `xs`."""
    mesh = sim.Mesh({"x": n}, network=network, copy_cost=FREE, placement=placement)
    f = sim.shard_map(lambda x: body(x[0])[None], mesh=mesh, in_specs=(P("x"),), out_specs=P("x"), check_vma=False)
    return f.run(xs)


@pytest.mark.parametrize("op, algorithm", ALGORITHMS)
@pytest.mark.parametrize("n, node_size", [(6, 3), (8, 2), (12, 4), (4, 4), (6, 1), (14, 2)])
def test_integers_come_out_as_direct_gives_them(op, algorithm, n, node_size):
    """On 2 or more nodes (and on one node, or one device per node), each algorithm gives 'direct''s
    integers on every device."""
    xs = (np.arange(n * n * 3) * 7 % 11).astype(np.int32).reshape(n, n * 3)
    network = nodes(node_size)
    got = run(n, BODIES[op](algorithm), xs, network)
    want = run(n, BODIES[op]("direct"), xs, network)
    assert got.calls[0].algorithm == algorithm
    assert np.array_equal(np.asarray(got.outputs), np.asarray(want.outputs))


@pytest.mark.parametrize("op, algorithm, n, node_size", [
    ("psum", "hierarchical", 6, 3), ("psum", "hierarchical", 8, 2), ("pmean", "hierarchical", 12, 4),
    ("psum_scatter", "hierarchical", 6, 3), ("psum_scatter", "hierarchical", 12, 4), ("pmax", "hierarchical", 8, 4),
    ("psum", "tree", 8, 2), ("psum", "tree", 9, 3), ("pmean", "tree", 12, 2), ("pmax", "tree", 6, 2),
])
@settings(max_examples=15)
@given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from([np.float16, np.float32, np.float64]))
def test_float_sums_stay_within_the_stated_bound(op, algorithm, n, node_size, seed, dtype):
    """Folded inside each node, then across nodes (round a ring, or up two trees), a float reduction stays
    within `oracles._reordered`'s bound of 'direct''s group-order fold on every element (mixed signs and
    magnitudes)."""
    rng = np.random.default_rng(seed)
    xs = (rng.standard_normal((n, n * 3)) * 10.0 ** rng.integers(-3, 4, (n, n * 3))).astype(dtype)
    network = nodes(node_size)
    got = run(n, BODIES[op](algorithm), xs, network).outputs
    want = run(n, BODIES[op]("direct"), xs, network).outputs
    params = {"axis_name": "x", "algorithm": algorithm, **({"tiled": True} if op == "psum_scatter" else {})}
    assert not compare_reordered(op, params, {"x": n}, list(xs), list(want), list(got))


@pytest.mark.parametrize("op", ["psum", "psum_scatter", "all_gather"])
def test_messages_stay_in_their_node_or_their_local_rank(op):
    """With a placement that interleaves the nodes (device d on topology device placement[d]), every
    intra-node message joins two devices of one node and every inter-node one the devices of one local rank
    in two nodes; each member sends the messages its record counts."""
    n, node_size = 8, 4
    placement = [0, 4, 1, 5, 2, 6, 3, 7]
    node_of = lambda d: placement[d] // node_size
    xs = np.arange(n * n * 2, dtype=np.int32).reshape(n, n * 2)
    outcome = run(n, BODIES[op]("hierarchical"), xs, nodes(node_size), placement)
    sent = [m for m in outcome.trace.sent if m.src != m.dst]
    inside = [m for m in sent if m.detail["phase"].startswith("intra-node")]
    across = [m for m in sent if m.detail["phase"].startswith("inter-node")]
    assert len(inside) + len(across) == len(sent) and inside and across
    assert all(node_of(m.src) == node_of(m.dst) for m in inside)
    assert all(node_of(m.src) != node_of(m.dst) and placement[m.src] % 4 == placement[m.dst] % 4 for m in across)
    record = collectives.definition(op).algorithm("hierarchical")
    counts = {d: sum(m.src == d for m in sent) for d in range(n)}
    assert set(counts.values()) == {record.messages((2, 4))}


def test_the_node_grid_follows_the_placement_and_falls_back_to_one_node():
    """`node_grid` reads nodes from the network's node_size through the mesh's placement; uneven shares, or
    a network without nodes, make the group one node."""
    mesh = sim.Mesh({"x": 8}, network=nodes(4), placement=[0, 4, 1, 5, 2, 6, 3, 7])
    assert node_grid(mesh, tuple(range(8))) == ((0, 2, 4, 6, 1, 3, 5, 7), (2, 4))
    assert node_grid(mesh, (0, 1, 2, 4)) == ((0, 1, 2, 3), (1, 4))  # 3 in one node, 1 in the other
    assert node_grid(sim.Mesh({"x": 8}), tuple(range(8))) == (tuple(range(8)), (1, 8))


@pytest.mark.parametrize("op", ["psum", "psum_scatter", "all_gather"])
def test_auto_considers_it_everywhere(op):
    """'auto''s candidates hold 'hierarchical' for a group over two nodes, inside one node, spread unevenly,
    and on a network without nodes (where it runs as one node: direct steps)."""
    algorithms = collectives.definition(op).algorithms
    names = lambda mesh, members: {a.name for a in _algorithms.candidates(algorithms, len(members),
                                                                            (len(members),), mesh, members)}
    two_nodes = sim.Mesh({"x": 8}, network=nodes(4))
    for mesh, members in ((two_nodes, tuple(range(8))), (two_nodes, (0, 1, 2, 3)), (two_nodes, (0, 1, 2, 4)),
                          (sim.Mesh({"x": 8}), tuple(range(8))), (None, tuple(range(8)))):
        assert "hierarchical" in names(mesh, members)


def test_without_nodes_the_psum_is_two_direct_steps():
    """On the default fully connected network 'hierarchical' psum is a direct reduce-scatter then a direct
    all-gather: 2 latencies and 2 messages of n/p per link, the record's closed form, and the integers of
    'direct'."""
    n, latency, bandwidth = 4, 2e-6, 1e9
    network = sim.Network.fully_connected(latency, bandwidth)
    xs = np.arange(n * 64, dtype=np.int32).reshape(n, 64)
    outcome = run(n, BODIES["psum"]("hierarchical"), xs, network)
    form = collectives.closed_form("psum", "hierarchical", n, xs[0].nbytes, latency, 1 / bandwidth)
    assert outcome.end_time_s == pytest.approx(form, rel=1e-9)
    assert form == pytest.approx(2 * latency + 2 * xs[0].nbytes / n / bandwidth)
    assert np.array_equal(np.asarray(outcome.outputs), np.tile(xs.sum(0), (n, 1)))


@pytest.mark.parametrize("op", ["psum", "psum_scatter", "all_gather"])
@pytest.mark.parametrize("n, node_size", [(16, 8), (12, 4), (6, 2)])
def test_the_cost_model_prices_the_messages_it_sends(op, n, node_size):
    """On nodes joined by a slower fabric (the h100-ib figures), the simulated time of a hierarchical call
    equals the cost model's estimate over the node grid, and it is 'auto''s pick for 3 MiB operands (times
    alone: the operands are shapes and dtypes, `sim.ShapeDtypeStruct`, whose runs take the times of runs with
    bytes)."""
    network = nodes(node_size, latency_s=2e-6, bandwidth_bytes_per_s=450e9, inter_latency_s=5e-6,
                    inter_bandwidth_bytes_per_s=50e9)
    xs = sim.ShapeDtypeStruct((n, 12 << 16), np.float32)  # chunks of equal size on every grid
    outcome = run(n, BODIES[op]("hierarchical"), xs, network)
    mesh = sim.Mesh({"x": n}, network=network)
    estimate = collectives.estimate_s(op, "hierarchical", mesh, tuple(range(n)), (n,), (12 << 16) * 4)
    assert outcome.end_time_s == pytest.approx(estimate, rel=1e-9)
    assert run(n, BODIES[op]("auto"), xs, network).calls[0].algorithm == "hierarchical"
    assert math.isfinite(estimate)


@pytest.mark.parametrize("n, node_size", [(8, 4), (8, 2), (9, 3), (10, 2), (14, 2), (5, 1), (24, 8)])
def test_the_tree_takes_its_closed_steps(n, node_size):
    """psum 'tree' on nodes: the simulated time equals the cost model's steps (chain, the double binary
    tree's up and down steps, chain), tiny and large; inside a node only chain neighbours exchange, and
    between nodes only local rank 0 of each node, along the edges of the heap over the nodes or its mirror."""
    network = nodes(node_size, latency_s=1e-6, bandwidth_bytes_per_s=10e9, inter_latency_s=3e-6,
                    inter_bandwidth_bytes_per_s=2.5e9)
    mesh = sim.Mesh({"x": n}, network=network)
    heap, mirror = _tree.double_tree(n // node_size)
    for floats in (16, 1 << 14):
        xs = np.zeros((n, floats), np.float32)
        outcome = run(n, BODIES["psum"]("tree"), xs, network)
        estimate = collectives.estimate_s("psum", "tree", mesh, tuple(range(n)), (n,), xs[0].nbytes)
        assert outcome.end_time_s == pytest.approx(estimate, rel=1e-9)
    for m in (m for m in outcome.trace.sent if m.src != m.dst):
        (u, j), (v, i) = divmod(m.src, node_size), divmod(m.dst, node_size)
        joined = u in (heap[v], mirror[v]) or v in (heap[u], mirror[u])
        assert (u == v and abs(i - j) == 1) or (i == j == 0 and joined)


def test_auto_takes_the_tree_where_its_log_latency_pays():
    """On 12 nodes of 8 (h100-ib, its switches not reducing), for 64 KiB operands the tree's few latencies
    between nodes (2 up, 3 down
    steps) beat the hierarchical ring's 22 and every flat algorithm: 'auto' picks it. The cost model times
    each tree step at its heaviest port, and on 12 nodes a lighter port's next message can start before the
    step's heaviest ends, so the simulated time is at most the estimate and within 2% of it."""
    network = dataclasses.replace(sim.Network.preset("h100-ib", (12, 8)), switch_reduces=False)
    xs = np.ones((96, 1 << 14), np.float32)
    outcome = run(96, BODIES["psum"]("auto"), xs, network)
    assert outcome.calls[0].algorithm == "tree" and np.all(np.asarray(outcome.outputs) == 96)
    mesh = sim.Mesh({"x": 96}, network=network)
    estimate = collectives.estimate_s("psum", "tree", mesh, tuple(range(96)), (96,), xs[0].nbytes)
    assert 0.98 * estimate <= outcome.end_time_s <= estimate * (1 + 1e-9)
    assert estimate < collectives.estimate_s("psum", "hierarchical", mesh, tuple(range(96)), (96,), xs[0].nbytes)
