"""Step loops run in closed form (`sim.engine._schedule`, `sim.engine._closed`: every post, arrival and end
worked out at once where the loop's links carry one message at a time) give the same bytes, trace (every
column, in order), call records and times, bit for bit, as the same loops run event by event; on ring,
bidirectional and multi-axis passes with uneven and empty chunks over 2-64 members and seven networks, and on
recursive doubling, Rabenseifner and recursive halving over 2-64 members.
The closed form is shown to run where the members drift apart, to stand aside where flows share a link or
other calls share the clock, and the comparison is shown to fail on a wrong plan."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from row_programs import run_case

import collectives
import sim
from layouts import Layout
from sim import P
from sim.engine import _closed, _group, _schedule

_OPS = ("psum", "all_gather", "psum_scatter")
_ALGORITHMS = ("ring", "bidirectional_ring", "multi_axis")
_DOUBLING = (("all_gather", "recursive_doubling"), ("psum", "recursive_doubling"), ("psum", "rabenseifner"),
             ("psum_scatter", "recursive_halving"))  # group sizes that are powers of two


def _network(kind: str, n: int) -> sim.Network | None:
    if kind == "switch":
        return sim.Network(topology="switch", latency_s=2e-6, bandwidth_bytes_per_s=5e9)
    if kind == "star":
        return sim.Network.switch(1e-6, 1e9)
    if kind == "torus":
        side = next(k for k in (8, 4, 2, 1) if n % k == 0)
        return sim.Network(topology="torus", shape=(side, n // side), latency_s=3e-7)
    if kind == "ring":
        return sim.Network(topology="ring", shape=(n,), latency_s=1e-6, bandwidth_bytes_per_s=1e9)
    if kind == "costs":
        return sim.Network(topology="switch", costs=sim.Costs(efficiency=0.75, overhead_bytes=64.0))
    if kind == "hierarchical" and n % 2 == 0:  # nodes of two devices: a ring crosses the slow fabric
        return sim.Network.hierarchical(2, n // 2, 1e-6, 8e9, 5e-6, 1e9)
    return None


def _call(op: str, x, axis_name, algorithm: str):
    if op == "all_gather":
        return collectives.all_gather(x, axis_name, tiled=True, algorithm=algorithm)
    if op == "psum":
        return collectives.psum(x, axis_name, algorithm=algorithm)
    return collectives.psum_scatter(x, axis_name, tiled=True, algorithm=algorithm)


def _run(case) -> tuple:
    """Output bytes, trace JSON, call records and end time of a case."""
    n, network, calls, x = case
    kwargs = {} if _network(network, n) is None else {"network": _network(network, n)}
    mesh = sim.Mesh({"x": n}, **kwargs)

    def body(v):
        out = v
        for op, algorithm in calls:
            out = _call(op, v, "x", algorithm)
            if op == "psum":  # the next call starts where this one's members drifted to
                v = v + out
        return v, out

    f = sim.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x")), check_vma=False)
    run = f.run(x)
    outputs = b"".join(np.asarray(o).tobytes() for o in run.outputs)
    return outputs, json.dumps(run.trace.to_json()).encode(), [str(c) for c in run.calls], run.end_time_s


def _event_by_event(case) -> tuple:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_schedule, "ENABLED", False)
        return _run(case)


@st.composite
def _cases(draw):
    n = draw(st.sampled_from([2, 3, 4, 5, 7, 8, 12, 16, 33, 64]))
    network = draw(st.sampled_from(["default", "switch", "star", "torus", "ring", "costs", "hierarchical"]))
    calls = draw(st.lists(st.tuples(st.sampled_from(_OPS), st.sampled_from(_ALGORITHMS)), min_size=1, max_size=2))
    per = draw(st.sampled_from([1, 2, 3, 5, n, n + 1]))  # psum's chunks: mostly empty for few floats
    if any(op == "psum_scatter" for op, _ in calls):
        per = n * draw(st.integers(1, 2))  # psum_scatter's operand splits evenly over the members
    dtype = draw(st.sampled_from(["int32", "float32", "float64"]))
    x = (np.arange(n * per) % 7).astype(dtype)
    return n, network, calls, x


@st.composite
def _doubling_cases(draw):
    n = draw(st.sampled_from([2, 4, 8, 16, 32, 64]))
    network = draw(st.sampled_from(["default", "switch", "star", "torus", "ring", "costs", "hierarchical"]))
    calls = draw(st.lists(st.sampled_from(_DOUBLING), min_size=1, max_size=2))
    per = n * draw(st.integers(1, 2)) if any(op == "psum_scatter" for op, _ in calls) \
        else draw(st.sampled_from([1, 2, 3, 5, n, n + 1]))
    dtype = draw(st.sampled_from(["int32", "float32", "float64"]))
    return n, network, calls, (np.arange(n * per) % 7).astype(dtype)


@settings(max_examples=40, deadline=None)
@given(case=_doubling_cases())
def test_doubling_and_halving_in_closed_form_equal_event_by_event(case):
    """Recursive doubling (all_gather, psum), Rabenseifner and recursive halving give the same bytes, trace,
    call records and end time in closed form as event by event."""
    assert _run(case) == _event_by_event(case)


@pytest.mark.parametrize("op, algorithm", _DOUBLING)
def test_doubling_loops_run_in_closed_form(op, algorithm):
    """Each doubling or halving loop over 64 members (Rabenseifner's two phases one loop) runs in closed form
    where it has the clock to itself, and equals the event-by-event run."""
    case = (64, "default", [(op, algorithm)], np.arange(64 * 64, dtype=np.float32) % 7)
    before = dict(_closed.runs)
    closed = _run(case)
    assert _closed.runs["closed"] - before["closed"] == 1
    assert closed == _event_by_event(case)


@settings(max_examples=40, deadline=None)
@given(case=_cases())
def test_closed_form_equals_event_by_event(case):
    """Ring, bidirectional and multi-axis loops give the same bytes, trace (every column, in order), call
    records and end time in closed form as event by event."""
    assert _run(case) == _event_by_event(case)


@pytest.mark.parametrize("algorithm", ["bidirectional_ring", "multi_axis", "ring"])
def test_drifting_loops_run_in_closed_form(algorithm):
    """psum of one float over 64 members (one 4-byte chunk, 63 empty: members drift apart) runs both of its
    loops in closed form, and equals the event-by-event run."""
    case = (64, "default", [("psum", algorithm)], np.arange(64, dtype=np.float32))
    before = dict(_closed.runs)
    closed = _run(case)
    assert _closed.runs["closed"] - before["closed"] == 2
    assert closed == _event_by_event(case)


def test_shared_links_keep_the_event_path():
    """On a switch a member's two messages of a bidirectional step leave through its one port at once: the
    flows share a link, so the loop runs event by event (and equals itself)."""
    case = (8, "switch", [("psum_scatter", "bidirectional_ring")], np.arange(64, dtype=np.float32))
    before = dict(_closed.runs)
    _run(case)
    assert _closed.runs["closed"] == before["closed"] and _closed.runs["events"] == before["events"] + 1


def test_other_calls_on_the_clock_keep_the_event_path():
    """A call over one axis of a 2 x 4 mesh runs two groups at once: neither loop has the clock to itself,
    so both run event by event."""
    mesh = sim.Mesh({"x": 2, "y": 4})
    f = sim.shard_map(lambda v: collectives.psum(v, "y", algorithm="bidirectional_ring"), mesh=mesh,
                      in_specs=P(("x", "y")), out_specs=P(("x", "y")), check_vma=False)
    before = dict(_closed.runs)
    f.run(np.arange(8, dtype=np.float32))
    assert _closed.runs["closed"] == before["closed"]
    assert _closed.runs["events"] - before["events"] == 4


def _grouped_run(shape: tuple[int, int], axis: str, op: str, algorithm: str, x: np.ndarray) -> tuple:
    return run_case(shape, sim.Network(), lambda v: (_call(op, v, axis, algorithm), v), x)


@settings(max_examples=30, deadline=None)
@given(shape=st.sampled_from([(2, 2), (2, 4), (4, 2), (2, 8), (4, 4)]), axis=st.sampled_from(["x", "y"]),
       call=st.sampled_from(_DOUBLING + tuple(("psum", a) for a in _ALGORITHMS)), per=st.integers(1, 3))
def test_loops_of_several_groups_at_once_equal_event_by_event(shape, axis, call, per):
    """A call over one axis of a 2-D mesh runs a loop per group at once (their members meet in events of their
    own): each loop's first steps are posted, as one table per loop, right after the event its members joined
    in, and the run equals the one posting each member's first step as it joins (the event path)."""
    op, algorithm = call
    size = shape[0] * shape[1]
    x = (np.arange(size * per * (shape[0 if axis == "x" else 1])) % 7).astype(np.float32)
    found = _grouped_run(shape, axis, op, algorithm, x)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_schedule, "ENABLED", False)
        assert found == _grouped_run(shape, axis, op, algorithm, x)


def _packed_run(n: int, algorithm: str, x: np.ndarray) -> tuple:
    def body(v):
        m = v.reshape(2, -1)
        if sim.current().device % 3 == 0:  # packed by a timed step first: these members join later
            m = sim.with_layout_constraint(m, Layout((0, 1)))
        return collectives.psum(m, "x", algorithm=algorithm).reshape(-1), v

    return run_case((n,), sim.Network(), body, x)


@pytest.mark.parametrize("algorithm", ["recursive_doubling", "rabenseifner", "ring", "bidirectional_ring"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_members_joining_in_events_of_their_own_equal_event_by_event(algorithm, n):
    """Where some members' operands are column-major, a ring packs them by a timed step before its loop, so
    those members join in events of their own: each event's joins are posted right after it, and the run
    equals the event path. (Recursive doubling and Rabenseifner take such operands message by message.)"""
    x = (np.arange(n * 6) % 7).astype(np.float32)
    flushes = []
    with pytest.MonkeyPatch.context() as patch:
        flush = _group.Steps._flush
        patch.setattr(_group.Steps, "_flush", lambda loop: (flushes.append(len(loop.deferred)), flush(loop))[1])
        found = _packed_run(n, algorithm, x)
    if algorithm in ("ring", "bidirectional_ring"):
        assert len([k for k in flushes if k]) > 1  # several events' joins, each posted on its own
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_schedule, "ENABLED", False)
        assert found == _packed_run(n, algorithm, x)


def test_comparison_catches_a_wrong_plan(monkeypatch):
    """A plan with one arrival a last bit late is caught by the comparison."""
    case = (16, "default", [("psum", "bidirectional_ring")], np.arange(16, dtype=np.float32))
    plan = _schedule.plan

    def late(*args, **kwargs):
        found = plan(*args, **kwargs)
        if found is not None:
            found.arrival_s[-1] = np.nextafter(found.arrival_s[-1], np.inf)
        return found

    monkeypatch.setattr(_schedule, "plan", late)
    assert _run(case) != _event_by_event(case)
