"""'in_network' posted as tables (`sim.engine._switch_rows`, `LinkState.send_reduced_table`) against the same
calls shard by shard (`Port.reduce_in_switch`): the same result bytes, every trace column, every call's
times and the run's end, on any group size (shards of 0 bytes too), network, dtype, grouping, perturbed
order and sequence of calls; and a check that a table path that differs is caught.

No JAX here.
"""

from __future__ import annotations

import dataclasses
import math
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import sim
from collectives import _in_network
from sim import P
from sim.engine import _switch_calls, _switch_rows

SWITCH = sim.Network(1e-6, 10e9, "switch", switch_reduces=True)
NETWORKS = {
    "switch": SWITCH,
    "switch, slow adders": dataclasses.replace(SWITCH, switch_reduction_bytes_per_s=4e9),
    "switch, store and forward": dataclasses.replace(SWITCH, store_and_forward=True),
    "nodes of 4": dataclasses.replace(sim.Network.hierarchical(4, None, 1e-6, 40e9, 5e-6, 10e9),
                                      switch_reduces=True, switch_reduction_bytes_per_s=20e9),
}
GROUPINGS = {  # (mesh axes, axis name, axis_index_groups)
    "one axis": ({"x": 8}, "x", None),
    "five": ({"x": 5}, "x", None),
    "alone": ({"x": 1}, "x", None),
    "within nodes": ({"n": 2, "g": 4}, "g", None),
    "pairs": ({"x": 6}, "x", [[0, 3], [1, 4], [2, 5]]),
    "two axes": ({"x": 4, "y": 2}, ("x", "y"), None),
}


@contextmanager
def shard_by_shard():
    """Every 'in_network' call takes the shard by shard path."""
    with mock.patch.object(_in_network, "_tables", lambda values: False), \
            mock.patch.object(_in_network, "_row", lambda parts: None):
        yield


def run(network: sim.Network, mesh_axes: dict, body: Any, x: np.ndarray, **simulation: Any) -> sim.Run:
    """`body` on each device of `mesh_axes`, device d given `x[d]`."""
    mesh = sim.Mesh(mesh_axes, network=network)
    spec = P(mesh.axis_names)
    f = sim.shard_map(lambda v: body(v[0])[None], mesh=mesh, in_specs=(spec,), out_specs=spec, check_vma=False)
    return f.run_with((x,), **simulation)


def seen(outcome: sim.Run) -> dict:
    """Everything a run shows: result bytes, every trace column, every call's record, the run's end."""
    columns = outcome.trace.columns()
    return {"outputs": (np.asarray(outcome.outputs).dtype.str, np.asarray(outcome.outputs).tobytes()),
            "trace": {name: column.tolist() for name, column in columns.items()},
            "calls": [repr(c) for c in outcome.calls], "end_s": outcome.end_time_s}


def body(ops: list[str], axis_name: Any, groups: Any) -> Any:
    """The calls `ops` one after another, each on the previous result (psum_scatter tiled along dim 0)."""
    def program(v: np.ndarray) -> Any:
        for op in ops:
            if op == "psum":
                v = collectives.psum(v, axis_name, axis_index_groups=groups, algorithm="in_network")
            else:
                v = collectives.psum_scatter(v, axis_name, axis_index_groups=groups, tiled=True,
                                             algorithm="in_network")
        return v
    return program


@st.composite
def cases(draw: st.DrawFn) -> tuple:
    network = draw(st.sampled_from(sorted(NETWORKS)))
    grouping = draw(st.sampled_from(sorted(GROUPINGS)))
    mesh_axes, axis_name, groups = GROUPINGS[grouping]
    fits = math.prod(mesh_axes.values()) % 4 == 0 if network == "nodes of 4" else grouping != "within nodes"
    if not fits:  # nodes of 4 take multiples of 4 devices; only they have nodes to be within
        mesh_axes, axis_name, groups = GROUPINGS["one axis"]
    n = len(groups[0]) if groups else math.prod(mesh_axes[a] for a in np.atleast_1d(axis_name).tolist())
    ops = draw(st.lists(st.sampled_from(["psum", "psum_scatter"]), min_size=1, max_size=3))
    rows = n ** ops.count("psum_scatter") * draw(st.integers(0, 3))
    width = draw(st.integers(1, 3))
    dtype = draw(st.sampled_from(["float32", "int32", "float16"]))
    devices = math.prod(mesh_axes.values())
    values = draw(st.integers(0, 2**31 - 1).map(lambda seed: np.random.default_rng(seed).normal(
        size=(devices, rows, width)) * 100))
    if draw(st.booleans()) and values.size:
        values.flat[draw(st.integers(0, values.size - 1))] = np.nan if dtype != "int32" else 7
    perturbed = draw(st.booleans())
    return network, mesh_axes, axis_name, groups, ops, values.astype(dtype), perturbed


@settings(max_examples=60)
@given(case=cases())
def test_tables_give_what_shard_by_shard_gives(case):
    """Posted as tables or shard by shard, a sequence of 'in_network' calls gives the same result bytes,
    every trace column, every call's times and the same end of run, on any network, grouping (a device
    alone too), dtype (NaN too), operand (shards of 0 bytes too) and perturbed order."""
    network, mesh_axes, axis_name, groups, ops, x, perturbed = case
    simulation = {"perturbation": sim.Perturbation(7, 0.5)} if perturbed else {}
    program = body(ops, axis_name, groups)
    tables = seen(run(NETWORKS[network], mesh_axes, program, x, **simulation))
    with shard_by_shard():
        one_by_one = seen(run(NETWORKS[network], mesh_axes, program, x, **simulation))
    assert tables == one_by_one


def test_the_tables_are_taken():
    """The benchmark's case (psum and psum_scatter on one axis, contiguous operands) takes the table path:
    the comparison above compares two paths, not one with itself."""
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16, 1)
    with mock.patch.object(_switch_rows.SwitchRows, "contribute", autospec=True,
                           side_effect=_switch_rows.SwitchRows.contribute) as contribute:
        run(SWITCH, {"x": 8}, body(["psum", "psum_scatter"], "x", None), x)
    assert contribute.call_count == 16


def test_a_table_path_that_differs_is_caught():
    """A table path that wakes its receivers one second late, or labels the phase of its
    records' phase, differs from shard by shard: the comparison can fail."""
    x = np.arange(4 * 8, dtype=np.float32).reshape(4, 8, 1)
    program = body(["psum"], "x", None)
    with shard_by_shard():
        want = seen(run(SWITCH, {"x": 4}, program, x))
    assert seen(run(SWITCH, {"x": 4}, program, x)) == want
    fire = _switch_calls._fire
    with mock.patch.object(_switch_calls, "_fire", lambda env, event, value, delay: fire(env, event, value,
                                                                                        delay + 1.0)):
        late = seen(run(SWITCH, {"x": 4}, program, x))
    assert late["end_s"] != want["end_s"] and late["calls"] != want["calls"]
    original = _switch_rows.SwitchRows.contribute

    def relabelled(self, port, flat, bounds, multicast, fold, detail):
        original(self, port, flat, bounds, multicast, fold, {**detail, "phase": "other"})
    with mock.patch.object(_switch_rows.SwitchRows, "contribute", relabelled):
        renamed = seen(run(SWITCH, {"x": 4}, program, x))
    assert renamed["trace"] != want["trace"] and renamed["outputs"] == want["outputs"]
