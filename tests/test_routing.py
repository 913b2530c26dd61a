"""Routing beyond one path and one switch: multipath rings and tori (a transfer split over its minimal paths)
and leaf/spine fabrics between nodes, in the flow engine, the routes and the cost model."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st

import collectives
import sim
from collectives import _cost
from collectives._algorithm import Pattern
from sim import P
from sim.network import _topology

US = 1e-6


class _Sink:
    def __init__(self) -> None:
        self.arrivals: list[float] = []

    def arrived(self, slots, arrivals_s) -> None:
        self.arrivals += [float(t) for t in arrivals_s]


def arrivals(network: sim.Network, devices: int, messages: list[tuple[int, int, int]]) -> list[float]:
    """The arrival time of each message `(src, dst, bytes)`, all posted at time 0 on a `LinkState` alone."""
    env = simpy.Environment()
    links = sim.LinkState(network.sized(devices), devices, env)
    sinks = [_Sink() for _ in messages]
    for (src, dst, size), sink in zip(messages, sinks):
        links.send(src, [dst], [size], sink)
    env.run()
    return [sink.arrivals[0] for sink in sinks]


def all_to_all_s(network: sim.Network, axes: dict[str, int], block_bytes: int) -> tuple[float, float]:
    """The simulated and the cost model's seconds of an all_to_all 'direct' of `block_bytes` per peer."""
    mesh = sim.Mesh(axes, network=network, copy_cost=sim.CopyCost(1e30, 0.0))
    p, names = mesh.size, tuple(axes)
    f = sim.shard_map(lambda x: collectives.all_to_all(x, names, 0, 0, tiled=True, algorithm="direct"), mesh=mesh,
                      in_specs=P(names), out_specs=P(names), check_vma=False)
    run = f.run(np.zeros(p * p * block_bytes, np.uint8))
    shape = tuple(axes.values())
    estimate = collectives.estimate_s("all_to_all", "direct", mesh, tuple(range(p)), shape, p * block_bytes)
    return max(call.exit_s for call in run.calls), estimate


# ------------------------------------------------------------------------------------------------ multipath


@pytest.mark.parametrize("multipath, share", [(False, 1.0), (True, 0.5)])
def test_a_half_way_transfer_on_a_multipath_ring_takes_half_the_bandwidth_time(multipath, share):
    """0 -> 4 on a ring of 8 crosses 4 links: one way it takes S / w; split both ways round, S / (2 w)."""
    network = sim.Network.ring(US, 1e9, multipath=multipath)
    assert arrivals(network, 8, [(0, 4, 8000)]) == [pytest.approx(4 * US + share * 8000 / 1e9, rel=1e-12)]


def test_a_transfer_is_split_over_every_dimension_order_and_both_ways_at_a_tie():
    """On a 4x4 torus, (0,0) -> (1,1) goes half XY, half YX; (0,0) -> (2,1) over 2 orders x 2 ways; a 4x4x4
    torus sends (0,0,0) -> (2,2,2) over 3! orders x 2^3 ways, each an equal share of minimal length."""
    torus = sim.Network.torus((4, 4), multipath=True)
    assert torus.routes(0, 5) == ((((0, 4), (4, 5)), 0.5), (((0, 1), (1, 5)), 0.5))
    assert len(torus.routes(0, 9)) == 4 and {share for _, share in torus.routes(0, 9)} == {0.25}
    cube = sim.Network.torus((4, 4, 4), multipath=True)
    paths = cube.routes(0, 42)
    assert len(paths) == 48 and len({path for path, _ in paths}) == 48
    assert all(len(path) == 6 and share == 1 / 48 for path, share in paths)


@pytest.mark.parametrize("network", [
    sim.Network.ring(devices=6, multipath=True), sim.Network.torus((4, 4), multipath=True),
    sim.Network.torus((4, 3, 2), (True, False, True), multipath=True), sim.Network.torus((6, 4), (True, False)),
], ids=lambda n: n.describe())
def test_routes_are_minimal_paths_whose_shares_sum_to_one(network):
    """Every pair's paths are distinct, as long as `route` (which is one of them), go from source to
    destination link by link, and their shares sum to 1."""
    for a, b in itertools.permutations(range(network.devices), 2):
        paths = network.routes(a, b)
        assert sum(share for _, share in paths) == pytest.approx(1.0)
        assert network.route(a, b) in [path for path, _ in paths] and len(set(paths)) == len(paths)
        for path, _ in paths:
            assert len(path) == len(network.route(a, b)) and path[0][0] == a and path[-1][1] == b
            assert all(x[1] == y[0] for x, y in itertools.pairwise(path))


@given(st.sampled_from([((8,), (True,)), ((4, 4), (True, True)), ((4, 3, 2), (True, False, True))]),
       st.lists(st.tuples(st.integers(0, 31), st.integers(0, 31)), min_size=1, max_size=10))
def test_subflow_intervals_are_the_routes_links(torus, pairs):
    """`subflows` (the intervals the flow engine runs) covers exactly the links of each path of `routes`,
    with its share."""
    network = sim.Network.torus(*torus, multipath=True)
    n = network.devices
    pairs = [(a % n, b % n) for a, b in pairs if a % n != b % n]
    if not pairs:
        return
    message, share, flow_of, start, stop, hops = _topology.subflows(
        network, np.array([a for a, _ in pairs]), np.array([b for _, b in pairs]), n)
    got: dict[int, list] = {}
    for j in range(len(message)):
        links = sorted(link for i in np.flatnonzero(flow_of == j) for link in range(start[i], stop[i]))
        got.setdefault(int(message[j]), []).append((tuple(links), float(share[j])))
    for m, (a, b) in enumerate(pairs):
        want = [(tuple(sorted(_topology.link_index(network, link, n) for link in path)), s)
                for path, s in network.routes(a, b)]
        assert sorted(got[m]) == sorted(want) and hops[m] == len(want[0][0])


def test_an_all_pairs_exchange_on_a_4x4_multipath_torus():
    """All-to-all of c-byte blocks on a 4x4 multipath torus: every link carries 1 whole, 6 halves, 12 quarters
    and 8 eighths of a block at equal rates, so the eighths (4 hops) arrive at 4a + 27c/(8w), the quarters
    (3 hops) at 3a + 46c/(8w), the halves (2 hops) at 2a + 60c/(8w) and the wholes (1 hop) at a + 8c/w; the
    call ends with the latest."""
    network = sim.Network.torus((4, 4), latency_s=US, bandwidth_bytes_per_s=1e9, multipath=True)
    for block in (100, 1000, 100_000):
        expected = max(hops * US + eighths * block / 8 / 1e9 for hops, eighths in ((4, 27), (3, 46), (2, 60), (1, 64)))
        assert all_to_all_s(network, {"x": 4, "y": 4}, block)[0] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("block", [100, 1000, 100_000])
def test_an_all_pairs_exchange_on_a_multipath_ring(block):
    """All-to-all on a multipath ring of 8: a + link carries 1 + 2 + 3 whole blocks (1, 2, 3 hops) and 4
    halves (4 hops, both ways round), so the halves arrive at 4a + 5c/w, the 3-hop wholes at 3a + 8c/w; the
    flow engine and the cost model both give the later."""
    simulated, estimate = all_to_all_s(sim.Network.ring(US, 1e9, multipath=True), {"x": 8}, block)
    expected = max(4 * US + 5 * block / 1e9, 3 * US + 8 * block / 1e9)
    assert simulated == pytest.approx(expected, rel=1e-9) and estimate == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("wraparound", [True, (True, False)])
@pytest.mark.parametrize("block", [100, 100_000])
def test_the_cost_model_agrees_with_the_flow_engine_on_a_multipath_torus(wraparound, block):
    """All-to-all on a 4x2 multipath torus (every shift of the step timed): the cost model's time, each share
    of the split messages drained apart, is the flow engine's."""
    network = sim.Network.torus((4, 2), wraparound, US, 1e9, multipath=True)
    simulated, estimate = all_to_all_s(network, {"x": 4, "y": 2}, block)
    assert estimate == pytest.approx(simulated, rel=1e-9)


def test_a_multipath_message_arrives_with_its_last_part():
    """0 -> 10 on a 4x4 multipath torus, (0,0) -> (2,2), goes over 8 paths of 1000 bytes, two on each of its
    first links (0.5 GB/s each). A competing 1 -> 2 flow shares link (1, 2) with the two parts that go Y first
    the positive way (1/3 GB/s each): the message arrives when those slowest parts have."""
    network = sim.Network.torus((4, 4), latency_s=US, bandwidth_bytes_per_s=1e9, multipath=True)
    alone, = arrivals(network, 16, [(0, 10, 8000)])
    shared = arrivals(network, 16, [(0, 10, 8000), (1, 2, 8000)])
    assert alone == pytest.approx(4 * US + 1000 / 0.5e9, rel=1e-12)
    assert shared[0] == pytest.approx(4 * US + 1000 / (1e9 / 3), rel=1e-12)


def test_a_multipath_trace_and_busy_time_count_each_paths_share():
    """`busy_s` puts each path's share of a split message on its links: half of 0 -> 4 each way round."""
    mesh = sim.Mesh({"x": 8}, network=sim.Network.ring(US, 1e9, multipath=True))
    f = sim.shard_map(lambda x: collectives.ppermute(x, "x", [(0, 4)]), mesh=mesh, in_specs=P("x"),
                      out_specs=P("x"), check_vma=False)
    run = f.run(np.zeros(8 * 1000, np.uint8))
    busy = run.link_busy_s()
    assert busy == {link: pytest.approx(500 / 1e9) for link in [(0, 1), (1, 2), (2, 3), (3, 4),
                                                                  (0, 7), (7, 6), (6, 5), (5, 4)]}
    assert mesh.routes(0, 4) == mesh.network.routes(0, 4)


# ------------------------------------------------------------------------------------------------ leaf/spine


def fabric(**fields) -> sim.Network:
    """4 nodes of 2 devices, 2 nodes per leaf, 1 GB/s NICs, 1 us per switch."""
    return sim.Network.hierarchical(2, 4, US, 4e9, US, 1e9, leaf_size=2, **fields)


def test_routes_cross_the_spine_only_between_leaves():
    """Within a node: the node's switch; within a leaf: the NICs; across leaves: NIC, the leaf's uplink, the
    far leaf's downlink, NIC. With rails, a leaf holds one rank of each node of its group."""
    network = fabric()
    assert network.route(0, 1) == (("out", 0), ("in", 1))
    assert network.route(0, 3) == (("nic_out", 0), ("nic_in", 3))
    assert network.route(1, 6) == (("nic_out", 1), ("up", 0), ("down", 1), ("nic_in", 6))
    rails = fabric(rails=True)
    assert rails.route(0, 2) == (("nic_out", 0), ("nic_in", 2))
    assert rails.route(0, 3) == (("nic_out", 0), ("up", 0), ("down", 1), ("nic_in", 3))
    assert rails.route(1, 7) == (("nic_out", 1), ("up", 1), ("down", 3), ("nic_in", 7))


def test_flows_crossing_an_oversubscribed_uplink_share_it():
    """Leaves of 2 nodes (4 NICs of 1 GB/s) at 4:1 have a 1 GB/s uplink: 0 -> 4 and 1 -> 5 share it (0.5 GB/s
    each, one spine latency more), while 2 -> 0 stays in its leaf at the full NIC rate."""
    network = fabric(oversubscription=4, spine_latency_s=0.5 * US)
    assert network.link_bandwidth(("up", 0)) == 1e9 and network.link_latency_s(("up", 0)) == 0.5 * US
    times = arrivals(network, 8, [(0, 4, 1000), (1, 5, 1000), (2, 0, 1000)])
    assert times == [pytest.approx(1.5 * US + 2e-6, rel=1e-12)] * 2 + [pytest.approx(US + 1e-6, rel=1e-12)]
    blocking = arrivals(fabric(), 8, [(0, 4, 1000), (1, 5, 1000)])  # non-blocking: 4 GB/s up, NIC-bound
    assert blocking == [pytest.approx(US + 1e-6, rel=1e-12)] * 2


def test_the_cost_model_agrees_with_the_flow_engine_on_a_leaf_spine_fabric():
    """All-to-all over 8 devices of `fabric` at 2:1: 16 cross-leaf blocks share each 2 GB/s uplink, so the
    call takes a NIC and a spine latency plus 16 c / 2 GB/s, in the flow engine and in the cost model."""
    network = fabric(oversubscription=2, spine_latency_s=US)
    simulated, estimate = all_to_all_s(network, {"x": 8}, 1000)
    assert simulated == pytest.approx(2 * US + 16 * 1000 / 2e9, rel=1e-9)
    assert estimate == pytest.approx(simulated, rel=1e-9)


def test_h100_ib_is_rail_optimized_and_crosses_leaves_past_a_scalable_unit():
    """h100-ib: scalable units of 32 nodes, one leaf per rail, non-blocking; the same rank of two nodes in a
    unit meet on their leaf, other ranks and other units cross the spines; 2 nodes keep their times."""
    big = sim.Network.preset("h100-ib", (64, 8))
    assert (big.leaf_size, big.rails, big.oversubscription) == (32, True, 1.0)
    assert big.route(3, 8 + 3) == (("nic_out", 3), ("nic_in", 11))
    assert big.route(3, 32 * 8 + 3) == (("nic_out", 3), ("up", 3), ("down", 11), ("nic_in", 259))
    assert big.link_bandwidth(("up", 0)) == 32 * 50e9
    two = sim.Network.preset("h100-ib")
    flat = sim.Network.hierarchical(8, 2, 2e-6, 450e9, 5e-6, 50e9)
    posts = [(a, b, 1 << 20) for a in range(16) for b in range(16) if a // 8 != b // 8]
    assert arrivals(two, 16, posts) == arrivals(flat, 16, posts)


@pytest.mark.parametrize("network", [fabric(), fabric(rails=True), sim.Network.hierarchical(4, 3, leaf_size=2),
                                     sim.Network.preset("h100-ib", (64, 8))], ids=lambda n: n.describe())
def test_leaf_link_ids_and_indices_round_trip(network):
    """Every link index names a link whose index is itself, and every route's links have indices in range."""
    n = network.devices
    count = _topology.link_count(network, n)
    assert all(_topology.link_index(network, _topology.link_id(network, i, n), n) == i for i in range(count))
    for a, b in itertools.product(range(0, n, max(1, n // 24)), repeat=2):
        assert all(0 <= _topology.link_index(network, link, n) < count for link in network.route(a, b))


def test_describe_names_multipath_and_the_fabric():
    """describe() says a torus is multipath and how a hierarchical network's leaves are joined."""
    assert sim.Network.torus((4, 4), multipath=True).describe() == "torus 4x4 (wraparound: yes, yes), multipath"
    assert fabric(rails=True, oversubscription=2, spine_latency_s=US).describe() == (
        "hierarchical (4 nodes of 2 devices; between nodes latency 1 us, bandwidth 1 GB/s; leaves of 2 nodes by "
        "rail, oversubscription 2:1, spine latency 1 us)")
    assert "multipath" in sim.Network.preset("tpu-v5e").describe()


@pytest.mark.parametrize("name", ["tpu-v4p", "tpu-v5p", "tpu-v5e", "tpu-v6e"])
def test_tpu_presets_are_multipath(name):
    """Every TPU preset splits transfers over the torus's minimal paths."""
    assert sim.Network.preset(name).multipath


def test_the_cost_model_splits_a_step_over_the_paths():
    """On a multipath ring of 8 a step where 0 sends to 4 costs 4 hops and half the bytes on each link."""
    mesh = sim.Mesh({"x": 8}, network=sim.Network.ring(US, 1e9, multipath=True))
    pattern = Pattern("fan")
    assert _cost.step_s(pattern, 1000, mesh, (0, 4), (2,)) == pytest.approx(4 * US + 500 / 1e9, rel=1e-12)
