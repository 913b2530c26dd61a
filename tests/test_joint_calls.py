"""Calls run for the whole group at once (`sim.engine._together`) equal the same calls run member by member:
result bytes, every trace column, end time, call records (their order too) and each device's program. A joint
call forced onto calls it cannot run alike is told apart, to show the comparison can fail."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from row_programs import PERMUTE_NETWORKS, drawn_block, ppermute_run, ring_shift_program, run_perturbed_and_sanitized

import collectives._ppermute
import sim
from sim.engine import _together
from sim.engine._port import Port


def _joints(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the joint calls started (one entry per call and group, its members)."""
    started: list[int] = []
    start = _together.Pairs.start
    monkeypatch.setattr(_together.Pairs, "start",
                        lambda joint, resumes: (started.append(len(resumes)), start(joint, resumes))[1])
    return started


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
    x = drawn_block(draw, int(np.prod(list(axes.values()))))
    return axes, axis, perms, x, draw(st.sampled_from(PERMUTE_NETWORKS)), draw(st.booleans())


@given(case=_cases())
def test_joint_calls_equal_calls_member_by_member(case):
    """Programs of several ppermutes (whole and partial permutations, ring shifts, empty and self messages,
    any dtype; links shared on a ring or a switch, so that arrivals differ; store-and-forward, overheads, zero
    latency; calls over the whole mesh or one axis of two, typed or not) give the same bytes, trace, end time,
    call records and programs whether each whole permutation runs as one joint call, as members posting one
    batch, or as members sending one by one."""
    with pytest.MonkeyPatch.context() as patch:
        started = _joints(patch)
        joint = ppermute_run(*case)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(collectives._ppermute, "_together", lambda gathering: None)
        batched = ppermute_run(*case)
        patch.setattr(Port, "pairs_apply", lambda port: False)
        single = ppermute_run(*case)
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
    outputs = ppermute_run({"x": 8}, "x", [ring] * 3, np.arange(8.0), None)[0]
    assert started == [8, 8, 8]
    assert np.frombuffer(outputs).tolist() == np.roll(np.arange(8.0), 3).tolist()


def test_calls_that_cannot_run_as_one_run_member_by_member(monkeypatch):
    """A partial permutation, a perturbed or sanitized run, and costs per message start no joint call."""
    started = _joints(monkeypatch)
    ring = [(i, (i + 1) % 4) for i in range(4)]
    ppermute_run({"x": 4}, "x", [ring[:3]], np.arange(4.0), None)
    ppermute_run({"x": 4}, "x", [ring], np.arange(4.0), sim.Network(1e-6, 1e9, costs=sim.Costs(per_message_s=1e-6)))
    run_perturbed_and_sanitized(4)
    assert started == []
    ring_shift_program(4).run(np.arange(4.0))
    assert started == [4]


def test_joint_comparison_can_fail(monkeypatch):
    """A joint call that resumed every member at the first arrival, on a ring where its messages take one hop
    or three, is told apart from the calls run member by member: same bytes, other call records."""
    mixed = [(0, 3), (1, 0), (2, 1), (3, 2), (4, 5), (5, 4)]
    case = ({"x": 6}, "x", [mixed, mixed], np.arange(6.0), sim.Network(1e-6, 1e9, topology="ring"))
    with monkeypatch.context() as patch:
        patch.setattr(collectives._ppermute, "_together", lambda gathering: None)
        honest = ppermute_run(*case)
    arrived = _together.Pairs.arrived

    def hasty(joint, slots, arrivals_s):
        arrived(joint, slots, np.full_like(arrivals_s, arrivals_s.min()))

    monkeypatch.setattr(_together.Pairs, "arrived", hasty)
    forced = ppermute_run(*case)
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
        joint = ppermute_run(*case)
    monkeypatch.setattr(collectives._ppermute, "_together", lambda gathering: None)
    assert joint == ppermute_run(*case)
    assert set(waits) == {wait}


def _memory_state(memory: sim.LocalMemory, meter: sim.MemoryMeter, made: list) -> tuple:
    """What a memory's allocations left: each view's bytes, shape and strides, each buffer (found again by its
    view, whose view it is), the bytes allocated and charged, the segments' offsets and sizes."""
    found = [memory.find(view) for view in made]
    views = [(view.tobytes(), view.shape, view.strides, view.dtype.str, buffer,
              buffer is not None and memory.view(buffer) is view) for view, buffer in zip(made, found)]
    return (views, memory.size_bytes, meter.held_bytes,
            [(base, segment.size) for base, segment in memory._segments])


@st.composite
def _allocations(draw):
    """A sequence of row-major allocations (any dtype, empty and multi-dimensional shapes, sizes that fill
    segments), some preceded by a reservation of their dtype and shape."""
    steps = []
    for _ in range(draw(st.integers(1, 12))):
        dtype = np.dtype(draw(st.sampled_from(["int8", "float16", "float32", "float64", "complex64"])))
        shape = tuple(draw(st.lists(st.integers(0, 40), min_size=0, max_size=3)))
        steps.append((dtype, shape, draw(st.integers(0, 5)) == 0))
    return steps


def _allocate(steps: list, joint: bool) -> tuple:
    meter = sim.MemoryMeter(1 << 30)
    memory = sim.LocalMemory(3, meter)
    made = []
    for dtype, shape, reserved in steps:
        if reserved and int(np.prod(shape)):
            memory.reserve(np.zeros(shape, dtype))
        made.append(memory.alloc_view(dtype, shape) if joint else memory.view(memory.alloc(dtype, shape)))
        made[-1][...] = 1
    return _memory_state(memory, meter, made)


@given(steps=_allocations())
def test_a_joint_calls_allocation_equals_alloc_then_view(steps):
    """`LocalMemory.alloc_view` (a joint call's results) leaves a memory as `view(alloc(...))` does: the same
    buffers at the same offsets, found again by their views, the same views, bytes allocated and charged, and
    segments, whether the array fits the open segment, opens a new one, is empty or takes a reservation."""
    assert _allocate(steps, joint=True) == _allocate(steps, joint=False)


def test_the_allocation_comparison_can_fail(monkeypatch):
    """A result that is a copy of its buffer's view (which the memory cannot find again by it, so a next call
    would copy its operand) is told apart from `alloc` then `view`."""
    steps = [(np.dtype("int8"), (3,), False), (np.dtype("float32"), (2,), False)]
    honest = _allocate(steps, joint=False)
    monkeypatch.setattr(sim.LocalMemory, "alloc_view",
                        lambda memory, dtype, shape: memory.view(memory.alloc(dtype, shape)).copy())
    assert _allocate(steps, joint=True) != honest
