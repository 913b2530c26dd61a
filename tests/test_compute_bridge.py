"""Time for compute through the bridge (`oracles._device_time`): on a preset, every equation a device evaluates
is charged its roofline time on the device's compute track, and JAX's asynchronous ppermute
(`ppermute_start(...).done()`) flies while the device multiplies, so the tutorial's collective matmul step
takes max(T_math, T_comm) a step instead of T_math + T_comm; without a roofline nothing is charged. JAX runs
in `compute_bridge_child.py` on 4 CPU devices."""

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


def test_the_bridge_charges_every_equation_and_overlaps_async_collectives(runs):
    """On the preset: plain, each of the 4 steps takes its matmul and add, then its ppermute; with
    ppermute_start/done, the larger of the two; device 0's compute track holds the zeros, 4 dot_generals and
    4 adds in order. The outputs equal jitted JAX's in both versions."""
    zeros, math_s, comm = _forms()
    assert runs["plain/preset"]["end_s"] == pytest.approx(zeros + 4 * (math_s + comm), rel=1e-9)
    assert runs["overlapped/preset"]["end_s"] == pytest.approx(zeros + 4 * max(math_s, comm), rel=1e-9)
    names = [name for name, _, _ in runs["overlapped/preset"]["spans"]]
    assert names == ["broadcast_in_dim"] + ["dot_general", "add"] * 4
    assert all(r["equal"] for r in runs.values())


def test_compiled_segments_are_charged_by_xla_cost_analysis(runs):
    """Compiled, each segment between collectives is charged once (XLA's cost analysis of the fused segment,
    so less than its equations one by one): plain, the steps add up; with ppermute_start/done, each step after
    the first segment takes the larger of its segment and the message."""
    _, _, comm = _forms()
    plain = [end - start for _, start, end in runs["plain/preset/compiled"]["spans"]]
    assert len(plain) == 4 and runs["plain/preset/compiled"]["end_s"] == pytest.approx(sum(plain) + 4 * comm)
    assert sum(plain) < sum(end - start for _, start, end in runs["plain/preset"]["spans"])
    spans = [end - start for _, start, end in runs["overlapped/preset/compiled"]["spans"]]
    expected = spans[0] + sum(max(d, comm) for d in spans[1:])
    assert len(spans) == 5 and runs["overlapped/preset/compiled"]["end_s"] == pytest.approx(expected, rel=1e-9)
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
