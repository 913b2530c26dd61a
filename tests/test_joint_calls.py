"""Calls run for the whole group at once (`sim.engine._together`) equal the same calls run member by member:
result bytes, every trace column, end time, call records (their order too) and each device's program. A joint
call forced onto calls it cannot run alike is told apart, to show the comparison can fail."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import collectives
import collectives._ppermute
import sim
from sim import P
from sim.engine import _together
from sim.engine._port import Port


def _run(axes: dict[str, int], axis: str, perms: list[list[tuple[int, int]]], x: np.ndarray,
         network: sim.Network | None, check_vma: bool = False) -> tuple:
    """Output bytes, trace JSON and columns, end time, call records and programs of one ppermute per perm."""
    def body(v):
        for perm in perms:
            v = collectives.ppermute(v, axis, perm)
        return v

    mesh = sim.Mesh(axes) if network is None else sim.Mesh(axes, network=network)
    names = tuple(axes)
    run = sim.shard_map(body, mesh=mesh, in_specs=P(names), out_specs=P(names), check_vma=check_vma).run(x)
    calls = [(c.device, c.collective, c.call, c.members, c.enter_s, c.met_s, c.exit_s, c.algorithm)
             for c in run.simulation.calls]
    columns = {key: np.asarray(value).tolist() for key, value in run.trace.columns().items()}
    programs = [str(program) for program in run.programs]
    return (run.outputs.tobytes(), json.dumps(run.trace.to_json()).encode(), columns, run.end_time_s, calls,
            programs)


def _joints(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the joint calls started (one entry per call and group, its members)."""
    started: list[int] = []
    start = _together.Pairs.start
    monkeypatch.setattr(_together.Pairs, "start",
                        lambda joint, resumes: (started.append(len(resumes)), start(joint, resumes))[1])
    return started


_NETWORKS = [None, sim.Network(1e-6, 10e9), sim.Network(2e-6, 5e9, topology="ring"),
             sim.Network.switch(1e-6, 1e9), sim.Network(1e-6, 1e9, topology="ring", store_and_forward=True),
             sim.Network(1e-6, 1e9, costs=sim.Costs(efficiency=0.5, overhead_bytes=64)),
             sim.Network(0.0, 1e9, topology="ring")]


@st.composite
def _cases(draw):
    n = draw(st.integers(1, 8))
    axes, axis = ({"x": n}, "x") if draw(st.booleans()) or n < 2 else ({"y": 2, "x": n}, "x")
    size = axes[axis]
    perms = []
    for _ in range(draw(st.integers(1, 3))):
        targets = draw(st.permutations(range(size)))
        if draw(st.booleans()):  # a shift round the ring, as programs mostly make
            shift = draw(st.integers(0, size - 1))
            targets = [(i + shift) % size for i in range(size)]
        full = draw(st.integers(0, 4)) > 0
        sources = list(range(size)) if full else draw(st.lists(st.integers(0, size - 1), unique=True, max_size=size))
        perms.append([(s, targets[k]) for k, s in enumerate(sources)])
    devices = int(np.prod(list(axes.values())))
    shape = (devices * draw(st.integers(0, 3)),) + tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    dtype = draw(st.sampled_from(["int8", "int32", "float16", "float64"]))
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    x = np.frombuffer(draw(st.binary(min_size=nbytes, max_size=nbytes)), dtype).reshape(shape).copy()
    return axes, axis, perms, x, draw(st.sampled_from(_NETWORKS)), draw(st.booleans())


@given(case=_cases())
def test_joint_calls_equal_calls_member_by_member(case):
    """Programs of several ppermutes (whole and partial permutations, ring shifts, empty and self messages,
    any dtype; links shared on a ring or a switch, so that arrivals differ; store-and-forward, overheads, zero
    latency; calls over the whole mesh or one axis of two, typed or not) give the same bytes, trace, end time,
    call records and programs whether each whole permutation runs as one joint call, as members posting one
    batch, or as members sending one by one."""
    with pytest.MonkeyPatch.context() as patch:
        started = _joints(patch)
        joint = _run(*case)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(collectives._ppermute, "_together", lambda gathering: None)
        batched = _run(*case)
        patch.setattr(Port, "pairs_apply", lambda port: False)
        single = _run(*case)
    assert joint == batched
    assert joint == single
    axes, axis, perms = case[:3]
    size, groups = axes[axis], axes.get("y", 1)
    assert started == [size for perm in perms if len(perm) == size for _ in range(groups)]


def test_a_ring_program_runs_as_joint_calls(monkeypatch):
    """Every call of a ring program over 8 devices is one joint call of 8 members, and the program's result
    is the input shifted round the ring."""
    started = _joints(monkeypatch)
    ring = [(i, (i + 1) % 8) for i in range(8)]
    outputs = _run({"x": 8}, "x", [ring] * 3, np.arange(8.0), None)[0]
    assert started == [8, 8, 8]
    assert np.frombuffer(outputs).tolist() == np.roll(np.arange(8.0), 3).tolist()


def test_calls_that_cannot_run_as_one_run_member_by_member(monkeypatch):
    """A partial permutation, a perturbed or sanitized run, and costs per message start no joint call."""
    started = _joints(monkeypatch)
    ring = [(i, (i + 1) % 4) for i in range(4)]
    _run({"x": 4}, "x", [ring[:3]], np.arange(4.0), None)
    _run({"x": 4}, "x", [ring], np.arange(4.0), sim.Network(1e-6, 1e9, costs=sim.Costs(per_message_s=1e-6)))
    body = lambda v: collectives.ppermute(v, "x", ring)
    mesh, x = sim.Mesh({"x": 4}), np.arange(4.0)
    program = sim.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    program.run_with((x,), perturbation=sim.Perturbation(3))
    sim.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False, sanitize=True).run(x)
    assert started == []
    program.run(x)
    assert started == [4]


def test_joint_comparison_can_fail(monkeypatch):
    """A joint call that resumed every member at the first arrival, on a ring where its messages take one hop
    or three, is told apart from the calls run member by member: same bytes, other call records."""
    mixed = [(0, 3), (1, 0), (2, 1), (3, 2), (4, 5), (5, 4)]
    case = ({"x": 6}, "x", [mixed, mixed], np.arange(6.0), sim.Network(1e-6, 1e9, topology="ring"))
    with monkeypatch.context() as patch:
        patch.setattr(collectives._ppermute, "_together", lambda gathering: None)
        honest = _run(*case)
    arrived = _together.Pairs.arrived

    def hasty(joint, slots, arrivals_s):
        arrived(joint, slots, np.full_like(arrivals_s, arrivals_s.min()))

    monkeypatch.setattr(_together.Pairs, "arrived", hasty)
    forced = _run(*case)
    assert len(set(honest[2]["arrival_time_s"])) > 1
    assert forced[0] == honest[0]
    assert forced[4] != honest[4]


@pytest.mark.parametrize(("network", "wait"), [
    (sim.Network(1e-6, 1e9, topology="ring"), "arrival known"),
    (sim.Network(1e-6, 1e9, topology="ring", store_and_forward=True), "arrival not reported"),
], ids=["ring", "store-and-forward ring"])
def test_members_whose_own_message_arrives_later_wait_for_it(network, wait, monkeypatch):
    """On a ring where a permutation's messages take one hop or three, some members receive theirs before
    their own has arrived: on a pipelined ring its arrival is known (they wait until then), on a
    store-and-forward ring it is not reported yet (they wait to be told, as a member's port is). Either way
    the joint calls equal the calls member by member."""
    mixed = [(0, 3), (1, 0), (2, 1), (3, 2), (4, 5), (5, 4)]
    case = ({"x": 6}, "x", [mixed, mixed], np.arange(600.0), network)
    waits: list[str] = []
    part = _together.Pairs.part

    def counted(joint, index):
        known = joint.reported[index]
        result, event = part(joint, index)
        if event is not None:
            waits.append("arrival known" if known else "arrival not reported")
        return result, event

    with monkeypatch.context() as patch:
        patch.setattr(_together.Pairs, "part", counted)
        joint = _run(*case)
    monkeypatch.setattr(collectives._ppermute, "_together", lambda gathering: None)
    assert joint == _run(*case)
    assert set(waits) == {wait}
