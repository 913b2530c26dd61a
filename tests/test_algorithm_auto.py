"""The cost model behind algorithm='auto': its pick recorded in every call record, picked by message size and
topology, the alpha-beta closed form on dedicated links, the simulated time equal to it, cheap at 1024
devices, and shown by `meshsim run`."""

from __future__ import annotations

import time

import numpy as np
import pytest
from test_algorithms import choices, run

import collectives
import sim
from collectives import _algorithms, _cost

_C = collectives


def test_auto_records_its_pick_in_every_call_record():
    """'auto' runs one of the collective's algorithms and records it (never 'auto') in each CallRecord; an
    explicit algorithm is recorded as given."""
    xs = [np.arange(8, dtype=np.int32) for _ in range(4)]
    picked = run({"x": 4}, lambda x: _C.psum(x, "x", algorithm="auto"), xs).calls
    asked = run({"x": 4}, lambda x: _C.all_gather(x, "x", algorithm="ring"), xs).calls
    assert len({c.algorithm for c in picked}) == 1 and picked[0].algorithm in set(choices("psum")) - {"auto"}
    assert {c.algorithm for c in asked} == {"ring"}


class _Switch:
    """A duck-typed mesh on a switch: every device has one egress and one ingress port (the cost model
    reads only `routes` and the network's per-link latency and bandwidth)."""

    def __init__(self, latency_s: float = 1e-6, bandwidth: float = 1e11) -> None:
        self.network = self
        self.latency_s, self.bandwidth_bytes_per_s, self.topology = latency_s, bandwidth, "switch"
        self.switch_reduces = False

    def route(self, src: int, dst: int) -> tuple:
        return () if src == dst else (("out", src), ("in", dst))

    def routes(self, src: int, dst: int) -> tuple:
        return ((self.route(src, dst), 1.0),)

    def link_latency_s(self, link: tuple) -> float:
        return self.latency_s / 2

    def link_bandwidth(self, link: tuple) -> float:
        return self.bandwidth_bytes_per_s


class _Ring(_Switch):
    """A duck-typed mesh on a bidirectional ring: a link each way between neighbours, the shortest way round."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size, self.topology = size, "ring"

    def route(self, src: int, dst: int) -> tuple:
        hops = (dst - src) % self.size
        way = 1 if hops <= self.size - hops else -1
        links, at = [], src
        while at != dst:
            links.append((at, (at + way) % self.size))
            at = (at + way) % self.size
        return tuple(links)

    def link_latency_s(self, link: tuple) -> float:
        return self.latency_s


@pytest.mark.parametrize("op, mesh, tiny, large", [
    # on a switch a direct reduce-scatter and a direct all-gather ('hierarchical' within one node) load each
    # port with 2(p-1)/p of the operand in two latencies
    ("psum", _Switch(), "direct", "hierarchical"), ("pmax", _Switch(), "direct", "hierarchical"),
    # on a ring the bidirectional all-gather's and reduce-scatter's n/2 one-hop steps match 'direct''s n/2-hop
    # routes at any size, with less on the busiest link
    ("all_gather", _Ring(8), "bidirectional_ring", "bidirectional_ring"),
    ("psum", _Ring(8), "direct", "bidirectional_ring"),
    ("psum_scatter", _Ring(8), "bidirectional_ring", "bidirectional_ring"),
])
def test_auto_picks_by_message_size_and_topology(op, mesh, tiny, large):
    """Tiny messages favour few steps, large ones the algorithms that load the busiest link (a device's port
    on a switch, a neighbour link on a ring) least: the pick changes with the size where the model says so."""
    members = tuple(range(8))
    candidates = _algorithms.candidates(collectives.definition(op).algorithms, 8, (8,), mesh, members)
    assert _cost.fastest(candidates, mesh, members, (8,), 8).name == tiny
    assert _cost.fastest(candidates, mesh, members, (8,), 1 << 26).name == large


@pytest.mark.parametrize("op, algorithm, n_of", [
    ("all_gather", "ring", lambda p, b: p * b), ("all_gather", "recursive_doubling", lambda p, b: p * b),
    ("psum", "ring", lambda p, b: b), ("psum", "rabenseifner", lambda p, b: b),
    ("psum", "recursive_doubling", lambda p, b: b), ("psum_scatter", "ring", lambda p, b: b),
    ("psum_scatter", "recursive_halving", lambda p, b: b), ("all_to_all", "pairwise", lambda p, b: b),
    ("all_gather", "bidirectional_ring", lambda p, b: p * b), ("psum", "bidirectional_ring", lambda p, b: b),
    ("psum_scatter", "bidirectional_ring", lambda p, b: b),
    ("all_to_all", "bruck", lambda p, b: b),
])
@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_the_cost_model_is_the_alpha_beta_closed_form_on_dedicated_links(op, algorithm, n_of, p):
    """On the fully connected network (a link per ordered pair) the route-aware estimate equals the MPICH
    alpha-beta form of each algorithm (Thakur, Rabenseifner, Gropp 2005)."""
    network = sim.Network.fully_connected(latency_s=2e-6, bandwidth_bytes_per_s=1e10)
    mesh, b = sim.Mesh({"x": p}, network=network), 4096 * p
    got = collectives.estimate_s(op, algorithm, mesh, tuple(range(p)), (p,), b)
    assert got == pytest.approx(collectives.closed_form(op, algorithm, p, n_of(p, b), 2e-6, 1e-10))


@pytest.mark.parametrize("op, algorithm, body", [
    ("all_gather", "ring", lambda x: _C.all_gather(x, "x", algorithm="ring")),
    ("psum", "rabenseifner", lambda x: _C.psum(x, "x", algorithm="rabenseifner")),
    ("all_to_all", "bruck", lambda x: _C.all_to_all(x, "x", 0, 0, tiled=True, algorithm="bruck")),
    ("all_to_all", "pairwise", lambda x: _C.all_to_all(x, "x", 0, 0, tiled=True, algorithm="pairwise")),
    ("all_gather", "bidirectional_ring", lambda x: _C.all_gather(x, "x", algorithm="bidirectional_ring")),
    ("psum", "bidirectional_ring", lambda x: _C.psum(x, "x", algorithm="bidirectional_ring")),
    ("psum_scatter", "bidirectional_ring", lambda x: _C.psum_scatter(x, "x", tiled=True,
                                                                     algorithm="bidirectional_ring")),
    ("psum_scatter", "recursive_halving", lambda x: _C.psum_scatter(x, "x", tiled=True,
                                                                    algorithm="recursive_halving")),
])
def test_the_simulated_time_matches_the_cost_model_without_copies(op, algorithm, body):
    """On the default network the simulated time of a call (row-major operands, 8 members) is the cost
    model's estimate plus the device's own local copies (Bruck's packs): the model prices the messages the
    protocol sends."""
    xs = [np.zeros(8 * 1024, np.float32) for _ in range(8)]
    outcome = run({"x": 8}, body, xs)
    estimate = collectives.estimate_s(op, algorithm, sim.Mesh({"x": 8}), tuple(range(8)), (8,), xs[0].nbytes)
    own = [m for m in outcome.trace if isinstance(m, sim.CopyRecord) and m.src == 0]
    copies = sum(m.arrival_time_s - m.send_time_s for m in own)
    assert outcome.end_time_s == pytest.approx(estimate + copies, rel=1e-9)


@pytest.mark.parametrize("network", [
    sim.Network.ring(latency_s=1e-6, bandwidth_bytes_per_s=45e9, wraparound=False, devices=8),
    sim.Network.preset("tpu-v5e", (1, 8))], ids=["line of 8", "tpu-v5e 1x8"])
@pytest.mark.parametrize("op", ["all_gather", "psum", "psum_scatter"])
def test_on_a_ring_without_wraparound_the_model_times_the_dataflow_ring(op, network):
    """Where the ring's wrap-round edge is a long route (a line, a TPU slice under 16 chips), a member sends on as
    soon as it has received, so the slow edge is met once per lap, not at every step: the model's time of 'ring'
    and 'bidirectional_ring' equals the simulated one, and 'auto' runs the faster (it ran the bidirectional ring,
    28% slower, for all_gather of 256 KiB per device on a line of 8 at 45 GB/s)."""
    free = sim.CopyCost(bandwidth_bytes_per_s=1e30, run_overhead_s=0.0)
    mesh, per = sim.Mesh({"y": 8}, network=network, copy_cost=free), 256 * 1024
    bodies = {"all_gather": lambda a: lambda x: _C.all_gather(x, "y", tiled=True, algorithm=a),
              "psum": lambda a: lambda x: _C.psum(x, "y", algorithm=a),
              "psum_scatter": lambda a: lambda x: _C.psum_scatter(x, "y", tiled=True, algorithm=a)}
    times = {}
    for algorithm in ("ring", "bidirectional_ring", "auto"):
        run_ = sim.shard_map(bodies[op](algorithm), mesh=mesh, in_specs=sim.P("y"), out_specs=sim.P("y")).run(
            sim.ShapeDtypeStruct((8 * per // 4,), np.float32))
        ran = run_.calls[0].algorithm
        times[algorithm] = run_.end_time_s
        estimate = collectives.estimate_s(op, ran, mesh, tuple(range(8)), (8,), per)
        assert run_.end_time_s == pytest.approx(estimate, rel=1e-9), (algorithm, ran)
    assert times["auto"] == min(times["ring"], times["bidirectional_ring"])


@pytest.mark.parametrize("p", [3, 5, 6, 7, 12])
def test_bruck_closed_form_holds_for_any_group_size(p):
    """Bruck's all_to_all runs on any group size; its closed form counts the chunks each step sends (the slots
    with bit k set), so it equals the simulated time there too (it was lg(p)(a + nb/2), a power of two's, 43%
    over the run at p = 3)."""
    free = sim.CopyCost(bandwidth_bytes_per_s=1e30, run_overhead_s=0.0)
    network = sim.Network.fully_connected(latency_s=1e-6, bandwidth_bytes_per_s=10e9)
    mesh, n = sim.Mesh({"x": p}, network=network, copy_cost=free), p * 4096 * 4
    f = sim.shard_map(lambda x: _C.all_to_all(x, "x", 0, 0, tiled=True, algorithm="bruck"), mesh=mesh,
                      in_specs=sim.P("x"), out_specs=sim.P("x"), check_vma=False)
    ran = f.run(sim.ShapeDtypeStruct((p * n // 4,), np.float32))
    assert ran.end_time_s == pytest.approx(collectives.closed_form("all_to_all", "bruck", p, n, 1e-6, 1e-10),
                                           rel=1e-12)


def test_the_cost_model_is_cheap_for_1024_devices():
    """Timing every all_to_all algorithm over 1024 devices on a 32 x 32 grid takes well under the 5 s budget
    (a fraction of a second; cached afterwards): all-pairs and pairwise steps are timed from sampled shifts."""
    mesh = sim.Mesh({"x": 32, "y": 32})
    start = time.perf_counter()
    candidates = tuple(a for a in collectives.definition("all_to_all").algorithms if not a.auto)
    pick = _cost.fastest(candidates, mesh, tuple(range(1024)), (32, 32), 1 << 20)
    assert pick in candidates and time.perf_counter() - start < 5


# ---------------------------------------------------------------------------------------------- scenarios


def test_meshsim_run_shows_the_algorithm_auto_picked(tmp_path, capsys, monkeypatch):
    """A scenario with `algorithm = "auto"` runs, prints the pick under the call line, and --json carries it."""
    import json

    from scenarios.cli import main
    path = tmp_path / "auto.toml"
    path.write_text('title = "auto"\n[mesh]\naxes = {i = 4}\n[collective]\nop = "all_gather"\naxis_name = "i"\n'
                    'algorithm = "auto"\n[inputs]\nshape = [2]\nseed = 0\n')
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["run", str(path)]) == 0
    assert "algorithm: direct (picked by 'auto')" in capsys.readouterr().out
    assert main(["run", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["algorithm"] == "direct"
