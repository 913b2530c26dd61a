"""The tree all-reduce (`collectives._tree_steps.Programs`: every member's program of sends and receives run
for all members at once; `collectives._tree_chain.Chain`: a chain's times worked out ahead) and the direct
phases of the hierarchical algorithms (one `sim.engine.Steps` loop for all members, `collectives._direct_steps`)
give the same bytes, trace (every column, in order), call records and times as the member-by-member loops they
replace, on random programs, meshes, node shapes and networks; the comparison is shown to fail on a wrong table
path, and the table paths are shown to run."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from row_programs import case_axes, run_case

import collectives
import collectives._direct_steps as direct_steps
import collectives._ring_steps as ring_steps
import collectives._tree as tree
import collectives._tree_chain as tree_chain
import collectives._tree_steps as tree_steps
import sim

_OPS = ("psum", "pmax", "all_gather", "psum_scatter", "psum tree", "pmax tree")


def _network(kind, shape: tuple[int, ...]) -> sim.Network:
    n = int(np.prod(shape))
    if isinstance(kind, sim.Network):
        return kind
    if kind == "hierarchical":
        return sim.Network.hierarchical(shape[-1], n // shape[-1], 1e-6, 8e9, 5e-6, 1e9)
    if kind == "switch":
        return sim.Network(topology="switch", latency_s=2e-6, bandwidth_bytes_per_s=5e9)
    if kind == "costs":
        return sim.Network(topology="switch", costs=sim.Costs(efficiency=0.75, overhead_bytes=64.0))
    if kind == "issue":  # issue costs: the member-by-member loop on both sides
        return sim.Network(costs=sim.Costs(per_message_s=1e-7))
    return sim.Network()


def _call(op: str, x, axis_name):
    if op == "psum tree":
        return collectives.psum(x, axis_name, algorithm="tree")
    if op == "pmax tree":
        return collectives.pmax(x, axis_name, algorithm="tree")
    if op == "psum":
        return collectives.psum(x, axis_name, algorithm="hierarchical")
    if op == "pmax":
        return collectives.pmax(x, axis_name, algorithm="hierarchical")
    if op == "all_gather":
        return collectives.all_gather(x, axis_name, tiled=True, algorithm="hierarchical")
    whole = np.concatenate([np.asarray(x).reshape(-1)] * collectives.axis_size(axis_name))
    return collectives.psum_scatter(whole, axis_name, tiled=True, algorithm="hierarchical")


def _program(calls: list[tuple], axes: tuple[str, ...]):
    def body(x):
        out = x
        for op, which in calls:
            axis_name = axes if which == "all" else axes[which % len(axes)]
            out = _call(op, x, axis_name)
            x = x + out.reshape(-1)[:x.size].reshape(x.shape).astype(x.dtype)
        return x, out
    return body


def _run(case) -> tuple:
    """Output bytes, trace JSON, call records and end time of a case."""
    shape, network, calls, x = case
    return run_case(shape, _network(network, shape), _program(calls, case_axes(shape)), x)


@st.composite
def _cases(draw):
    shape = draw(st.sampled_from([(2,), (3,), (5,), (2, 2), (2, 3), (3, 2), (4, 2), (2, 4)]))
    network = draw(st.sampled_from(["hierarchical", "hierarchical", "default", "switch", "costs", "issue"]))
    if network == "hierarchical" and len(shape) == 1:
        shape = (2, shape[0])
    calls = draw(st.lists(st.tuples(st.sampled_from(_OPS), st.sampled_from([0, 1, "all"])), min_size=1,
                          max_size=3))
    n = int(np.prod(shape))
    block = (draw(st.sampled_from([1, 2, 3, 5])),) + tuple(draw(st.lists(st.integers(1, 3), max_size=1)))
    dtype = draw(st.sampled_from(["int8", "int32", "float32", "float64"]))
    size = n * int(np.prod(block)) * np.dtype(dtype).itemsize
    raw = draw(st.binary(min_size=size, max_size=size))
    x = np.frombuffer(raw, dtype).reshape((n * block[0],) + block[1:]).copy()
    if x.dtype.kind == "f":
        x = np.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-2.0)
    return shape, network, calls, x


def _member_by_member(case) -> tuple:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(direct_steps, "by_tables", lambda *a: False)
        patch.setattr(ring_steps, "by_tables", lambda *a: False)
        return _run(case)


@settings(max_examples=min(120, settings.default.max_examples))  # each example runs its program twice
@given(case=_cases())
def test_tables_equal_member_by_member(case):
    """The tree and every hierarchical direct phase give the same bytes, trace (every column, in order), call
    records and end time whether they run as tables for all members or member by member."""
    assert _run(case) == _member_by_member(case)


_FIXED = ((2, 4), "hierarchical", [("psum", "all"), ("all_gather", "all"), ("psum_scatter", "all")],
          (np.arange(8 * 3, dtype=np.float32) * 0.37 - 2.5).reshape(8 * 3))


def test_tables_run():
    """The fixed case posts its direct phases as tables: every phase of each call joins one `Steps` loop."""
    joined = []
    real = direct_steps._Direct.join

    def spy(self, port, team, member):
        joined.append(self.phase)
        return (yield from real(self, port, team, member))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(direct_steps._Direct, "join", spy)
        _run(_FIXED)
    assert sorted(set(joined)) == ["intra-node", "intra-node all-gather", "intra-node reduce-scatter"]
    assert len(joined) == 4 * 8  # psum: two phases, all_gather and psum_scatter one each, 8 members


def test_tree_tables_run():
    """A tree all-reduce over 2 nodes of 4 runs every member's program as tables (and the member-by-member
    path runs none)."""
    joined = []
    real = tree_steps.Programs.join

    def spy(self, port, program):
        joined.append(len(program))
        return (yield from real(self, port, program))
    case = ((2, 4), "hierarchical", [("psum tree", "all")], np.arange(8 * 3, dtype=np.float32))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tree_steps.Programs, "join", spy)
        _run(case)
        assert len(joined) == 8
        joined.clear()
        _member_by_member(case)
        assert not joined


@pytest.mark.parametrize("wrong", ["tables reversed", "a message dropped", "woken early"])
def test_tree_comparison_can_fail(wrong):
    """A tree table path that posts a table's messages in reverse order, drops one message's fold, or wakes
    members before their messages arrive is caught by the comparison."""
    case = ((2, 4), "hierarchical", [("psum tree", "all")], np.arange(8 * 3, dtype=np.float32) * 0.5 - 3)
    with pytest.MonkeyPatch.context() as patch:
        if wrong == "tables reversed":
            real_post = tree_steps.Programs._post
            patch.setattr(tree_steps.Programs, "_post", lambda self, posts: real_post(self, posts[::-1]))
        elif wrong == "a message dropped":
            real_take = tree_steps.Programs._take

            def dropping(self, r):
                op = self.programs[r][self.pc[r]]
                if op.key == ("chain up", 1):
                    self.inbox.pop((r, op.source, op.key))
                    self.pc[r] += 1
                    return
                real_take(self, r)
            patch.setattr(tree_steps.Programs, "_take", dropping)
        else:
            real_wake = tree_steps.Programs._wake
            patch.setattr(tree_steps.Programs, "_wake",
                          lambda self, woken: real_wake(self, [(r, self.env.now) for r, _ in woken]))
        tables = _run(case)
    assert tables != _member_by_member(case)


@pytest.mark.parametrize("wrong", ["own term last", "pieces swapped", "details"])
def test_comparison_can_fail(wrong):
    """A table path that folds the member's own term out of team order, writes a gathered piece into the
    wrong place, or names the wrong piece in the trace is caught by the comparison."""
    with pytest.MonkeyPatch.context() as patch:
        if wrong == "own term last":
            patch.setattr(direct_steps._Fold, "move", _own_term_last)
        elif wrong == "pieces swapped":
            patch.setattr(direct_steps._Gather, "move", _pieces_swapped)
        else:
            patch.setattr(direct_steps._Direct, "details",
                          lambda self, positions, steps, ways: {"phase": [self.phase] * len(ways),
                                                                "piece": ((ways + 1) % self.pieces).tolist()})
        case = ((2, 4), "hierarchical", [("all_gather", "all")] if wrong != "own term last" else [("psum", "all")],
                (np.arange(8 * 3, dtype=np.float32) * 0.37 - 2.5).reshape(8 * 3))
        tables = _run(case)
    assert tables != _member_by_member(case)


def _own_term_last(self, receivers, senders, steps, ways):
    """`_Fold.move` folding each member's own term after every other (not in team order)."""
    states = self.of.states
    _, pieces = self.sources(receivers, ways)
    for r, j, v in zip(receivers.tolist(), senders.tolist(), pieces.tolist()):
        member = states[r]
        theirs = states[j].rows[member.index][v]
        member.sums[v] = theirs.copy() if member.sums[v] is None else member.sums[v] + theirs
    for r, w in zip(receivers.tolist(), ways.tolist()):
        if w == (self.k - 1) * self.pieces - 1:
            for v, own in enumerate(states[r].rows[states[r].index]):
                states[r].sums[v] = states[r].sums[v] + own


def _pieces_swapped(self, receivers, senders, steps, ways):
    """`_Gather.move` writing piece v of a sender into the receiver's place of piece v + 1."""
    states = self.of.states
    sources, pieces = self.sources(receivers, ways)
    for r, j, s, v in zip(receivers.tolist(), senders.tolist(), sources.tolist(), pieces.tolist()):
        states[r].rows[s][(v + 1) % self.pieces][...] = states[j].rows[states[j].index][v]


def test_received_places_match_the_receivers_order():
    """Member me's message to team position t (piece v) is the receiver's receive of sender me (skipping
    itself in team order), piece v: the receive order the member-by-member loop walks."""
    k, pieces = 5, 2
    for me in range(k):
        others = [t for t in range(k) if t != me]
        places = direct_steps.received_places(k, me, pieces).tolist()
        for i, t in enumerate(others):
            senders_of_t = [s for s in range(k) if s != t]
            for v in range(pieces):
                assert places[i * pieces + v] == senders_of_t.index(me) * pieces + v


# ---------------------------------------------------------------------------------------------- chains


@st.composite
def _chains(draw):
    """A tree call over the whole mesh on a fully connected network (a chain `Chain` may plan), then calls
    over parts of the mesh that may start while the chain's sums travel back (the plan hands over)."""
    shape = draw(st.sampled_from([(2,), (3,), (6,), (2, 2), (2, 3), (4, 2), (2, 4), (3, 3)]))
    network = sim.Network(latency_s=draw(st.sampled_from([1e-6, 3e-7, 2.5e-6])),
                          bandwidth_bytes_per_s=draw(st.sampled_from([100e9, 7e9, 1.3e9])),
                          costs=draw(st.sampled_from([sim.Costs(), sim.Costs(efficiency=0.75, overhead_bytes=64.0)])))
    first = (draw(st.sampled_from(["psum tree", "pmax tree"])), "all")
    rest = draw(st.lists(st.tuples(st.sampled_from(_OPS), st.sampled_from([0, 1, "all"])), max_size=2))
    n = int(np.prod(shape))
    block = (draw(st.sampled_from([0, 1, 2, 3, 5])),)
    dtype = draw(st.sampled_from(["int8", "int32", "float32", "float64"]))
    size = n * block[0] * np.dtype(dtype).itemsize
    x = np.frombuffer(draw(st.binary(min_size=size, max_size=size)), dtype).reshape(n * block[0]).copy()
    if x.dtype.kind == "f":
        x = np.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-2.0)
    return shape, network, [first, *rest], x


def _by_programs(case) -> tuple:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tree, "chain_fits", lambda port, nodes: False)
        return _run(case)


@settings(max_examples=min(60, settings.default.max_examples))  # each example runs its program three times
@given(case=_chains())
def test_chain_equals_member_by_member(case):
    """A tree over the whole mesh planned ahead (`Chain`, handing over to `Programs` where a member does
    something while the chain runs) gives the same bytes, trace (every column, in order), call records and
    end time as `Programs` and as member by member."""
    planned = _run(case)
    assert planned == _by_programs(case)
    assert planned == _member_by_member(case)


def _spied(case, name: str) -> tuple[tuple, int]:
    """`_run(case)`, and how many times `Chain.<name>` ran."""
    count = [0]
    real = getattr(tree_chain.Chain, name)

    def spy(self, *args):
        count[0] += 1
        return real(self, *args)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tree_chain.Chain, name, spy)
        return _run(case), count[0]


_CHAIN = ((8,), sim.Network(), [("psum tree", "all")], np.arange(8 * 3, dtype=np.float32) * 0.37 - 2.5)
_HANDED = ((4, 2), sim.Network(), [("psum tree", "all"), ("psum tree", 1)],
           np.arange(8 * 3, dtype=np.float32) * 0.37 - 2.5)


def test_chain_planned_and_handed_over():
    """A tree over the whole mesh is planned; where a pair of members meets for its next call while the
    chain still runs, the plan hands over to `Programs` at that instant, with the same results."""
    result, runs = _spied(_CHAIN, "_run")
    assert runs == 1 and result == _member_by_member(_CHAIN)
    result, handed = _spied(_HANDED, "_fall_back")
    assert handed == 1 and result == _member_by_member(_HANDED)
    _, handed = _spied(_CHAIN, "_fall_back")
    assert handed == 0


def test_chain_not_planned_where_hops_take_no_time():
    """Empty halves on links without latency take no time, so hops would share instants: the chain is not
    planned and every member starts its program in `Programs` as it joined, with the same results."""
    case = ((5,), sim.Network(latency_s=0.0), [("psum tree", "all"), ("psum tree", "all")],
            np.zeros(0, np.float32))
    result, runs = _spied(case, "_run")
    assert runs == 0 and result == _member_by_member(case)


def test_chain_folds_at_once():
    """The chain's float sums are folded for all members at once where no subnormal or NaN meets them, and
    operation by operation otherwise (a subnormal term), with the same bytes either way."""
    subnormal = _CHAIN[3].copy()
    subnormal[5] = np.float32(1e-40)
    folds: list[bool] = []
    real = tree_chain.Chain._fold_at_once

    def spy(self) -> bool:
        folds.append(real(self))
        return folds[-1]
    for x, at_once in ((_CHAIN[3], True), (subnormal, False)):
        case = (*_CHAIN[:3], x)
        folds.clear()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tree_chain.Chain, "_fold_at_once", spy)
            result = _run(case)
        assert folds == [at_once] and result == _member_by_member(case)


@pytest.mark.parametrize("wrong", ["a bandwidth term dropped", "resumes swapped", "no hand-over", "sums in order"])
def test_chain_comparison_can_fail(wrong):
    """A plan that leaves a hop's bandwidth term out, resumes the chain's last two members in the other
    order, never hands over, or folds the sums at once from the head to the tail is caught by the
    comparison."""
    case = _HANDED if wrong == "no hand-over" else _CHAIN
    with pytest.MonkeyPatch.context() as patch:
        if wrong == "sums in order":
            patch.setattr(tree_chain.Chain, "_fold_at_once", _head_first)
        elif wrong == "a bandwidth term dropped":
            real = tree_chain.one_link_s
            patch.setattr(tree_chain, "one_link_s", lambda post_s, wires, latency_s, bandwidth: real(
                post_s, [0.0 for _ in wires], latency_s, bandwidth))
        elif wrong == "resumes swapped":
            real_next = tree_chain.Chain._next

            def swapped(self, h):
                if h >= len(self.hops):
                    last = self.hops[-1]
                    for j in (last.receiver, last.sender):
                        tree_chain.fire_at(self.env, self.programs.done[j], None, last.wake_s)
                    return
                real_next(self, h)
            patch.setattr(tree_chain.Chain, "_next", swapped)
        else:
            patch.setattr(tree_chain.Chain, "_quiet", lambda self: True)
        planned = _run(case)
    assert planned != _member_by_member(case)


def _head_first(self) -> bool:
    """`Chain._fold_at_once` adding the members' terms from member 0 on (the chain adds from the tail)."""
    for t in (0, 1):
        total = np.add.accumulate(np.stack([own[t] for own, _, _ in self.parts]), axis=0)[-1]
        for _, halves, _ in self.parts:
            halves[t][...] = total
    return True
