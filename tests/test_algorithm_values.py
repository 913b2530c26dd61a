"""Every algorithm's values against 'direct' where the calls `test_algorithms.py` draws do not go: 2-D and 3-D
meshes over tori that wrap round or not (and TPU presets), with the call naming some of the mesh axes in any
order, for the collectives that move or add integers exactly; and pmax / pmin with NaNs and infinities on
every kind of network, where a NaN never wins.

No JAX here.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from strategies import differences
from test_algorithms import run

import collectives
import layouts
import sim

_C = collectives


# ---------------------------------------------------------------------------------------------- tori and grids


_GRIDS = [{"x": 2, "y": 4}, {"x": 4, "y": 2}, {"x": 3, "y": 4}, {"x": 2, "y": 2, "z": 4}, {"x": 2, "y": 3, "z": 2}]
_EXACT = {  # collectives moving or adding integers exactly: (call, whether the operand's rows split n ways)
    "psum": (lambda x, a, alg: _C.psum(x, a, algorithm=alg), False),
    "pmean": (lambda x, a, alg: _C.pmean(x, a, algorithm=alg), False),
    "psum_invariant": (lambda x, a, alg: _C.psum_invariant(x, a, algorithm=alg), False),
    "psum_scatter": (lambda x, a, alg: _C.psum_scatter(x, a, tiled=True, algorithm=alg), True),
    "all_gather": (lambda x, a, alg: _C.all_gather(x, a, tiled=True, algorithm=alg), False),
    "all_to_all": (lambda x, a, alg: _C.all_to_all(x, a, 0, 0, tiled=True, algorithm=alg), True),
}


@st.composite
def grid_calls(draw) -> tuple[str, dict, sim.Network, tuple[str, ...], np.ndarray]:
    """(collective, mesh, network, axis_name, one int32 operand per device): a mesh of 2 or 3 axes on a torus
    of its shape, each dimension wrapping round or not, or on a TPU preset; the call names some of its axes
    in any order."""
    op = draw(st.sampled_from(sorted(_EXACT)))
    mesh_axes = draw(st.sampled_from(_GRIDS))
    shape = tuple(mesh_axes.values())
    wraparound = tuple(draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape))))
    preset = sim.Network.preset("tpu-v5e" if len(shape) == 2 else "tpu-v4p", shape)
    network = draw(st.sampled_from([sim.Network.torus(shape, wraparound=wraparound), preset]))
    names = draw(st.permutations(list(mesh_axes)))
    axis_name = tuple(names[:draw(st.integers(1, len(names)))])
    group = math.prod(mesh_axes[a] for a in axis_name)
    rows = draw(st.integers(1, 3)) * (group if _EXACT[op][1] else 1)
    seed = draw(st.integers(0, 2**16))
    xs = np.random.default_rng(seed).integers(-1000, 1000, (math.prod(shape), rows), dtype=np.int32)
    return op, mesh_axes, network, axis_name, xs


@example(call=("psum", {"x": 2, "y": 4}, sim.Network.preset("tpu-v5e", (2, 4)), ("x", "y"),
               np.arange(16, dtype=np.int32).reshape(8, 2)))  # per_axis: rows 0 and 4 came out wrong
@example(call=("psum", {"x": 2, "y": 3}, sim.Network.torus((2, 3), wraparound=False), ("x", "y"),
               np.arange(12, dtype=np.int32).reshape(6, 2)))  # multi_axis: a deadlock
@settings(max_examples=25)
@given(call=grid_calls())
def test_every_algorithm_gives_the_integers_of_direct_on_tori(call):
    """On 2-D and 3-D meshes over tori that wrap round or not (and TPU presets), naming some or all of the mesh
    axes in any order, every algorithm of the integer-exact collectives (psum, pmean, psum_invariant,
    psum_scatter, all_gather, all_to_all) gives 'direct''s bytes on every device: no pass of a call that runs
    several (per_axis's one per axis, multi_axis's reduce-scatter and all-gather) reads what a later one wrote
    or takes a message meant for another."""
    op, mesh_axes, network, axis_name, xs = call
    body, _ = _EXACT[op]
    group = math.prod(mesh_axes[a] for a in axis_name)
    algorithms = [a.name for a in collectives.definition(op).algorithms if a.fits(group) and not a.in_network]
    outputs = {a: run(mesh_axes, lambda x, a=a: body(x, axis_name, a), list(xs), network).outputs
               for a in algorithms}
    for algorithm in algorithms:
        found = differences(list(outputs["direct"]), list(outputs[algorithm]), "direct", algorithm)
        assert not found, f"{op} {algorithm}: " + "\n".join(found)


# ---------------------------------------------------------------------------------------------- NaN in max and min


_NAN_MESHES = [{"x": 2}, {"x": 3}, {"x": 4}, {"x": 5}, {"x": 8}, {"x": 2, "y": 3}, {"x": 2, "y": 4},
               {"x": 2, "y": 2, "z": 2}]
_FLOATS = [np.float16, np.float32, np.float64, layouts.BFLOAT16]


@st.composite
def nan_calls(draw) -> tuple[str, dict, sim.Network | None, tuple[str, ...], np.ndarray]:
    """(pmax or pmin, mesh, network, axis_name, one float operand per device): a mesh of 1 to 3 axes on a
    fully connected network, a ring or torus (wrapping round or not, with a per-message cost or without),
    nodes of 2, or a switch that reduces; operands of NaNs, infinities and a few values (no zero, whose ties
    keep either sign), column 0 NaN on every device."""
    op = draw(st.sampled_from(["pmax", "pmin"]))
    mesh_axes = draw(st.sampled_from(_NAN_MESHES))
    shape, n = tuple(mesh_axes.values()), math.prod(mesh_axes.values())
    costs = sim.Costs(per_message_s=1e-7) if draw(st.booleans()) else sim.Costs()
    torus = sim.Network(topology="torus", shape=shape, wraparound=draw(st.booleans()), costs=costs)
    networks = [None, torus, sim.Network(topology="switch", switch_reduces=True)]
    network = draw(st.sampled_from(networks + ([sim.Network.hierarchical(2)] if n % 2 == 0 else [])))
    axis_name = tuple(draw(st.permutations(list(mesh_axes))))
    dtype = draw(st.sampled_from(_FLOATS))
    length = draw(st.integers(1, 2 * n + 1))
    values = draw(st.lists(st.sampled_from([np.nan, np.inf, -np.inf, 1.5, -2.0, 3.0]), min_size=n * length,
                           max_size=n * length))
    xs = np.array(values, np.float64).reshape(n, length)
    xs[:, 0] = np.nan
    return op, mesh_axes, network, axis_name, xs.astype(dtype)


@example(call=("pmax", {"x": 4}, None, ("x",), np.float32([[1, np.nan], [1, np.nan], [np.nan, np.nan], [1, np.nan]])))
@settings(max_examples=40)
@given(call=nan_calls())
def test_a_nan_never_wins_a_max_or_min_under_any_algorithm(call):
    """pmax and pmin under every algorithm give 'direct''s bytes, NaNs and infinities among the operands: a
    NaN never wins (each fold starts from the identity, so a NaN never becomes its accumulator), and an
    element NaN on every device comes out -inf for pmax, +inf for pmin."""
    op, mesh_axes, network, axis_name, xs = call
    n = math.prod(mesh_axes.values())
    reduces = network is not None and network.switch_reduces
    algorithms = [a.name for a in collectives.definition(op).algorithms
                  if a.fits(n) and (reduces or not a.in_network)]
    fn = getattr(collectives, op)
    outputs = {a: list(run(mesh_axes, lambda x, a=a: fn(x, axis_name, algorithm=a), list(xs), network).outputs)
               for a in algorithms}
    everywhere = np.isnan(xs.astype(np.float64)).all(axis=0)  # NaN on every device: the identity comes out
    identity = -np.inf if op == "pmax" else np.inf
    assert (np.asarray(outputs["direct"]).astype(np.float64)[:, everywhere] == identity).all()
    for algorithm in algorithms:
        found = differences(outputs["direct"], outputs[algorithm], "direct", algorithm)
        assert not found, f"{op} {algorithm}: " + "\n".join(found)
