"""Costs besides the wire (`sim.Costs`): each one charged in the simulated run where it happens, in hand-computed
amounts, and by the cost model behind 'auto' in the same amounts; presets by calibration."""

from __future__ import annotations

import math

import numpy as np
import pytest

import collectives
import sim
from collectives._cost import estimate_s

P = sim.P
A, W = 1e-6, 10e9  # a = 1 us per hop, w = 10 GB/s per link and direction
FREE_COPIES = sim.CopyCost(bandwidth_bytes_per_s=1e30, run_overhead_s=0.0)
N = 4
BLOCK = 1 << 16  # bytes of float32 per device


def _network(**costs) -> sim.Network:
    return sim.Network(A, W, costs=sim.Costs(**costs))


def _run(op: str, algorithm: str, network: sim.Network, n: int = N) -> float:
    """Simulated seconds of `op` with `algorithm` over n devices, BLOCK bytes of float32 each, checked."""
    mesh = sim.Mesh({"x": n}, network=network, copy_cost=FREE_COPIES)
    x = (np.arange(n * BLOCK // 4) % 5).astype(np.float32)
    calls = {
        "psum": lambda v: collectives.psum(v, "x", algorithm=algorithm),
        "psum_scatter": lambda v: collectives.psum_scatter(v, "x", tiled=True, algorithm=algorithm),
        "all_gather": lambda v: collectives.all_gather(v, "x", tiled=True, algorithm=algorithm),
        "all_to_all": lambda v: collectives.all_to_all(v, "x", 0, 0, tiled=True, algorithm=algorithm),
    }
    run = sim.shard_map(calls[op], mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False).run(x)
    blocks = x.reshape(n, -1)
    want = {"psum": np.tile(blocks.sum(0), n), "psum_scatter": blocks.sum(0), "all_gather": np.tile(x, n),
            "all_to_all": blocks.reshape(n, n, -1).transpose(1, 0, 2).reshape(-1)}[op]
    assert np.array_equal(np.asarray(run.outputs), want)
    return max(call.exit_s for call in run.calls)


def _model(op: str, algorithm: str, network: sim.Network, n: int = N) -> float:
    mesh = sim.Mesh({"x": n}, network=network)
    return estimate_s(op, algorithm, mesh, tuple(range(n)), (n,), BLOCK)


# ---------------------------------------------------------------------------------------------- by hand


def test_launch_is_paid_once_per_call_before_the_first_message():
    """A direct all_gather of 4 x 64 KiB on dedicated links: launch + a + BLOCK / w."""
    assert _run("all_gather", "direct", _network(launch_s=3e-6)) == pytest.approx(3e-6 + A + BLOCK / W, rel=1e-12)
    assert _run("all_gather", "ring", _network(launch_s=3e-6)) == pytest.approx(
        3e-6 + (N - 1) * (A + BLOCK / W), rel=1e-12)


def test_messages_are_issued_one_after_another():
    """A member issues its 3 messages of a direct all_to_all (one row) in 3c before they leave; a ring's step
    issues one message, c each step."""
    c, chunk = 5e-6, BLOCK // N
    assert _run("all_to_all", "direct", _network(per_message_s=c)) == pytest.approx(3 * c + A + chunk / W, rel=1e-12)
    assert _run("all_gather", "ring", _network(per_message_s=c)) == pytest.approx(
        (N - 1) * (c + A + BLOCK / W), rel=1e-12)


def test_protocol_efficiency_weighs_each_message_more_on_the_wire():
    """Each message of S bytes occupies its link as S / efficiency + overhead_bytes: the bandwidth a message
    sees ramps with its size towards efficiency x w."""
    network = _network(efficiency=0.8, overhead_bytes=4096)
    assert _run("all_gather", "direct", network) == pytest.approx(A + (BLOCK / 0.8 + 4096) / W, rel=1e-12)
    costs = network.costs
    ramp = [size / costs.wire_bytes(size) for size in (1 << 10, 1 << 16, 1 << 24)]
    assert ramp == sorted(ramp) and ramp[-1] < 0.8 and ramp[0] < 0.2


def test_reduction_arithmetic_is_charged_where_the_adds_happen():
    """A ring psum adds (n-1)/n of the operand, one chunk after each reduce-scatter step; a direct psum folds
    n - 1 whole operands."""
    r = 1e9
    ring = 2 * (N - 1) * (A + BLOCK / N / W) + (N - 1) / N * BLOCK / r
    assert _run("psum", "ring", _network(reduce_bytes_per_s=r)) == pytest.approx(ring, rel=1e-12)
    direct = A + BLOCK / W + (N - 1) * BLOCK / r
    assert _run("psum", "direct", _network(reduce_bytes_per_s=r)) == pytest.approx(direct, rel=1e-12)
    assert _run("all_gather", "ring", _network(reduce_bytes_per_s=r)) == _run("all_gather", "ring", _network())


def _ragged(network: sim.Network, n: int = N) -> float:
    """Each device sends 8 rows to the next and an empty slice to every other member."""
    mesh = sim.Mesh({"x": n}, network=network, copy_cost=FREE_COPIES)
    rows = 8
    operand = np.arange(n * rows, dtype=np.float32)[:, None] * np.ones(16, np.float32)
    output = np.zeros_like(operand)
    sizes = np.zeros((n, n), np.int32)
    for i in range(n):
        sizes[i, (i + 1) % n] = rows
    zeros = np.zeros(n * n, np.int32)
    f = sim.shard_map(lambda *a: collectives.ragged_all_to_all(*a, axis_name="x"), mesh=mesh,
                      in_specs=(P("x"),) * 6, out_specs=P("x"), check_vma=False)
    run = f.run(operand, output, zeros, sizes.reshape(-1), zeros, sizes.T.reshape(-1))
    assert np.array_equal(np.asarray(run.outputs), np.roll(operand.reshape(n, rows, 16), 1, axis=0).reshape(-1, 16))
    return max(call.exit_s for call in run.calls)


def test_empty_ragged_slices_are_paid_or_skipped():
    """With empty_slices='pay' a member issues a send for every peer slice, empty ones too: device 3's
    slice is issued third (after the empty ones for devices 0 and 1), so the call takes 3c + a + S/w; with
    'skip' only the one real slice is issued: c + a + S/w."""
    c, size = 7e-6, 8 * 16 * 4
    assert _ragged(_network(per_message_s=c, empty_slices="pay")) == pytest.approx(3 * c + A + size / W, rel=1e-12)
    assert _ragged(_network(per_message_s=c, empty_slices="skip")) == pytest.approx(c + A + size / W, rel=1e-12)


# ---------------------------------------------------------------------------------------------- the cost model

ALGORITHMS = [("psum", a) for a in ("direct", "ring", "recursive_doubling", "bidirectional_ring", "rabenseifner")]
ALGORITHMS += [("psum_scatter", a) for a in ("direct", "ring", "bidirectional_ring", "recursive_halving")]
ALGORITHMS += [("all_gather", a) for a in ("direct", "ring", "bidirectional_ring", "recursive_doubling")]
ALGORITHMS += [("all_to_all", a) for a in ("direct", "pairwise")]
ONE_COST_EACH = {"launch": {"launch_s": 3e-6}, "per_message": {"per_message_s": 2e-6},
                 "efficiency": {"efficiency": 0.75, "overhead_bytes": 512}, "reduce": {"reduce_bytes_per_s": 2e9}}


@pytest.mark.parametrize("costs", ONE_COST_EACH.values(), ids=ONE_COST_EACH.keys())
@pytest.mark.parametrize("op, algorithm", ALGORITHMS, ids=[f"{op}-{a}" for op, a in ALGORITHMS])
def test_the_cost_model_charges_each_cost_as_the_run_does(op, algorithm, costs):
    """With any one cost on dedicated links, the cost model's time of each algorithm is the simulated time,
    and the cost made it longer than without it."""
    network = _network(**costs)
    simulated = _run(op, algorithm, network)
    assert _model(op, algorithm, network) == pytest.approx(simulated, rel=1e-9)
    if op in ("psum", "psum_scatter") or "reduce_bytes_per_s" not in costs:
        assert simulated > _run(op, algorithm, _network())


@pytest.mark.parametrize("topology", ["switch", "ring"])
def test_auto_picks_the_fastest_algorithm_with_every_cost(topology):
    """With all four costs on, 'auto' psum runs an algorithm within 1% of the fastest simulated one."""
    costs = sim.Costs(launch_s=2e-6, per_message_s=3e-6, efficiency=0.8, overhead_bytes=256,
                      reduce_bytes_per_s=4e9)
    network = (sim.Network.switch(A, W) if topology == "switch" else sim.Network.ring(A, W))
    network = sim.Network(**{**network.__dict__, "costs": costs})
    names = ("direct", "ring", "recursive_doubling", "bidirectional_ring", "rabenseifner")
    best = min(_run("psum", name, network) for name in names)
    assert _run("psum", "auto", network) <= best * 1.01


def test_free_costs_change_no_time():
    """A network with `Costs()` times every call as one without costs, to the bit."""
    for op, algorithm in ALGORITHMS:
        assert _run(op, algorithm, _network()) == _run(op, algorithm, sim.Network(A, W))


# ---------------------------------------------------------------------------------------------- presets


@pytest.mark.parametrize("name", sorted(sim.PRESETS))
def test_every_preset_builds_in_both_calibrations(name):
    """'ideal' is the preset's links with no other cost (a switch that reduces adds at its port rate);
    'measured' (the default) the same links with the costs fitted to published measurements, a protocol
    efficiency below 1 among them (and NVLS's measured adders on the H100 switches); `describe` says which."""
    ideal, measured = sim.Network.preset(name, calibration="ideal"), sim.Network.preset(name)
    assert ideal.costs == sim.Costs() and measured.costs != sim.Costs()
    assert ideal.switch_reduction_bytes_per_s is None
    assert measured.costs.efficiency < 1 and ideal == sim.Network(**{**measured.__dict__, "costs": sim.Costs(),
                                                                    "switch_reduction_bytes_per_s": None})
    assert "costs: " not in ideal.describe() and f"efficiency {measured.costs.efficiency:g}" in measured.describe()
    assert sim.CALIBRATIONS == ("measured", "ideal")


def test_a100_nodes_of_four_on_hdr200():
    """a100-hdr200: 4 GPUs per node at 300 GB/s (NVLink 3), one 25 GB/s HDR200 NIC per GPU; measured, a send
    for every ragged peer slice at ~12 us (jax 0.10.0's XLA)."""
    network = sim.Network.preset("a100-hdr200", (16, 4))
    assert (network.topology, network.node_size, network.shape) == ("hierarchical", 4, (16, 4))
    assert (network.bandwidth_bytes_per_s, network.inter_bandwidth_bytes_per_s) == (300e9, 25e9)
    assert network.costs.pays_empty_slices and math.isclose(network.costs.per_message_s, 12e-6)


def test_link_busy_time_weighs_messages_as_the_protocol_does():
    """`Run.link_busy_s` counts a message of S bytes as S / efficiency + overhead_bytes on each link."""
    mesh = sim.Mesh({"x": 2}, network=_network(efficiency=0.5, overhead_bytes=100), copy_cost=FREE_COPIES)
    f = sim.shard_map(lambda v: collectives.ppermute(v, "x", [(0, 1)]), mesh=mesh, in_specs=P("x"),
                      out_specs=P("x"), check_vma=False)
    run = f.run(np.zeros(2 * 250, np.float32))  # 1000 bytes from device 0 to device 1
    assert run.link_busy_s() == {(0, 1): (1000 / 0.5 + 100) / W}


def test_a_call_that_sends_nothing_launches_nothing():
    """A psum of a constant sends no message, so it pays no launch; a one-device group neither."""
    mesh = sim.Mesh({"x": N}, network=_network(launch_s=5e-6), copy_cost=FREE_COPIES)
    f = sim.shard_map(lambda v: v + collectives.psum(1, "x"), mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                      check_vma=False)
    run = f.run(np.zeros(N, np.float32))
    assert np.array_equal(np.asarray(run.outputs), np.full(N, N, np.float32))
    assert max(call.exit_s for call in run.calls) == 0.0
    groups = [[i] for i in range(N)]
    g = sim.shard_map(lambda v: collectives.psum(v, "x", axis_index_groups=groups), mesh=mesh, in_specs=P("x"),
                      out_specs=P("x"), check_vma=False)
    assert max(call.exit_s for call in g.run(np.ones(N, np.float32)).calls) == 0.0
