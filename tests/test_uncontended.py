"""`sim.network._uncontended` against the flow model it stands for: the closed forms give, bit for bit, the
report instants (the clock's reading at the network's step) and arrival times a `LinkState` gives event by
event; a closed form that shares a link wrongly is caught. No JAX here."""

from __future__ import annotations

import numpy as np
import simpy
from hypothesis import given
from hypothesis import strategies as st

import sim
from sim.network import _uncontended

_FLOAT = dict(allow_nan=False, allow_infinity=False)
_NETWORKS = {
    "fully connected": sim.Network(1e-6, 10e9),
    "ring": sim.Network(2e-6, 5e9, topology="ring"),
    "torus": sim.Network(1e-6, 3e9, topology="torus", shape=(4, 4)),
    "nodes of 4": sim.Network.hierarchical(4, None, 1e-6, 40e9, 5e-6, 10e9),
}


class _Sink:
    """Records, for each slot, the clock's reading when the network reported it and its arrival."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env, self.seen = env, {}

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        for slot, arrival in zip(slots.tolist(), arrivals_s.tolist()):
            self.seen[slot] = (float(self.env.now), arrival)


def _event_by_event(network: sim.Network, devices: int, post_s: float, src: int, dsts: list[int],
                    wires: list[float]) -> list[tuple[float, float]]:
    """(report, arrival) of messages from `src` to `dsts` of `wires` bytes posted together at `post_s` on a
    `LinkState` that carries nothing else."""
    env = simpy.Environment(initial_time=0.0)
    links = sim.LinkState(network.sized(devices), devices, env)
    sink = _Sink(env)

    def post():
        yield env.timeout(post_s)
        links.send(src, np.array(dsts), np.array(wires, np.float64), sink)
    env.process(post())
    env.run()
    return [sink.seen[i] for i in range(len(wires))]


@given(post_s=st.floats(0, 1e-3, **_FLOAT), wires=st.lists(st.integers(0, 10**6).map(float), max_size=5),
       latency_s=st.sampled_from([0.0, 1e-6, 3.3e-6]), bandwidth=st.sampled_from([1e9, 3e9, 12.5e9]))
def test_one_link_is_the_flow_model(post_s, wires, latency_s, bandwidth):
    """Messages posted together on one link, sharing it max-min fairly: `one_link_s` gives the reports and
    arrivals of the event-by-event flow model, bit for bit."""
    network = sim.Network(latency_s, bandwidth)
    want = _event_by_event(network, 2, post_s, 0, [1] * len(wires), wires)
    assert _uncontended.one_link_s(post_s, wires, network.latency_s, bandwidth) == want


@given(name=st.sampled_from(sorted(_NETWORKS)), pair=st.tuples(st.integers(0, 15), st.integers(0, 15)).filter(
    lambda p: p[0] != p[1]), post_s=st.floats(0, 1e-3, **_FLOAT), wire=st.integers(0, 10**7).map(float))
def test_a_route_alone_is_the_flow_model(name, pair, post_s, wire):
    """One message alone on its route (any topology, hops of different capacities): `routes_alone`'s rate
    and latency and `alone_s` give its report and arrival as the flow model does, bit for bit."""
    network, devices = _NETWORKS[name].sized(16), 16
    src, dst = pair
    [want] = _event_by_event(network, devices, post_s, src, [dst], [wire])
    routes = _uncontended.routes_alone(sim.LinkState(network, devices), np.array([src]), np.array([dst]))
    assert routes is not None
    _, report, arrival = _uncontended.alone_s(np.array([post_s]), np.array([wire]), routes.rate, routes.latency)
    assert (float(report[0]), float(arrival[0])) == want


def test_a_wrong_closed_form_is_caught():
    """A closed form that gives every flow on a link the whole bandwidth differs from the flow model."""
    network = sim.Network(1e-6, 1e9)
    want = _event_by_event(network, 2, 0.0, 0, [1, 1], [1000.0, 3000.0])
    assert _uncontended.one_link_s(0.0, [1000.0, 3000.0], 1e-6, 1e9) == want
    alone = [_uncontended.one_link_s(0.0, [w], 1e-6, 1e9)[0] for w in (1000.0, 3000.0)]
    assert alone != want


@given(ready=st.floats(0, 1, **_FLOAT), report=st.floats(0, 1, **_FLOAT), arrival=st.floats(0, 2, **_FLOAT))
def test_woken_is_the_same_for_a_time_and_for_arrays(ready, report, arrival):
    """`woken_s` of one time and elementwise over arrays agree, and wake no earlier than the report or the
    receiver's readiness."""
    one = _uncontended.woken_s(ready, report, arrival)
    many = _uncontended.woken_s(np.array([ready]), np.array([report]), np.array([arrival]))
    assert one == float(many[0]) and one >= max(ready, report)
