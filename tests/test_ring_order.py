"""The order a ring visits its group: a cycle of physical neighbours on a torus where one exists, never more
hops than group (row-major) order; and the ring algorithms that follow it give the results of 'direct'."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import sim
from collectives._algorithms import Team
from collectives._ring_order import comb, cycle_hops, ring_order, snake
from oracles._reordered import compare_reordered
from sim import P

AXES = ("X", "Y", "Z")


def ring_hops(mesh: sim.Mesh, members: tuple[int, ...]) -> int:
    """Links crossed by one step of the ring `ring_order` gives `members`, summed over its members."""
    order = ring_order(mesh, members)
    assert sorted(order) == list(range(len(members)))
    return cycle_hops(mesh, tuple(members[i] for i in order))


@pytest.mark.parametrize("wraparound", [True, False])
@pytest.mark.parametrize("axes", [a for r in (1, 2, 3) for a in itertools.combinations(AXES, r)])
def test_every_step_of_a_ring_on_a_4x4x4_torus_is_one_hop(axes, wraparound):
    """On a 4x4x4 torus every group over 1, 2 or 3 axes has a Hamiltonian cycle of neighbours, and the ring
    takes it (on the mesh without wraparound a single axis, a line, has none: 2(n - 1) hops either way)."""
    mesh = sim.Mesh(dict(zip(AXES, (4, 4, 4))), network=sim.Network.torus((4, 4, 4), wraparound=wraparound))
    for device in (0, 21, 63):
        members = mesh.group(device, axes).members
        line = len(axes) == 1 and not wraparound
        assert ring_hops(mesh, members) == (2 * (len(members) - 1) if line else len(members))
        assert ring_hops(mesh, members) <= cycle_hops(mesh, members)


def test_the_hops_of_the_issue_case_fall_from_84_to_64():
    mesh = sim.Mesh(dict(zip(AXES, (4, 4, 4))), network=sim.Network.torus((4, 4, 4)))
    members = mesh.group(0, AXES).members
    assert (cycle_hops(mesh, members), ring_hops(mesh, members)) == (84, 64)


@st.composite
def tori(draw):
    """A small torus (some dimensions with wraparound), a mesh on it under a random axis placement, and a
    group: some of its axes, or a random set of its devices."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    wrap = tuple(draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape))))
    names = AXES[:len(shape)]
    dims = draw(st.permutations(range(len(shape))))
    axes = {name: shape[d] for name, d in zip(names, dims)}
    mesh = sim.Mesh(axes, network=sim.Network.torus(shape, wraparound=wrap), placement=dict(zip(names, dims)))
    if draw(st.booleans()):
        chosen = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        members = mesh.group(draw(st.integers(0, mesh.size - 1)), tuple(n for n in names if n in chosen)).members
    else:
        members = tuple(draw(st.lists(st.integers(0, mesh.size - 1), min_size=1, max_size=12, unique=True)))
    return mesh, members


@settings(max_examples=150)
@given(case=tori())
def test_a_ring_never_takes_more_hops_than_row_major_order(case):
    mesh, members = case
    assert ring_hops(mesh, members) <= cycle_hops(mesh, members)


@settings(max_examples=60)
@given(counts=st.lists(st.integers(1, 5), min_size=1, max_size=3))
def test_snake_and_comb_walk_every_point_by_neighbour_steps(counts):
    points = set(itertools.product(*(range(c) for c in counts)))
    near = lambda a, b: sum(abs(x - y) for x, y in zip(a, b)) == 1
    walk = snake(counts)
    assert set(walk) == points and len(walk) == len(points)
    assert all(near(a, b) for a, b in itertools.pairwise(walk))
    for d in range(len(counts)):
        cycle = comb(counts, d)
        if cycle is not None:
            assert set(cycle) == points and len(cycle) == len(points)
            assert all(near(a, b) for a, b in zip(cycle, cycle[1:] + cycle[:1]))
    # a grid of two or more dimensions with an even number of points has a Hamiltonian cycle: some comb
    planar = sum(c > 1 for c in counts) >= 2 and math.prod(counts) % 2 == 0
    assert not planar or any(comb(counts, d) is not None for d in range(len(counts)))


def test_other_topologies_keep_group_order():
    for network in (sim.Network.fully_connected(), sim.Network.switch(), sim.Network.hierarchical(4)):
        mesh = sim.Mesh({"X": 2, "Y": 4}, network=network)
        assert ring_order(mesh, tuple(range(8))) == tuple(range(8))


def test_a_team_arranges_group_data_by_ring_position():
    team = Team((10, 11, 15, 14), 2, (0, 1, 3, 2))
    assert team.arrange("abcd") == ["a", "b", "d", "c"]
    assert team.at(1) == 14 and team.reversed().at(1) == 11
    back = team.reversed()
    assert back.arrange("abcd") == ["c", "d", "b", "a"] and back.members[back.index] == 15


# ------------------------------------------------------------------------------ the rings that follow it

TORUS = sim.Network.torus((4, 4), latency_s=1e-6, bandwidth_bytes_per_s=1e9)


def run(op, x: np.ndarray, algorithm: str, network: sim.Network = TORUS):
    mesh = sim.Mesh({"X": 4, "Y": 4}, network=network)
    f = sim.shard_map(lambda v: op(v, ("X", "Y"), algorithm=algorithm), mesh=mesh, in_specs=P(("X", "Y")),
                      out_specs=P(("X", "Y")), check_vma=False)
    return f.run(x)


@pytest.mark.parametrize("algorithm", ["ring", "bidirectional_ring", "multi_axis"])
@pytest.mark.parametrize("name", ["all_gather", "psum", "psum_scatter"])
def test_rings_in_topology_order_give_the_results_of_direct(name, algorithm):
    """Blocks moved unchanged are bit for bit 'direct''s; float sums in another order within their bound (the
    rings round the topology, and the multi-axis rings along both axes at once)."""
    if algorithm not in collectives.definition(name).param("algorithm").choices:
        pytest.skip(f"{name} has no {algorithm}")
    op = {"all_gather": lambda v, a, algorithm: collectives.all_gather(v, a, tiled=True, algorithm=algorithm),
          "psum": collectives.psum,
          "psum_scatter": lambda v, a, algorithm: collectives.psum_scatter(v, a, tiled=True, algorithm=algorithm)}[name]
    x = np.random.default_rng(7).standard_normal(16 * 32).astype(np.float32)
    base, got = run(op, x, "direct"), run(op, x, algorithm)
    if name == "all_gather":
        assert np.array_equal(base.outputs, got.outputs)
        return
    inputs = list(x.reshape(16, -1))
    split = lambda out: list(np.asarray(out).reshape(16, -1))
    params = {"axis_name": ("X", "Y"), "algorithm": algorithm}
    if name == "psum_scatter":
        params.update(scatter_dimension=0, tiled=True)
    assert compare_reordered(name, params, {"X": 4, "Y": 4}, inputs, split(base.outputs), split(got.outputs)) == []


def test_a_ring_all_gather_over_a_4x4_torus_takes_one_hop_per_step():
    """In row-major order 4 of the 16 ring links are 2 hops (row end to the next row's start), which holds every
    step back (34 us here); in topology order every step is one link: 15 steps of a latency and a block."""
    latency, bandwidth, block = TORUS.latency_s, TORUS.bandwidth_bytes_per_s, 1000
    x = np.zeros(16 * block // 4, np.float32)
    gather = lambda v, a, algorithm: collectives.all_gather(v, a, tiled=True, algorithm=algorithm)
    done = run(gather, x, "ring")
    assert {len(m.route) for m in done.trace if m.src != m.dst} == {1}
    assert done.end_time_s == pytest.approx(15 * (latency + block / bandwidth), rel=1e-12)
