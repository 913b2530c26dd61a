"""Time for compute through the bridge (`oracles._device_time`): on a preset, every equation a device evaluates
(or every compiled segment) is charged its roofline time on the device's compute track, and each collective
starts as soon as its operands are ready and flies while the device goes on with work that does not read
it (JAX's `ppermute_start(...).done()`, or a plain ppermute as XLA schedules it), so the tutorial's
collective matmul step takes max(T_math, T_comm) a step; work that reads a collective's result waits for it;
without a roofline nothing is charged. JAX runs in `compute_bridge_child.py` on 4 CPU devices."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sim
from oracles._device_time import equation_time_counts

pytestmark = pytest.mark.differential
CHILD = Path(__file__).with_name("compute_bridge_child.py")


@pytest.fixture(scope="module")
def runs() -> dict:
    if importlib.util.find_spec("jax") is None:
        pytest.skip("needs the jax extra: pip install -e '.[jax]'")
    env = dict(os.environ, PYTHONPATH=str(CHILD.parents[1]))
    done = subprocess.run([sys.executable, str(CHILD)], capture_output=True, text=True, env=env, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _forms() -> tuple[float, float, float]:
    """(T_zeros, T_dot + T_add, T_comm) on h100-nvlink for one device's [256, 512] block times [512, 512]."""
    network = sim.Network.preset("h100-nvlink", (4,))
    roof = network.roofline
    f32 = np.dtype("float32")
    zeros = roof.seconds(*equation_time_counts([(f32, ())], [(f32, (256, 512))], "broadcast_in_dim"))
    dot = roof.seconds(*equation_time_counts([(f32, (256, 512)), (f32, (512, 512))], [(f32, (256, 512))],
                                             "dot_general", 512))
    add = roof.seconds(*equation_time_counts([(f32, (256, 512))] * 2, [(f32, (256, 512))], "add"))
    comm = network.latency_s + network.costs.wire_bytes(256 * 512 * 4) / network.bandwidth_bytes_per_s
    return zeros, dot + add, comm


def test_the_bridge_charges_every_equation_and_overlaps_collectives(runs):
    """On the preset each step's matmul and add take less than its ppermute, and a device starts each
    ppermute as soon as its operand is ready (JAX's `ppermute_start`/`done` or a plain `ppermute`, as XLA
    schedules it): the loop takes its four messages' time, the work hidden under them. Device 0's compute
    track holds the zeros, 4 dot_generals and 4 adds in order. The outputs equal jitted JAX's."""
    zeros, math_s, comm = _forms()
    assert zeros + math_s < comm  # the messages dominate: all the work fits under them
    for name in ("plain/preset", "overlapped/preset", "plain/preset/compiled", "overlapped/preset/compiled"):
        assert runs[name]["end_s"] == pytest.approx(4 * comm, rel=1e-9), name
    names = [name for name, _, _ in runs["overlapped/preset"]["spans"]]
    assert names == ["broadcast_in_dim"] + ["dot_general", "add"] * 4
    assert all(r["equal"] for r in runs.values())


def test_work_that_reads_a_collective_waits_for_it(runs):
    """A matmul of a ppermute's result starts when the message has arrived: the message's time plus the
    matmul's (equation by equation), or plus its compiled segment's."""
    _, _, comm = _forms()
    f32 = np.dtype("float32")
    network = sim.Network.preset("h100-nvlink", (4,))
    dot = network.roofline.seconds(*equation_time_counts([(f32, (256, 512)), (f32, (512, 512))],
                                                         [(f32, (256, 512))], "dot_general", 512))
    assert runs["dependent/preset"]["end_s"] == pytest.approx(comm + dot, rel=1e-9)
    (_, start, end), = runs["dependent/preset/compiled"]["spans"]
    assert start == pytest.approx(comm) and runs["dependent/preset/compiled"]["end_s"] == pytest.approx(end)


def test_compiled_segments_are_charged_by_xla_cost_analysis(runs):
    """Compiled, the work between collectives is charged by segment (XLA's cost analysis of the fused
    segment, less than its equations one by one), each named by its size."""
    compiled = [end - start for _, start, end in runs["overlapped/preset/compiled"]["spans"]]
    alone = [end - start for _, start, end in runs["overlapped/preset"]["spans"]]
    assert 0 < sum(compiled) < sum(alone)
    assert all(name.startswith("segment of ") for name, _, _ in runs["overlapped/preset/compiled"]["spans"])


def test_without_a_roofline_nothing_is_charged(runs):
    """On a network without a roofline the runs record no compute and take the messages' time alone, the same
    in both versions (nothing to overlap)."""
    comm = 2e-6 + 256 * 512 * 4 / 450e9
    for name in ("plain/plain", "overlapped/plain", "plain/plain/compiled", "overlapped/plain/compiled"):
        assert runs[name]["spans"] == [] and runs[name]["end_s"] == pytest.approx(4 * comm, rel=1e-9)


def test_charge_cost_takes_xla_cost_analysis():
    """`charge_cost` charges a compiled segment's `cost_analysis()` (a dict, or JAX's older list of dicts) on
    the device's compute track by the roofline; nothing on a network without one, or outside a program."""
    from oracles._device_time import charge_cost

    roofline = sim.Roofline(1e12, 1e11)

    def f(x):
        charge_cost({"flops": 2e6, "bytes accessed": 1e5, "transcendentals": 0.0, "utilization0{}": 1.0}, "seg")
        charge_cost([{"flops": 1e6}, {"bytes accessed": 2e5}], "listed")
        return x

    def mapped(network):
        return sim.shard_map(f, mesh=sim.Mesh({"i": 2}, network=network), in_specs=sim.P("i"),
                             out_specs=sim.P("i"))

    run = mapped(sim.Network(roofline=roofline)).run(np.zeros(2))
    mine = [(c.name, c.end_s - c.start_s) for c in run.trace.computes if c.device == 0]
    assert mine == [("seg", pytest.approx(2e-6)), ("listed", pytest.approx(2e-6))]
    assert mapped(sim.Network()).run(np.zeros(2)).trace.computes == []
    charge_cost({"flops": 1.0})  # outside a program: nothing to charge
