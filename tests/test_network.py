"""The network model: topologies and routes, placement, flow-level max-min fair sharing, cut-through and
store-and-forward timing, routes in the trace, per-link busy time, presets."""

import itertools

import numpy as np
import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st

import collectives
import sim
from sim import P
from sim.network import _topology

US = 1e-6


class _Sink:
    """Records what the network reports: slot -> arrival."""

    def __init__(self) -> None:
        self.arrivals: dict[int, float] = {}

    def arrived(self, slots, arrivals_s) -> None:
        self.arrivals.update(zip(slots.tolist(), arrivals_s.tolist()))


def arrivals(network: sim.Network, devices: int, posts: list[tuple[float, int, int, int]]) -> list[float]:
    """The arrival time of each message `(post time, src, dst, bytes)`, carried by a `LinkState` alone."""
    env = simpy.Environment()
    links = sim.LinkState(network.sized(devices), devices, env)
    sinks = [_Sink() for _ in posts]

    def post(at, src, dst, size, sink):
        yield env.timeout(at)
        links.send(src, [dst], [size], sink)

    for (at, src, dst, size), sink in zip(posts, sinks):
        env.process(post(at, src, dst, size, sink))
    env.run()
    return [sink.arrivals[0] for sink in sinks]


def reference_max_min(routes: list[list[int]], capacity: list[float]) -> list[float]:
    """Progressive filling, written plainly: raise every unfrozen flow's rate together until a link is full,
    freeze the flows crossing it, repeat."""
    rate = [0.0] * len(routes)
    frozen = [False] * len(routes)
    while not all(frozen):
        shares = []
        for link, cap in enumerate(capacity):
            users = [f for f, route in enumerate(routes) if link in route]
            live = [f for f in users if not frozen[f]]
            if live:
                shares.append(((cap - sum(rate[f] for f in users if frozen[f])) / len(live), link))
        level = min(share for share, _ in shares)
        full = {link for share, link in shares if share <= level * (1 + 1e-9)}
        for f, route in enumerate(routes):
            if not frozen[f] and full & set(route):
                frozen[f], rate[f] = True, level
    return rate


# ------------------------------------------------------------------------------------------------ sharing


def test_two_flows_sharing_one_link_each_get_half_its_bandwidth():
    """Two messages on one link at once each move at half its bandwidth: both arrive after 2 S / B + alpha."""
    network = sim.Network.fully_connected(latency_s=US, bandwidth_bytes_per_s=1e9)
    assert arrivals(network, 2, [(0, 0, 1, 1000), (0, 0, 1, 1000)]) == pytest.approx([2 * US + US] * 2)


def test_two_flows_through_one_switch_port_share_it():
    """On a switch, device 0 sending to devices 1 and 2 shares its egress port: each message gets half."""
    network = sim.Network.switch(latency_s=US, bandwidth_bytes_per_s=1e9)
    assert arrivals(network, 3, [(0, 0, 1, 1000), (0, 0, 2, 1000)]) == pytest.approx([3 * US, 3 * US])
    assert arrivals(network, 3, [(0, 0, 1, 1000), (0, 2, 1, 1000)]) == pytest.approx([3 * US, 3 * US])
    assert arrivals(network, 4, [(0, 0, 1, 1000), (0, 2, 3, 1000)]) == pytest.approx([2 * US, 2 * US])


def test_a_long_flow_speeds_up_when_a_short_one_ends():
    """1000 B and 3000 B on one 1 GB/s link: both at 0.5 GB/s until the short one ends at 2 us, then the long
    one alone at 1 GB/s for its last 2000 B: it ends at 4 us."""
    network = sim.Network.fully_connected(latency_s=0, bandwidth_bytes_per_s=1e9)
    assert arrivals(network, 2, [(0, 0, 1, 1000), (0, 0, 1, 3000)]) == pytest.approx([2 * US, 4 * US])


def test_a_flow_starting_later_takes_its_share_from_then():
    """A 2000 B flow alone for 1 us moves 1000 B; a second one posted then shares the link: the first ends at
    3 us, the second (1000 B) at 3 us as well."""
    network = sim.Network.fully_connected(latency_s=0, bandwidth_bytes_per_s=1e9)
    assert arrivals(network, 2, [(0, 0, 1, 2000), (US, 0, 1, 1000)]) == pytest.approx([3 * US, 3 * US])


def test_max_min_fairness_gives_the_unshared_capacity_to_the_others():
    """Flows A (links 0, 1) and B (link 0) and C (link 1), link 1 half as fast: C and A share link 1 at 0.25
    each; B takes the rest of link 0, 0.75."""
    rates = sim.max_min_rates(np.array([0, 0, 1, 2]), np.array([0, 1, 0, 1]), np.array([1, 2, 1, 2]),
                              np.array([1.0, 0.5]), 3)
    assert rates.tolist() == pytest.approx([0.25, 0.75, 0.25])


@given(st.integers(1, 6).flatmap(lambda links: st.tuples(
    st.lists(st.floats(0.5, 8), min_size=links, max_size=links),
    st.lists(st.lists(st.integers(0, links - 1), min_size=1, max_size=links, unique=True), min_size=1,
             max_size=8))))
def test_interval_filling_equals_plain_progressive_filling(case):
    """`sim.max_min_rates` over intervals gives the rates of progressive filling over explicit link lists,
    whether each link is its own interval or runs of consecutive links are merged into one."""
    capacity, routes = case
    expected = reference_max_min(routes, capacity)
    flow_of = np.array([f for f, route in enumerate(routes) for _ in route])
    start = np.array([link for route in routes for link in route])
    rates = sim.max_min_rates(flow_of, start, start + 1, np.array(capacity), len(routes))
    assert rates.tolist() == pytest.approx(expected, rel=1e-6)
    runs = [[(r[0], r[-1] + 1) for r in _runs(sorted(route))] for route in routes]
    flow_of = np.array([f for f, route in enumerate(runs) for _ in route])
    merged = sim.max_min_rates(flow_of, np.array([a for r in runs for a, _ in r]),
                               np.array([b for r in runs for _, b in r]), np.array(capacity), len(routes))
    assert merged.tolist() == pytest.approx(expected, rel=1e-6)


def _runs(links: list[int]) -> list[list[int]]:
    """Sorted links cut into runs of consecutive ones."""
    runs = [[links[0]]]
    for link in links[1:]:
        if link == runs[-1][-1] + 1:
            runs[-1].append(link)
        else:
            runs.append([link])
    return runs


@given(st.sampled_from([((6,), (True,)), ((4, 4), (True, False)), ((3, 4), (False, True)), ((2, 3, 4), (True,) * 3)]),
       st.lists(st.tuples(st.integers(0, 23), st.integers(0, 23)), min_size=1, max_size=12))
def test_torus_rates_equal_progressive_filling_over_the_routes(torus, pairs):
    """On a torus, the rates from route intervals equal plain progressive filling over `Network.route`."""
    network = sim.Network.torus(*torus, bandwidth_bytes_per_s=1.0)
    n = network.devices
    pairs = [(a % n, b % n) for a, b in pairs if a % n != b % n]
    if not pairs:
        return
    src, dst = np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])
    flow_of, start, stop, hops = _topology.segments(network, src, dst, n)
    capacity = np.ones(_topology.link_count(network, n))
    rates = sim.max_min_rates(flow_of, start, stop, capacity, len(pairs))
    routes = [[_topology.link_index(network, link, n) for link in network.route(a, b)] for a, b in pairs]
    assert hops.tolist() == [len(route) for route in routes]
    assert rates.tolist() == pytest.approx(reference_max_min(routes, capacity.tolist()), rel=1e-6)


# ---------------------------------------------------------------------------------------- hops and timing


def test_a_three_hop_message_costs_one_bandwidth_term_and_three_latencies():
    """Cut-through: 0 -> 3 on a ring of 8 crosses three links and arrives at S / B + 3 alpha."""
    network = sim.Network.ring(latency_s=US, bandwidth_bytes_per_s=1e9)
    assert arrivals(network, 8, [(0, 0, 3, 4000)]) == pytest.approx([4 * US + 3 * US])


def test_store_and_forward_pays_the_bandwidth_term_on_every_hop():
    """Store-and-forward: the same message pays S / B + alpha on each of its three links."""
    network = sim.Network.ring(latency_s=US, bandwidth_bytes_per_s=1e9, store_and_forward=True)
    assert arrivals(network, 8, [(0, 0, 3, 4000)]) == pytest.approx([3 * (4 * US + US)])


def test_cut_through_flows_share_their_bottleneck():
    """Two cut-through messages 0 -> 2 and 1 -> 3 on a line share only link 1 -> 2, and both move at half
    rate all the way: each arrives at 2 S / B + 2 alpha."""
    network = sim.Network.ring(latency_s=US, bandwidth_bytes_per_s=1e9, wraparound=False)
    assert arrivals(network, 4, [(0, 0, 2, 1000), (0, 1, 3, 1000)]) == pytest.approx([4 * US, 4 * US])


def test_unshared_links_give_the_closed_form_exactly():
    """On the fully connected network, an all_to_all (one message per pair) arrives at exactly alpha + S / B."""
    network = sim.Network.fully_connected(latency_s=3e-6, bandwidth_bytes_per_s=7e9)
    mesh = sim.Mesh({"x": 4}, network=network)
    f = sim.shard_map(lambda x: collectives.all_to_all(x, "x", 0, 0, tiled=True), mesh=mesh, in_specs=P("x"),
                      out_specs=P("x"))
    run = f.run(np.arange(48.0))
    remote = [m for m in run.trace if m.src != m.dst]
    assert {m.arrival_time_s for m in remote} == {3e-6 + 24 / 7e9}
    assert run.end_time_s == 3e-6 + 24 / 7e9


def test_a_torus_all_gather_pays_for_distance_and_contention():
    """all_gather of 1000 B blocks on a ring of 4: each message moves at its share of its busiest link and
    pays a latency per hop (S / B = 1 us)."""
    network = sim.Network.ring(latency_s=US, bandwidth_bytes_per_s=1e9)
    f = sim.shard_map(lambda x: collectives.all_gather(x, "x", tiled=True), mesh=sim.Mesh({"x": 4}, network=network),
                      in_specs=P("x"), out_specs=P(), check_vma=False)
    run = f.run(np.zeros(500, np.float64))
    by_hops = {}
    for m in run.trace:
        if m.src != m.dst:
            by_hops.setdefault(len(m.route), set()).add(round(m.arrival_time_s / US, 9))
    # every link carries a one-hop flow and one of the two-hop ties (even sources go the positive way, odd
    # ones the negative way): B / 2 each
    assert by_hops == {1: {3.0}, 2: {4.0}}


# ------------------------------------------------------------------------------------------------- routes


def test_torus_routes_are_dimension_ordered_and_shortest():
    """Dimension 0 first, then 1; the shorter way round each ring; a tie goes the positive way from an even
    coordinate, the negative way from an odd one."""
    torus = sim.Network.torus((4, 4))
    assert torus.route(0, 5) == ((0, 4), (4, 5))
    assert torus.route(0, 12) == ((0, 12),)
    assert torus.route(0, 3) == ((0, 3),)
    assert torus.route(0, 2) == ((0, 1), (1, 2))
    assert torus.route(1, 3) == ((1, 0), (0, 3))
    assert torus.route(5, 5) == ()


def test_without_wraparound_a_ring_is_a_line_and_distances_double():
    """Without wraparound, 0 -> 7 on 8 devices runs 7 links instead of 1, and the longest route doubles
    (from n / 2 = 4 hops to n - 1 = 7)."""
    ring, line = sim.Network.ring(devices=8), sim.Network.ring(devices=8, wraparound=False)
    assert ring.route(0, 7) == ((0, 7),) and len(line.route(0, 7)) == 7
    longest = {net: max(len(net.route(a, b)) for a, b in itertools.product(range(8), repeat=2)) for net in (ring, line)}
    assert longest == {ring: 4, line: 7}
    mixed = sim.Network.torus((8, 8), wraparound=(True, False))
    assert len(mixed.route(0, 7 * 8)) == 1 and len(mixed.route(0, 7)) == 7


def test_routes_are_recorded_in_the_trace_and_its_json():
    """Each message record carries its route, the same as `Mesh.route`; JSON gives it as lists."""
    mesh = sim.Mesh({"x": 2, "y": 4}, network=sim.Network.torus((2, 4)))
    f = sim.shard_map(lambda x: collectives.all_to_all(x, ("x", "y"), 0, 0, tiled=True), mesh=mesh,
                      in_specs=P(("x", "y")), out_specs=P(("x", "y")))
    run = f.run(np.arange(64.0))
    for m in run.trace:
        assert m.route == mesh.route(m.src, m.dst)
        assert m.to_dict()["route"] == [list(link) for link in m.route]
    assert max(len(m.route) for m in run.trace) == 3


def test_switch_and_hierarchical_routes():
    """A switch route is the sender's egress and the receiver's ingress port; hierarchical stays on the node's
    switch inside a node and takes the NIC ports between nodes."""
    assert sim.Network.switch().route(2, 5) == (("out", 2), ("in", 5))
    network = sim.Network.hierarchical(4, nodes=2)
    assert network.route(0, 3) == (("out", 0), ("in", 3))
    assert network.route(1, 6) == (("nic_out", 1), ("nic_in", 6))


def test_hierarchical_timing_inside_and_between_nodes():
    """Inside a node a message costs alpha + S / B on the fast switch; between nodes alpha' + S / B'."""
    network = sim.Network.hierarchical(4, nodes=2, latency_s=US, bandwidth_bytes_per_s=100e9, inter_latency_s=5 * US,
                                       inter_bandwidth_bytes_per_s=10e9)
    assert arrivals(network, 8, [(0, 0, 1, 10_000)]) == pytest.approx([US + 0.1 * US])
    assert arrivals(network, 8, [(0, 0, 5, 10_000)]) == pytest.approx([5 * US + US])
    assert network.link_latency_s(("nic_out", 0)) == 5 * US and network.link_bandwidth(("nic_in", 5)) == 10e9
    assert network.link_latency_s(("in", 1)) == 0 and network.link_bandwidth(("out", 1)) == 100e9


def test_placement_maps_mesh_axes_onto_topology_dimensions():
    """By default mesh device d is topology device d; `placement` maps axis x onto dimension 1 and y onto 0,
    or lists each mesh device's topology device."""
    torus = sim.Network.torus((4, 4), wraparound=False)
    assert sim.Mesh({"x": 4, "y": 4}, network=torus).route(0, 1) == ((0, 1),)
    swapped = sim.Mesh({"x": 4, "y": 4}, network=torus, placement={"x": 1, "y": 0})
    assert swapped.route(0, 1) == ((0, 4),) and swapped.route(0, 4) == ((0, 1),)
    listed = sim.Mesh({"x": 4}, network=sim.Network.ring(), placement=[0, 2, 1, 3])
    assert listed.route(0, 1) == ((0, 1), (1, 2))


def test_a_ring_takes_the_mesh_size():
    """`Network.ring()` without devices becomes a ring of the mesh's size."""
    mesh = sim.Mesh({"x": 6}, network=sim.Network.ring())
    assert mesh.network.shape == (6,) and mesh.route(0, 5) == ((0, 5),)


def test_link_busy_time_follows_routes():
    """A 0 -> 2 message of 1000 B on a line keeps links 0->1 and 1->2 busy for S / B each, nothing else."""
    mesh = sim.Mesh({"x": 4}, network=sim.Network.ring(latency_s=0, bandwidth_bytes_per_s=1e9, wraparound=False))
    f = sim.shard_map(lambda x: collectives.ppermute(x, "x", [(0, 2)]), mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                      check_vma=False)
    run = f.run(np.zeros(500, np.float64))
    assert run.link_busy_s() == pytest.approx({(0, 1): US, (1, 2): US})
    assert run.end_time_s == pytest.approx(US)


def test_perturbed_runs_on_a_torus_only_stretch_flights():
    """A perturbed all_to_all on a torus gives the same bytes; its messages arrive no earlier than by default."""
    mesh = sim.Mesh({"x": 4, "y": 2}, network=sim.Network.torus((4, 2)))
    f = sim.shard_map(lambda x: collectives.all_to_all(x, ("x", "y"), 0, 0, tiled=True), mesh=mesh,
                      in_specs=P(("x", "y")), out_specs=P(("x", "y")))
    x = np.arange(64.0)
    base, perturbed = f.run_with((x,)), f.run_with((x,), perturbation=sim.Perturbation(3))
    assert perturbed.outputs.tobytes() == base.outputs.tobytes()
    flights = [{(m.src, m.dst): m.arrival_time_s - m.send_time_s for m in run.trace} for run in (base, perturbed)]
    assert all(flights[1][pair] >= flight for pair, flight in flights[0].items())


# ------------------------------------------------------------------------------------------------ presets

PRESET_FACTS = {  # name: (topology, default shape, bandwidth per direction, latency, wraparound of the default)
    "tpu-v4p": ("torus", (4, 4, 4), 4.5e10, 1e-6, (True, True, True)),
    "tpu-v5p": ("torus", (4, 4, 4), 9e10, 1e-6, (True, True, True)),
    "tpu-v5e": ("torus", (16, 16), 4.5e10, 1e-6, (True, True)),
    "tpu-v6e": ("torus", (16, 16), 9e10, 1e-6, (True, True)),
    "h100-nvlink": ("switch", (8,), 450e9, 2e-6, None),
    "h100-ib": ("hierarchical", (2, 8), 450e9, 2e-6, None),
    "gb200-nvl72": ("switch", (72,), 900e9, 2e-6, None),
    "a100-hdr200": ("hierarchical", (4, 4), 300e9, 2e-6, None),
}


@pytest.mark.parametrize("name", sorted(PRESET_FACTS))
def test_every_preset_builds_with_its_published_figures(name):
    """Each preset's topology, default shape, link bandwidth, per-hop latency and wraparound match its
    sourced comment; a mesh of its default shape fits it."""
    topology, shape, bandwidth, latency, wraparound = PRESET_FACTS[name]
    network = sim.Network.preset(name)
    assert (network.topology, network.shape, network.bandwidth_bytes_per_s, network.latency_s) == (
        topology, shape, bandwidth, latency)
    assert network.wraparound == wraparound and network.preset_name == name
    mesh = sim.Mesh({f"a{k}": size for k, size in enumerate(shape)}, network=network)
    assert mesh.network is network
    assert set(sim.PRESETS) == set(PRESET_FACTS)


def test_preset_wraparound_rules_and_node_figures():
    """v4p/v5p wrap axes that are multiples of 4; v5e/v6e only axes of 16; h100-ib's NICs are 400 Gb/s each."""
    assert sim.Network.preset("tpu-v4p", (4, 4, 2)).wraparound == (True, True, False)
    assert sim.Network.preset("tpu-v5p", (8, 4, 3)).wraparound == (True, True, False)
    assert sim.Network.preset("tpu-v5e", (4, 4)).wraparound == (False, False)
    assert sim.Network.preset("tpu-v6e", (16, 8)).wraparound == (True, False)
    ib = sim.Network.preset("h100-ib", (4, 8))
    assert (ib.node_size, ib.inter_bandwidth_bytes_per_s * 8, ib.shape) == (8, 400e9, (4, 8))
    assert sim.Network.preset("h100-nvlink", (4,)).shape == (4,)


def test_perfetto_shows_a_transfer_on_every_link_of_a_route():
    """The Perfetto export draws a multi-hop message as one transfer span on each link of its route, on
    tracks named by link."""
    mesh = sim.Mesh({"x": 4}, network=sim.Network.ring(wraparound=False))
    f = sim.shard_map(lambda x: collectives.ppermute(x, "x", [(0, 3)]), mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                      check_vma=False)
    events = f.run(np.zeros(8)).trace_events()["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name" and e["pid"] != 1}
    transfers = [names[e["tid"]] for e in events if e.get("cat") == "transfer"]
    assert sorted(transfers) == ["link 0->1", "link 1->2", "link 2->3"]


# ------------------------------------------------------------------------------------------------ clocks


@pytest.mark.parametrize("network", [
    sim.Network.fully_connected(latency_s=0.5, bandwidth_bytes_per_s=1000),
    sim.Network.ring(latency_s=0.5, bandwidth_bytes_per_s=1000),
    sim.Network.ring(latency_s=0.5, bandwidth_bytes_per_s=1000, store_and_forward=True),
], ids=["fully_connected", "ring", "ring store-and-forward"])
def test_an_integer_clock_gives_the_times_of_a_float_one(network):
    """A plain `simpy.Environment()` counts from the integer 0: messages posted at integer times (empty ones,
    to oneself, across several hops) arrive when they would on the simulator's float clock."""
    posts = [(1, 0, 1, 0), (1, 0, 0, 100), (1, 0, 2, 100), (2, 1, 3, 700), (3, 3, 1, 0)]
    floats = [(float(at), src, dst, size) for at, src, dst, size in posts]
    got = arrivals(network, 4, posts)
    assert got == arrivals(network, 4, floats)
    assert got[0] == 1.5 and got[1] == 1  # an empty message pays its latency; one to oneself arrives at once


def test_sending_without_an_environment_is_a_clear_error():
    """A `LinkState` made without an environment (enough for `busy_s`) refuses to send, saying what it needs."""
    links = sim.LinkState(sim.Network.fully_connected(), 2)
    with pytest.raises(sim.InvalidArgumentError, match="needs the SimPy environment"):
        links.send(0, [1], [8], _Sink())
