"""Multi-step algorithms run for every member at once (`sim.engine.Steps`: one table per step) give the same
bytes, trace, call records and times as the member-by-member loop they replace, on random programs, meshes
and networks; the comparison is shown to fail on a wrong table path, and the table path is shown to run."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from row_programs import case_axes, run_case

import collectives
import collectives._ring_steps
import sim

_ALGORITHMS = {"all_gather": ("ring", "per_axis", "hierarchical", "direct", "bidirectional_ring", "multi_axis",
                              "recursive_doubling"),
               "psum": ("ring", "per_axis", "hierarchical", "direct", "bidirectional_ring", "recursive_doubling",
                        "rabenseifner"),
               "psum_scatter": ("ring", "hierarchical", "direct", "recursive_halving", "bidirectional_ring",
                                "multi_axis")}


def _network(kind: str, shape: tuple[int, ...]) -> sim.Network:
    n = int(np.prod(shape))
    if kind == "switch":
        return sim.Network(topology="switch", latency_s=2e-6, bandwidth_bytes_per_s=5e9)
    if kind == "ring":
        return sim.Network(topology="ring", shape=(n,), latency_s=1e-6, bandwidth_bytes_per_s=1e9)
    if kind == "torus":
        return sim.Network(topology="torus", shape=shape if len(shape) == 2 else (n,), latency_s=3e-7)
    if kind == "store_and_forward":
        return sim.Network(topology="ring", shape=(n,), store_and_forward=True)
    if kind == "costs":
        return sim.Network(topology="switch", costs=sim.Costs(efficiency=0.75, overhead_bytes=64.0))
    if kind == "hierarchical":
        return sim.Network.hierarchical(shape[-1], n // shape[-1], 1e-6, 8e9, 5e-6, 1e9)
    return sim.Network()


def _call(op: str, x, axis_name, algorithm: str, tiled: bool):
    if op == "all_gather":
        return collectives.all_gather(x, axis_name, tiled=tiled, algorithm=algorithm)
    if op == "psum":
        return collectives.psum(x, axis_name, algorithm=algorithm)
    whole = np.concatenate([np.asarray(x).reshape(-1)] * collectives.axis_size(axis_name))  # scatters evenly
    return collectives.psum_scatter(whole, axis_name, tiled=True, algorithm=algorithm)


def _program(calls: list[tuple], axes: tuple[str, ...]):
    def body(x):
        out = x
        for op, which, algorithm, tiled in calls:
            axis_name = axes if which == "all" else axes[which % len(axes)]
            out = _call(op, x, axis_name, algorithm, tiled)
            x = x + out.reshape(-1)[:x.size].reshape(x.shape).astype(x.dtype)
        return x, out
    return body


def _run(case) -> tuple:
    """Output bytes, trace JSON, call records and end time of a case."""
    shape, network, calls, x = case
    return run_case(shape, _network(network, shape), _program(calls, case_axes(shape)), x)


_POWERS_OF_TWO = ("recursive_doubling", "rabenseifner", "recursive_halving")


def _fitting(algorithm: str, shape: tuple[int, ...], which) -> str:
    """`algorithm`, or 'ring' where it needs a power-of-two group and the call's group is not one."""
    size = int(np.prod(shape)) if which == "all" else shape[which % len(shape)]
    return "ring" if algorithm in _POWERS_OF_TWO and size & (size - 1) else algorithm


@st.composite
def _cases(draw):
    shape = draw(st.sampled_from([(2,), (3,), (4,), (5,), (8,), (2, 2), (2, 3), (3, 2), (4, 2), (2, 4)]))
    network = draw(st.sampled_from(["default", "switch", "ring", "torus", "store_and_forward", "costs",
                                    "hierarchical"]))
    if network == "hierarchical" and len(shape) == 1:
        shape = (2, shape[0]) if shape[0] <= 4 else shape
        network = "hierarchical" if len(shape) == 2 else "switch"
    calls = draw(st.lists(st.tuples(st.sampled_from(sorted(_ALGORITHMS)), st.sampled_from([0, 1, "all"]),
                                    st.integers(0, 6), st.booleans()), min_size=1, max_size=3))
    calls = [(op, which, _fitting(_ALGORITHMS[op][k % len(_ALGORITHMS[op])], shape, which), tiled)
             for op, which, k, tiled in calls]
    n = int(np.prod(shape))
    block = (draw(st.sampled_from([1, 2, 3, 4, 8])),) + tuple(draw(st.lists(st.integers(1, 3), max_size=1)))
    dtype = draw(st.sampled_from(["int8", "int32", "float32", "float64"]))
    size = n * int(np.prod(block)) * np.dtype(dtype).itemsize
    raw = draw(st.binary(min_size=size, max_size=size))
    x = np.frombuffer(raw, dtype).reshape((n * block[0],) + block[1:]).copy()
    if x.dtype.kind == "f":
        x = np.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-2.0)
    return shape, network, calls, x


def _member_by_member(case) -> tuple:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(collectives._ring_steps, "by_tables", lambda *a: False)
        return _run(case)


@given(case=_cases())
def test_tables_equal_member_by_member(case):
    """Every multi-step algorithm gives the same bytes, trace (every column, in order), call records and end
    time whether its steps run as tables for all members or member by member."""
    assert _run(case) == _member_by_member(case)


def test_tables_comparison_can_fail(monkeypatch):
    """A table path that writes one step's blocks one place off is told apart from the member-by-member run."""
    case = ((4,), "switch", [("all_gather", 0, "ring", True)], np.arange(8.0))
    slow = _member_by_member(case)
    real = collectives._ring_steps._Gather.move
    monkeypatch.setattr(collectives._ring_steps._Gather, "move", lambda self, receivers, senders, steps, ways:
                        real(self, receivers, senders, np.maximum(steps - 1, 0), ways))
    assert _run(case)[0] != slow[0]


@pytest.mark.parametrize(("op", "algorithm"), [(op, a) for op, names in _ALGORITHMS.items() for a in names
                                               if a != "direct"])
def test_tables_are_used(op, algorithm, monkeypatch):
    """The table path really runs for each multi-step algorithm (else the equality above is vacuous)."""
    joined = []
    real = sim.engine.Steps.join
    monkeypatch.setattr(sim.engine.Steps, "join", lambda self, *a: joined.append(1) or real(self, *a))
    which = 1 if algorithm == "multi_axis" else "all"  # over one axis: its bidirectional ring
    _run(((2, 4), "hierarchical", [(op, which, algorithm, True)], np.arange(128.0)))  # chunks of one size
    assert joined


@pytest.mark.parametrize(("op", "algorithm"), [(op, a) for op, names in _ALGORITHMS.items() for a in names
                                               if a != "direct"])
def test_tables_can_be_switched_off(op, algorithm, monkeypatch):
    """With `by_tables` refusing, no algorithm runs a table (so the equality above compares two paths)."""
    joined = []
    real = sim.engine.Steps.join
    monkeypatch.setattr(sim.engine.Steps, "join", lambda self, *a: joined.append(1) or real(self, *a))
    which = 1 if algorithm == "multi_axis" else "all"
    _member_by_member(((2, 4), "hierarchical", [(op, which, algorithm, True)], np.arange(16.0)))
    assert not joined


def test_ticket_reads_the_next_event_id_without_taking_it():
    """`sim._simpy.ticket` (how `Steps` knows nothing was scheduled since its last wake event) reads SimPy's
    next event id: unchanged by reading it, moved on by scheduling an event."""
    import simpy

    from sim._simpy import ticket
    env = simpy.Environment()
    first = ticket(env)
    assert ticket(env) == first
    env.timeout(1.0)
    assert ticket(env) == first + 1


def test_reduce_scatter_comparison_can_fail(monkeypatch):
    """A reduce-scatter table path that drops one step's additions is told apart from the member-by-member run."""
    case = ((4,), "switch", [("psum", 0, "ring", True)], np.arange(16.0))
    slow = _member_by_member(case)
    real = collectives._ring_steps._ReduceScatter.move
    monkeypatch.setattr(collectives._ring_steps._ReduceScatter, "move", lambda self, receivers, senders, steps, ways:
                        None if steps[0] == 1 else real(self, receivers, senders, steps, ways))
    assert _run(case)[0] != slow[0]


@given(case=_cases())
def test_few_flows_share_links_as_a_bincount_says(case):
    """Flows sharing links are counted the same over the links in use as by a bincount over all links: the
    same bytes, trace and times, fully connected networks included."""
    import sim.network._flows as flows

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flows, "_FEW_FLOWS", 0)  # only the links in use
        few = _run(case)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flows, "_FEW_FLOWS", 1 << 40)  # a bincount over all links
        assert few == _run(case)


def test_few_flows_comparison_can_fail(monkeypatch):
    """Counting one flow too many on each link in use is told apart from the bincount over all links."""
    import sim.engine._schedule as schedule
    import sim.network._flows as flows

    monkeypatch.setattr(schedule, "ENABLED", False)  # the loop's flows go through the network's rates
    case = ((4,), "default", [("psum", 0, "ring", True)], np.arange(16.0))
    monkeypatch.setattr(flows, "_FEW_FLOWS", 1 << 40)
    whole = _run(case)
    real = np.unique
    monkeypatch.setattr(flows, "_FEW_FLOWS", 0)
    monkeypatch.setattr(flows.np, "unique", lambda *a, **k: (lambda u, i, c: (u, i, c + 1))(*real(*a, **k)))
    assert _run(case)[1:] != whole[1:]


@pytest.mark.parametrize("algorithm", ["ring", "bidirectional_ring", "recursive_doubling"])
def test_scalar_blocks_are_written_where_they_land(algorithm):
    """Untiled all_gather of one scalar per device: each block is a view of the result (a scalar indexed
    with `work[k]` alone would be a copy, and the blocks received into it lost)."""
    n = 4
    x = np.arange(1, n + 1, dtype=np.int8)
    f = sim.shard_map(lambda v: collectives.all_gather(v.reshape(()), "x", algorithm=algorithm)[None],
                      mesh=sim.Mesh({"x": n}), in_specs=sim.P("x"), out_specs=sim.P("x"), check_vma=False)
    assert np.asarray(f.run(x).outputs).reshape(n, n).tolist() == [list(range(1, n + 1))] * n


def _per_message_moves(case) -> tuple:
    """The case with tables, but each message's copy or sum made on its own (no joint rows)."""
    import collectives._bidirectional_rows as bidirectional_rows
    import collectives._joint as joint

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(joint.UnitRows, "of", staticmethod(lambda *a: None))
        patch.setattr(joint.FoldRows, "of", staticmethod(lambda *a: None))
        patch.setattr(bidirectional_rows, "fits", lambda *a: False)
        return _run(case)


@given(case=_cases())
def test_joint_rows_equal_per_message_moves(case):
    """A step's copies and sums made at once over the members' joint rows give the same bytes, trace, call
    records and end time as one copy or sum per message, and as buffers allocated apart (no joint rows)."""
    import collectives._joint as joint

    rows = _run(case)
    assert rows == _per_message_moves(case)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(joint, "JOINT_MAX_BYTES", 0)  # every buffer its own allocation
        assert rows == _run(case)


@pytest.mark.parametrize(("op", "algorithm"), [("all_gather", "ring"), ("all_gather", "bidirectional_ring"),
                                               ("psum", "ring"), ("psum_scatter", "ring")])
def test_joint_rows_are_used(op, algorithm, monkeypatch):
    """The joint-rows path really runs for the ring passes (else the equality above is vacuous)."""
    import collectives._joint as joint

    made = []
    for kind in (joint.UnitRows, joint.FoldRows):
        real = kind.of
        monkeypatch.setattr(kind, "of", staticmethod(lambda *a, real=real: made.append(real(*a)) or made[-1]))
    _run(((8,), "default", [(op, 0, algorithm, True)], np.arange(64.0)))
    assert any(found is not None for found in made)


def test_bidirectional_folds_over_rows_are_used(monkeypatch):
    """The bidirectional reduce-scatter folds over rows (`collectives._bidirectional_rows`) in psum and
    psum_scatter, and a fold that drops the receiver's own term is told apart from per-message folds."""
    import collectives._bidirectional_rows as bidirectional_rows

    entered = []
    real = bidirectional_rows._Folds.enter
    monkeypatch.setattr(bidirectional_rows._Folds, "enter", lambda self, *a: entered.append(1) or real(self, *a))
    for op in ("psum", "psum_scatter"):
        _run(((6,), "default", [(op, 0, "bidirectional_ring", True)], np.arange(36.0)))
    assert len(entered) == 12
    case = ((6,), "switch", [("psum_scatter", 0, "bidirectional_ring", True)], np.arange(36.0))
    slow = _per_message_moves(case)
    monkeypatch.setattr(bidirectional_rows, "combine", lambda reduction, a, b: np.asarray(a) + 0 * np.asarray(b))
    assert _run(case)[0] != slow[0]


@pytest.mark.parametrize("kind", ["copy", "fold"])
def test_joint_rows_comparison_can_fail(kind, monkeypatch):
    """Joint rows that copy into the wrong unit, or fold in a wrong term, are told apart from per-message moves."""
    import collectives._joint as joint

    op = "all_gather" if kind == "copy" else "psum"
    case = ((4,), "switch", [(op, 0, "ring", True)], np.arange(16.0))
    slow = _per_message_moves(case)
    if kind == "copy":
        real = joint.UnitRows.move
        monkeypatch.setattr(joint.UnitRows, "move", lambda self, r, into, s, out, lanes=None:
                            real(self, r, (into + 1) % 4, s, (out + 1) % 4, lanes))
    else:
        real = joint.FoldRows.__init__

        def wrong(self, *args):
            real(self, *args)
            self.combine = lambda theirs, owns: theirs  # the receiver's own term dropped
        monkeypatch.setattr(joint.FoldRows, "__init__", wrong)
    assert _run(case)[0] != slow[0]





class _Member:
    """What `joint` reads of a port: the member's memory, its group place, the call's `once`."""

    def __init__(self, index: int, size: int, facts: dict) -> None:
        self.memory = sim.LocalMemory(index, meter=sim.MemoryMeter())
        self.group = type("Group", (), {"index": index, "size": size})()
        self.facts = facts

    def once(self, key, compute):
        if key not in self.facts:
            self.facts[key] = compute()
        return self.facts[key]


def test_joint_buffers_are_rows_charged_as_allocations():
    """Each member's `joint` buffer is its row of one shared array, zeroed and charged to its own memory as
    an allocation of the same shape; past the byte limit, or where an earlier reservation of the memory
    takes the allocation, each is a buffer of its own (the reservation kept for nothing else)."""
    from collectives import _joint as joint

    facts: dict = {}
    members = [_Member(j, 3, facts) for j in range(3)]
    views = [joint.joint(m, "k", np.float32, (2, 4)) for m in members]
    assert [m.memory.meter.held_bytes for m in members] == [32] * 3
    assert not any(v.any() for v in views) and len({id(joint._root(v)) for v in views}) == 1
    assert joint.Rows.of([v.reshape(-1) for v in views]).starts.tolist() == [0, 8, 16]
    alone = _Member(0, 3, {})
    earlier = np.zeros((2, 4), np.float32)
    alone.memory.reserve(earlier)
    view = joint.joint(alone, "k", np.float32, (2, 4))
    assert np.shares_memory(view, earlier) and alone.memory.release() == []
    big = _Member(0, 3, {})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(joint, "JOINT_MAX_BYTES", 8)
        view = joint.joint(big, "k", np.float32, (2, 4))
    assert "k" not in str(big.facts) and big.memory.meter.held_bytes == 32


def test_a_joint_row_is_handed_out_once():
    """A member asking `joint` again under a key it holds a row of (a call running one pass per mesh axis)
    gets a buffer of its own, never its live row again: a message of the first pass still in flight, read
    from that row when it arrives, must not see the second pass's writes. The other members keep their rows."""
    from collectives import _joint as joint

    facts: dict = {}
    members = [_Member(j, 2, facts) for j in range(2)]
    first = joint.joint(members[0], "k", np.float32, (4,))
    again = joint.joint(members[0], "k", np.float32, (4,))
    other = joint.joint(members[1], "k", np.float32, (4,))
    assert not np.shares_memory(first, again) and joint._root(first) is joint._root(other)
    assert members[0].memory.meter.held_bytes == 32


@st.composite
def _uneven(draw):
    """A psum (or all_gather) of a few floats per device over up to 12 devices on a fully connected network:
    most chunks empty, one of a few bytes, so the members' steps drift apart in time."""
    shape = draw(st.sampled_from([(2,), (3,), (5,), (6,), (8,), (11,), (12,), (2, 3), (3, 4), (2, 2)]))
    op = draw(st.sampled_from(["psum", "psum", "all_gather", "psum_scatter"]))
    algorithm = draw(st.sampled_from(["bidirectional_ring", "multi_axis", "ring", "per_axis"]))
    if algorithm == "per_axis" and op == "psum_scatter":
        algorithm = "ring"
    per = draw(st.integers(1, 3))
    n = int(np.prod(shape))
    values = draw(st.lists(st.sampled_from([0.0, -0.0, 1.0, -2.5, 3e38, 1e-40, np.inf]), min_size=n * per,
                           max_size=n * per))
    which = "all" if algorithm in ("multi_axis", "per_axis") or draw(st.booleans()) else 0
    return shape, "default", [(op, which, algorithm, True)], np.array(values, np.float32)


@settings(max_examples=40)
@given(case=_uneven())
def test_uneven_chunks_tables_equal_member_by_member(case):
    """Chunks of several sizes, most of them empty (members drifting apart), give the same bytes, trace
    (every column), call records and end time as tables, member by member, and with one move per message."""
    tables = _run(case)
    assert tables == _member_by_member(case)
    assert tables == _per_message_moves(case)


def test_skipping_moves_comparison_can_fail(monkeypatch):
    """A bidirectional gather that also skips moves carrying a few bytes (not only empty ones) is told apart
    from the member-by-member run."""
    from collectives import _bidirectional as bidirectional

    case = ((6,), "default", [("psum", 0, "bidirectional_ring", True)], np.arange(1.0, 7.0))
    slow = _member_by_member(case)
    real = bidirectional._Gather.move
    monkeypatch.setattr(bidirectional._Gather, "move", lambda self, r, s, steps, ways:
                        None if steps.max() == 0 else real(self, r, s, steps, ways))
    assert _run(case)[0] != slow[0]
