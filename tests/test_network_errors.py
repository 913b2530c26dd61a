"""Bad meshes, networks and cost models: each refused when it is built, with an error naming the argument,
its value and the rule it breaks."""

from __future__ import annotations

import pytest

import sim

BAD_NETWORKS = [
    # (id, call, error type, message pattern)
    ("Mesh({'x': 0})", lambda: sim.Mesh({"x": 0}), sim.InvalidArgumentError,
     r"axes\['x'\]=0 must be a positive integer"),
    ("Mesh([])", lambda: sim.Mesh([]), sim.InvalidTypeError, r"must be a non-empty dict"),
    ("Mesh({'x': 8}, network=torus((4, 4)))", lambda: sim.Mesh({"x": 8}, network=sim.Network.torus((4, 4))),
     sim.InvalidArgumentError, r"a mesh of 8 devices does not fit torus shape=\(4, 4\) \(16 devices\): a mesh must "
     r"have exactly as many devices as its topology"),
    ("Mesh({'x': 6}, network=preset('tpu-v5e'))", lambda: sim.Mesh({"x": 6}, network=sim.Network.preset("tpu-v5e")),
     sim.InvalidArgumentError, r"a mesh of 6 devices does not fit torus shape=\(16, 16\) \(256 devices\): .*; give "
     r"preset 'tpu-v5e' the shape of a system of 6 devices \(Network.preset\('tpu-v5e', shape\)"),
    ("Mesh({'x': 6}, network=hierarchical(4))", lambda: sim.Mesh({"x": 6}, network=sim.Network.hierarchical(4)),
     sim.InvalidArgumentError, r"a mesh of 6 devices does not fit hierarchical node_size=4: the device count must be "
     r"a multiple of node_size"),
    ("Mesh(placement={'x': 0, 'y': 0})",
     lambda: sim.Mesh({"x": 4, "y": 4}, network=sim.Network.torus((4, 4)), placement={"x": 0, "y": 0}),
     sim.InvalidArgumentError, r"placement=\{'x': 0, 'y': 0\} must map every mesh axis of \{'x': 4, 'y': 4\} to a "
     r"distinct dimension of torus shape=\(4, 4\) of the same size"),
    ("Mesh(placement=[0, 0, 1, 2])", lambda: sim.Mesh({"x": 4}, placement=[0, 0, 1, 2]), sim.InvalidArgumentError,
     r"placement=\[0, 0, 1, 2\] must list every topology device 0..3 exactly once"),
    ("Network(topology='ring', switch_reduces=True)", lambda: sim.Network(topology="ring", switch_reduces=True),
     sim.InvalidArgumentError, r"switch_reduces=True needs a switch: topology='ring' has none"),
    ("Network(switch_reduces=1)", lambda: sim.Network(topology="switch", switch_reduces=1), sim.InvalidTypeError,
     r"switch_reduces=1 must be True or False"),
    ("Network(switch_reduction_bytes_per_s=0)",
     lambda: sim.Network(topology="switch", switch_reduces=True, switch_reduction_bytes_per_s=0),
     sim.InvalidArgumentError, r"switch_reduction_bytes_per_s=0 must be a finite number > 0 \(None: the port rate\)"),
    ("Network(switch_reduction_bytes_per_s='fast')",
     lambda: sim.Network(topology="switch", switch_reduction_bytes_per_s="fast"), sim.InvalidTypeError,
     r"switch_reduction_bytes_per_s='fast' must be a number or None"),
    ("Network(topology='mesh')", lambda: sim.Network(topology="mesh"), sim.InvalidArgumentError,
     r"topology='mesh' must be one of fully_connected, switch, ring, torus, hierarchical"),
    ("Network.preset('tpu-v9')", lambda: sim.Network.preset("tpu-v9"), sim.InvalidArgumentError,
     r"preset='tpu-v9' is not a known preset; known presets: tpu-v4p, tpu-v5p, tpu-v5e, tpu-v6e, h100-nvlink, "
     r"h100-ib, gb200-nvl72"),
    ("Network.preset('tpu-v5e', shape=(4, 4, 4))", lambda: sim.Network.preset("tpu-v5e", (4, 4, 4)),
     sim.InvalidArgumentError, r"preset='tpu-v5e': shape=\(4, 4, 4\) must be a 2-D torus shape \(2 numbers\)"),
    ("Network.preset('tpu-v5e', calibration='typical')", lambda: sim.Network.preset("tpu-v5e", calibration="typical"),
     sim.InvalidArgumentError, r"calibration='typical' must be 'measured' \(fitted to published measurements\) or "
     r"'ideal'"),
    ("Network(costs=1e-6)", lambda: sim.Network(costs=1e-6), sim.InvalidTypeError,
     r"costs=1e-06 must be a sim.Costs"),
    ("Costs(launch_s=-1e-6)", lambda: sim.Costs(launch_s=-1e-6), sim.InvalidArgumentError,
     r"launch_s=-1e-06 must be a finite number >= 0"),
    ("Costs(per_message_s=nan)", lambda: sim.Costs(per_message_s=float("nan")), sim.InvalidArgumentError,
     r"per_message_s=nan must be a finite number >= 0"),
    ("Costs(efficiency=0)", lambda: sim.Costs(efficiency=0), sim.InvalidArgumentError,
     r"efficiency=0 must be in \(0, 1\]"),
    ("Costs(efficiency=1.5)", lambda: sim.Costs(efficiency=1.5), sim.InvalidArgumentError,
     r"efficiency=1.5 must be in \(0, 1\]"),
    ("Costs(overhead_bytes='64')", lambda: sim.Costs(overhead_bytes="64"), sim.InvalidTypeError,
     r"overhead_bytes='64' must be a number"),
    ("Costs(reduce_bytes_per_s=0)", lambda: sim.Costs(reduce_bytes_per_s=0), sim.InvalidArgumentError,
     r"reduce_bytes_per_s=0 must be > 0"),
    ("Costs(empty_slices='free')", lambda: sim.Costs(empty_slices="free"), sim.InvalidArgumentError,
     r"empty_slices='free' must be 'pay' \(a message is issued per peer slice, empty ones too\) or 'skip'"),
    ("Network.torus((4, 0))", lambda: sim.Network.torus((4, 0)), sim.InvalidArgumentError,
     r"shape=\(4, 0\) must be a tuple of positive integers"),
    ("Network.torus((2, 2, 2, 2))", lambda: sim.Network.torus((2, 2, 2, 2)), sim.InvalidArgumentError,
     r"shape=\(2, 2, 2, 2\) must be of 1 to 3 dimensions for topology='torus'"),
    ("Network.torus((4, 4), wraparound=(True,))", lambda: sim.Network.torus((4, 4), wraparound=(True,)),
     sim.InvalidArgumentError, r"wraparound=\(True,\) must have one entry per dimension of shape=\(4, 4\) \(2\)"),
    ("Network.torus((4,), wraparound='yes')", lambda: sim.Network.torus((4,), wraparound="yes"), sim.InvalidTypeError,
     r"wraparound='yes' must be a bool or a tuple of bools, one per dimension"),
    ("Network.switch(bandwidth_bytes_per_s=0)", lambda: sim.Network.switch(bandwidth_bytes_per_s=0),
     sim.InvalidArgumentError, r"bandwidth_bytes_per_s=0 must be a finite number > 0"),
    ("Network(latency_s=inf)", lambda: sim.Network(latency_s=float("inf")), sim.InvalidArgumentError,
     r"latency_s=inf must be a finite number >= 0"),
    ("Network(bandwidth_bytes_per_s=inf)", lambda: sim.Network(bandwidth_bytes_per_s=float("inf")),
     sim.InvalidArgumentError, r"bandwidth_bytes_per_s=inf must be a finite number > 0"),
    ("Costs(launch_s=inf)", lambda: sim.Costs(launch_s=float("inf")), sim.InvalidArgumentError,
     r"launch_s=inf must be a finite number >= 0"),
    ("Network.hierarchical(4, inter_bandwidth_bytes_per_s=-1)",
     lambda: sim.Network.hierarchical(4, inter_bandwidth_bytes_per_s=-1), sim.InvalidArgumentError,
     r"inter_bandwidth_bytes_per_s=-1 must be a finite number > 0"),
    ("Network.switch(multipath)", lambda: sim.Network(topology="switch", multipath=True), sim.InvalidArgumentError,
     r"multipath=True needs topology='ring' or 'torus', not topology='switch'"),
    ("Network.torus(multipath='yes')", lambda: sim.Network.torus((4,), multipath="yes"), sim.InvalidTypeError,
     r"multipath='yes' must be True or False"),
    ("Network.torus(multipath, store_and_forward)", lambda: sim.Network.torus((4,), store_and_forward=True,
                                                                              multipath=True),
     sim.InvalidArgumentError, r"multipath=True with store_and_forward=True: .* cut-through only"),
    ("Network(torus, leaf_size=2)", lambda: sim.Network(topology="torus", shape=(4,), leaf_size=2),
     sim.InvalidArgumentError, r"leaf_size=2 needs topology='hierarchical', not topology='torus'"),
    ("Network.hierarchical(leaf_size=0)", lambda: sim.Network.hierarchical(4, leaf_size=0), sim.InvalidArgumentError,
     r"leaf_size=0 must be a positive integer \(nodes per leaf\)"),
    ("Network.hierarchical(oversubscription=0)", lambda: sim.Network.hierarchical(4, leaf_size=2, oversubscription=0),
     sim.InvalidArgumentError, r"oversubscription=0 must be a finite number > 0"),
    ("Network.hierarchical(spine_latency_s=-1)", lambda: sim.Network.hierarchical(4, leaf_size=2, spine_latency_s=-1),
     sim.InvalidArgumentError, r"spine_latency_s=-1 must be a finite number >= 0"),
    ("Network.hierarchical(rails=1)", lambda: sim.Network.hierarchical(4, leaf_size=2, rails=1), sim.InvalidTypeError,
     r"rails=1 must be True or False"),
    ("Network.hierarchical(rails, no leaves)", lambda: sim.Network.hierarchical(4, rails=True),
     sim.InvalidArgumentError, r"rails=True needs a leaf/spine fabric: give leaf_size="),
]


@pytest.mark.parametrize("call, error, pattern", [c[1:] for c in BAD_NETWORKS], ids=[c[0] for c in BAD_NETWORKS])
def test_bad_network(call, error, pattern):
    """Each bad mesh, network or cost model raises its documented MeshError subclass naming what and why."""
    with pytest.raises(error, match=pattern) as caught:
        call()
    assert isinstance(caught.value, sim.MeshError)
