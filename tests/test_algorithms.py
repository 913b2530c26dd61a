"""Every algorithm of every collective: the bytes of 'direct', the messages its definition promises, its
errors, and the new algorithms beside JAX (the cost model behind 'auto' is in test_algorithm_auto.py).

No JAX here except the tests marked `differential`, which put the new algorithms beside real JAX.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import strategies as cases_
import test_layouts_collectives as with_layouts
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import Case, differences, run_jax
from test_registry import OPS

import collectives
import sim
from collectives import _cost
from oracles._reordered import compare_reordered, reorders
from sim import P

LAID_OUT = [op for op in OPS if collectives.definition(op).arrays]  # axis_index has no operand to lay out


def choices(op: str) -> tuple[str, ...]:
    """The algorithms `op` offers."""
    return collectives.definition(op).param("algorithm").choices


def agreeing(case: Case, base: list, values: list) -> list[str]:
    """What differs between `values` (the case's algorithm) and `base` ('direct'): bytes, or for a float
    reduction in another order, elements outside `oracles._reordered`'s bound."""
    if case.args and reorders(case.op, case.params, np.asarray(case.args[0][0]).dtype):
        found = compare_reordered(case.op, case.params, case.mesh_shape, case.args[0], base, values)
        return [f"device {d.device}: {d.kind}" for d in found]
    return differences(base, values, "direct", case.params["algorithm"])


def direct(case: Case) -> Case:
    """The same call with algorithm='direct'."""
    return Case(case.op, case.mesh_shape, case.args, {**case.params, "algorithm": "direct"})


# ---------------------------------------------------------------------------------------------- same bytes


@pytest.mark.parametrize("op", LAID_OUT)
@settings(max_examples=60)
@given(data=st.data())
def test_every_algorithm_gives_the_bytes_of_direct(op, data):
    """Any algorithm (non-power-of-two groups, axis_index_groups and tuples of axes included), any operand
    and result layouts: every device's result is 'direct''s without layouts (exactly for integers and for
    collectives that move data unchanged; float reductions within the stated bound), and its buffer holds
    the result encoded in the requested layout."""
    case = data.draw(cases_.cases(op, algorithms=True), label="case")
    base, _ = with_layouts.run_simulator(direct(case), [None] * len(case.args), None)
    arrays = len(collectives.definition(op).data_arrays)
    in_layouts = [tuple(data.draw(st.permutations(range(arg[0].ndim)))) if k < arrays else None
                  for k, arg in enumerate(case.args)]
    out_layout = tuple(data.draw(st.permutations(range(np.ndim(base[0])))))
    values, raws = with_layouts.run_simulator(case, in_layouts, out_layout)
    found = agreeing(case, base, values) + with_layouts.byte_differences(values, raws, out_layout)
    assert not found, "\n".join(found)


@settings(max_examples=20)
@given(case=cases_.cases("axis_index", algorithms=True))
def test_axis_index_takes_every_algorithm_it_lists(case):
    """axis_index sends no message under any algorithm it lists, and gives the same indices."""
    assert not differences(cases_.run_simulator(direct(case)), cases_.run_simulator(case))


def test_every_collective_offers_direct_and_auto():
    """Every registered collective takes `algorithm`, 'direct' (its default) and 'auto' among its choices."""
    for op in OPS:
        p = collectives.definition(op).param("algorithm")
        assert p.default == "direct" and {"direct", "auto"} <= set(p.choices) and not p.jax, op


# ---------------------------------------------------------------------------------------------- messages


def run(mesh_axes: dict, body, xs: list, network: Any = None) -> sim.Run:
    """`body` on each device of `mesh_axes` with its own row of `xs`; the whole run."""
    mesh = sim.Mesh(mesh_axes, network=network)
    spec = P(mesh.axis_names)
    f = sim.shard_map(lambda x: body(x[0])[None], mesh=mesh, in_specs=(spec,), out_specs=spec, check_vma=False)
    return f.run(np.stack(xs))


def sent_per_device(outcome: sim.Run) -> set[int]:
    """How many messages each device sent across the network (not to itself), as a set over devices."""
    counts: dict[int, int] = {}
    for m in outcome.trace.sent:
        if m.src != m.dst:
            counts[m.src] = counts.get(m.src, 0) + 1
    return set(counts.values())


_C = collectives
MESSAGE_COUNTS = [  # (id, mesh, axis_name, body, messages each member sends across the network)
    ("all_gather ring n-1", {"x": 5}, "x", lambda x, a: _C.all_gather(x, a, algorithm="ring"), 4),
    ("all_gather bidirectional 2 (n // 2), odd n", {"x": 5}, "x",
     lambda x, a: _C.all_gather(x, a, algorithm="bidirectional_ring"), 4),
    ("all_gather bidirectional 2 (n // 2), even n", {"x": 6}, "x",
     lambda x, a: _C.all_gather(x, a, algorithm="bidirectional_ring"), 6),
    ("all_gather recursive doubling lg n", {"x": 8}, "x",
     lambda x, a: _C.all_gather(x, a, algorithm="recursive_doubling"), 3),
    ("all_gather per_axis (3-1)+(2-1)", {"x": 2, "y": 3}, ("x", "y"),
     lambda x, a: _C.all_gather(x, a, algorithm="per_axis"), 3),
    ("psum ring 2(n-1)", {"x": 6}, "x", lambda x, a: _C.psum(x, a, algorithm="ring"), 10),
    ("psum bidirectional 4 (n // 2)", {"x": 6}, "x", lambda x, a: _C.psum(x, a, algorithm="bidirectional_ring"), 12),
    ("psum_scatter bidirectional 2 (n // 2)", {"x": 7}, "x",
     lambda x, a: _C.psum_scatter(x, a, algorithm="bidirectional_ring", tiled=True), 6),
    ("psum recursive doubling lg n", {"x": 8}, "x", lambda x, a: _C.psum(x, a, algorithm="recursive_doubling"), 3),
    ("psum rabenseifner 2 lg n", {"x": 8}, "x", lambda x, a: _C.psum(x, a, algorithm="rabenseifner"), 6),
    ("pmax per_axis 2(3-1)+2(2-1)", {"x": 2, "y": 3}, ("x", "y"), lambda x, a: _C.pmax(x, a, algorithm="per_axis"),
     6),
    ("psum_scatter ring n-1", {"x": 6}, "x", lambda x, a: _C.psum_scatter(x, a, algorithm="ring", tiled=True), 5),
    ("psum_scatter recursive halving lg n", {"x": 8}, "x",
     lambda x, a: _C.psum_scatter(x, a, algorithm="recursive_halving", tiled=True), 3),
    ("all_to_all pairwise n-1", {"x": 6}, "x", lambda x, a: _C.all_to_all(x, a, 0, 0, tiled=True,
                                                                          algorithm="pairwise"), 5),
    ("all_to_all bruck ceil(lg 6)", {"x": 6}, "x", lambda x, a: _C.all_to_all(x, a, 0, 0, tiled=True,
                                                                              algorithm="bruck"), 3),
    ("all_to_all bruck ceil(lg 5)", {"x": 5}, "x", lambda x, a: _C.all_to_all(x, a, 0, 0, tiled=True,
                                                                              algorithm="bruck"), 3),
    ("all_to_all bruck lg 8", {"x": 8}, "x", lambda x, a: _C.all_to_all(x, a, 0, 0, tiled=True,
                                                                        algorithm="bruck"), 3),
    ("all_to_all per_axis (3-1)+(2-1)", {"x": 2, "y": 3}, ("x", "y"),
     lambda x, a: _C.all_to_all(x, a, 0, 0, tiled=True, algorithm="per_axis"), 3),
    ("all_gather multi_axis 2 parts x (2 (2 // 2) + 2 (3 // 2))", {"x": 2, "y": 3}, ("x", "y"),
     lambda x, a: _C.all_gather(x, a, algorithm="multi_axis"), 8),
    ("psum_scatter multi_axis 3 parts x 3 x 2 (2 // 2)", {"x": 2, "y": 2, "z": 2}, ("x", "y", "z"),
     lambda x, a: _C.psum_scatter(x, a, algorithm="multi_axis", tiled=True), 18),
    ("psum multi_axis 2 x 2 parts x (2 + 2)", {"x": 2, "y": 3}, ("x", "y"),
     lambda x, a: _C.psum(x, a, algorithm="multi_axis"), 16),
    ("all_to_all multi_axis 2 parts x ((2-1)+(3-1))", {"x": 2, "y": 3}, ("x", "y"),
     lambda x, a: _C.all_to_all(x, a, 0, 0, tiled=True, algorithm="multi_axis"), 6),
]


@pytest.mark.parametrize("mesh_axes, axis_name, body, count", [c[1:] for c in MESSAGE_COUNTS],
                         ids=[c[0] for c in MESSAGE_COUNTS])
def test_each_algorithm_sends_the_messages_its_definition_says(mesh_axes, axis_name, body, count):
    """Every member sends exactly the number of network messages its algorithm's definition gives."""
    n = math.prod(mesh_axes.values())
    xs = [np.arange(n * 4, dtype=np.int32) + 100 * d for d in range(n)]
    assert sent_per_device(run(mesh_axes, lambda x: body(x, axis_name), xs)) == {count}


def test_pairwise_steps_go_to_i_plus_k_and_wait_for_i_minus_k():
    """all_to_all and ragged_all_to_all 'pairwise': at step k member i sends to member i + k, and its step k
    message leaves no earlier than its step k - 1 message from member i - k + 1 arrived."""
    n = 4
    xs = [np.arange(n * 2, dtype=np.int32) + 10 * d for d in range(n)]
    outcome = run({"x": n}, lambda x: _C.all_to_all(x, "x", 0, 0, tiled=True, algorithm="pairwise"), xs)
    sent = outcome.trace.sent
    assert all(m.dst == (m.src + m.detail["step"]) % n for m in sent)
    arrived = {(m.dst, m.detail["step"]): m.arrival_time_s for m in sent}
    assert all(m.send_time_s >= arrived[m.src, m.detail["step"] - 1] for m in sent if m.detail["step"])


def test_ragged_pairwise_keeps_the_docs_example():
    """The docs' ragged_all_to_all example gives the docs' result with 'pairwise', its messages stepped."""
    import test_errors
    out = test_errors.ragged(**test_errors.DOCS, algorithm="pairwise")
    assert out.tolist() == [[1, 3, 0, 0], [2, 2, 4, 0]]


# ---------------------------------------------------------------------------------------------- float bound


@pytest.mark.parametrize("op, algorithm, mesh_axes, axis_name", [
    ("psum", "bidirectional_ring", {"x": 6}, "x"), ("psum", "rabenseifner", {"x": 8}, "x"),
    ("psum", "per_axis", {"x": 2, "y": 3}, ("x", "y")), ("pmean", "rabenseifner", {"x": 4}, "x"),
    ("psum_scatter", "recursive_halving", {"x": 8}, "x"), ("psum_scatter", "ring", {"x": 5}, "x"),
    ("psum", "bidirectional_ring", {"x": 5}, "x"), ("psum_scatter", "bidirectional_ring", {"x": 6}, "x"),
    ("psum_scatter", "bidirectional_ring", {"x": 7}, "x"), ("psum", "multi_axis", {"x": 2, "y": 3}, ("x", "y")),
    ("psum_scatter", "multi_axis", {"x": 2, "y": 2, "z": 2}, ("x", "y", "z")),
    ("pmean", "multi_axis", {"x": 3, "y": 4}, ("x", "y")),
])
@settings(max_examples=25)
@given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from([np.float16, np.float32, np.float64]))
def test_float_sums_stay_within_the_stated_bound(op, algorithm, mesh_axes, axis_name, seed, dtype):
    """A float reduction in another order than 'direct''s is within (n-1) eps sum|x_i| (+ 2n tiny; for
    pmean one more rounding) of 'direct''s on every element: `oracles._reordered`'s bound, on values of
    mixed signs and magnitudes."""
    n = math.prod(mesh_axes.values())
    rng = np.random.default_rng(seed)
    xs = [(rng.standard_normal(n * 3) * 10.0 ** rng.integers(-3, 4, n * 3)).astype(dtype) for _ in range(n)]
    extra = {"tiled": True} if op == "psum_scatter" else {}
    params = {"axis_name": axis_name, "algorithm": algorithm, **extra}
    fn = getattr(collectives, op)
    got = run(mesh_axes, lambda x: fn(x, axis_name, algorithm=algorithm, **extra), xs).outputs
    want = run(mesh_axes, lambda x: fn(x, axis_name, **extra), xs).outputs
    assert not compare_reordered(op, params, mesh_axes, xs, list(want), list(got))


# ---------------------------------------------------------------------------------------------- errors


BAD_ALGORITHMS = [  # (id, call on a 1-D mesh of n devices, n, pattern)
    ("all_gather tree", lambda x: _C.all_gather(x, "x", algorithm="tree"), 4,
     r"device 0: all_gather: algorithm='tree' must be one of \('direct', 'ring', 'bidirectional_ring', "
     r"'recursive_doubling', 'per_axis', 'multi_axis', 'hierarchical', 'auto'\)"),
    ("all_to_all ring", lambda x: _C.all_to_all(x, "x", 0, 0, tiled=True, algorithm="ring"), 4,
     r"all_to_all: algorithm='ring' must be one of \('direct', 'pairwise', 'bruck', 'per_axis', 'multi_axis', "
     r"'auto'\)"),
    ("ragged bruck", lambda x: _C.ragged_all_to_all(x, x, np.zeros(4, np.int32), np.zeros(4, np.int32),
                                                    np.zeros(4, np.int32), np.zeros(4, np.int32), axis_name="x",
                                                    algorithm="bruck"), 4,
     r"ragged_all_to_all: algorithm='bruck' must be one of \('direct', 'pairwise', 'auto'\)"),
    ("psum_scatter rabenseifner", lambda x: _C.psum_scatter(x, "x", tiled=True, algorithm="rabenseifner"), 4,
     r"psum_scatter: algorithm='rabenseifner' must be one of \('direct', 'ring', 'bidirectional_ring', "
    r"'recursive_halving', 'multi_axis', 'hierarchical', 'in_network', 'auto'\)"),
    ("ppermute ring", lambda x: _C.ppermute(x, "x", [(0, 1)], algorithm="ring"), 4,
     r"ppermute: algorithm='ring' must be one of \('direct', 'auto'\)"),
    ("axis_index ring", lambda x: _C.axis_index("x", algorithm="ring") + x, 4,
     r"axis_index: algorithm='ring' must be one of \('direct', 'auto'\)"),
    ("pvary ring", lambda x: _C.pvary(x, "x", algorithm="ring"), 4,
     r"pvary: algorithm='ring' must be one of \('direct', 'auto'\)"),
    ("pscatter ring", lambda x: _C.pscatter(x, "x", tiled=True, algorithm="ring"), 4,
     r"pscatter: algorithm='ring' must be one of \('direct', 'auto'\)"),
    ("not a string", lambda x: _C.psum(x, "x", algorithm=None), 4, r"psum: algorithm=None must be one of"),
    ("rabenseifner on 6", lambda x: _C.psum(x, "x", algorithm="rabenseifner"), 6,
     r"device 0: psum: algorithm='rabenseifner' needs a group size that is a power of two, got 6"),
    ("recursive halving on 3", lambda x: _C.psum_scatter(x, "x", tiled=True, algorithm="recursive_halving"), 3,
     r"psum_scatter: algorithm='recursive_halving' needs a group size that is a power of two, got 3"),
    ("all_gather recursive doubling on 3", lambda x: _C.all_gather(x, "x", algorithm="recursive_doubling"), 3,
     r"all_gather: algorithm='recursive_doubling' needs a group size that is a power of two, got 3"),
]


@pytest.mark.parametrize("call, n, pattern", [c[1:] for c in BAD_ALGORITHMS], ids=[c[0] for c in BAD_ALGORITHMS])
def test_bad_algorithms_are_refused_by_name_and_rule(call, n, pattern):
    """An unknown algorithm lists the collective's own; one that needs a power-of-two group names the size."""
    with pytest.raises(sim.InvalidArgumentError, match=pattern):
        run({"x": n}, call, [np.arange(n * 2, dtype=np.int32) for _ in range(n)])


# ---------------------------------------------------------------------------------------------- against JAX


@pytest.mark.differential
@pytest.mark.parametrize("op", ["all_gather", "all_to_all", "ragged_all_to_all", "psum", "psum_scatter",
                                "all_gather_invariant"])
@settings(max_examples=15)
@given(data=st.data())
def test_the_new_algorithms_agree_with_jax(op, data, jax_oracle):
    """Real JAX (which has one algorithm) gives every algorithm's bytes: exactly for integers and for data
    that moves unchanged, within the stated bound for float sums."""
    case = data.draw(cases_.cases(op, algorithms=True), label="case")
    found = agreeing(case, run_jax(case, jax_oracle), cases_.run_simulator(case))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("algorithm, senders, hops", [
    ("direct", {0: 5}, 1), ("tree", {0: 3, 1: 2}, 2), ("ring", dict.fromkeys(range(5), 1), 5),
])
@pytest.mark.parametrize("source", [0, 4])
def test_pbroadcast_algorithms_send_as_their_records_say(algorithm, senders, hops, source):
    """pbroadcast over 6 members: 'direct' sends 5 messages from the source, 'tree' 5 in all (ranks below 2^k
    send in step k: the source 3, rank 1 two), 'ring' one per member but the last, each member receiving exactly
    once. On dedicated links a message takes a + nb and a member sends as soon as it holds the array, so the
    simulated time is `hops` of them: the longest chain of messages (the tree's deepest rank, 3 or 5, is two
    hops from the source). The records' closed forms and the cost model count one port per device, as the
    literature does: lg(p) steps for the tree, the same as the chain and the direct send otherwise."""
    p, latency_s, bandwidth = 6, 3e-6, 1e9
    network = sim.Network.fully_connected(latency_s=latency_s, bandwidth_bytes_per_s=bandwidth)
    xs = [np.full(256, d, np.float32) for d in range(p)]
    outcome = run({"x": p}, lambda x: _C.pbroadcast(x, "x", source, algorithm=algorithm), xs, network)
    sent = [m for m in outcome.trace.sent if m.src != m.dst]
    rank = lambda device: (device - source) % p
    assert {rank(d): n for d, n in _counts(m.src for m in sent).items()} == senders
    assert sorted(rank(m.dst) for m in sent) == list(range(1, p))
    record = collectives.definition("pbroadcast").algorithm(algorithm)
    form = record.closed_form(p, xs[0].nbytes, latency_s, 1 / bandwidth)
    step_s = latency_s + xs[0].nbytes / bandwidth
    assert outcome.end_time_s == pytest.approx(hops * step_s, rel=1e-9)
    assert form == pytest.approx({"direct": 1, "tree": math.ceil(math.log2(p)), "ring": p - 1}[algorithm] * step_s)
    members = tuple(range(source, p)) + tuple(range(source))
    mesh = sim.Mesh({"x": p}, network=network)
    assert _cost.cost_s(record, mesh, members, (p,), xs[0].nbytes) == pytest.approx(form, rel=1e-9)


def _counts(items: Any) -> dict:
    found: dict = {}
    for item in items:
        found[item] = found.get(item, 0) + 1
    return found


def test_pbroadcast_auto_picks_direct_for_latency_and_the_tree_for_bandwidth():
    """On dedicated links 'auto' takes 'direct' (one step, whatever the size); behind a switch, where the
    source's 15 messages share its one port, it takes 'direct' for a few bytes (one latency) and the tree for a
    large array (4 steps of one message per port beat 15 messages through one), and records the pick."""
    def pick(network: Any, floats: int) -> str:
        xs = [np.zeros(floats, np.float32) for _ in range(16)]
        return run({"x": 16}, lambda x: _C.pbroadcast(x, "x", 3, algorithm="auto"), xs, network).calls[0].algorithm
    assert pick(None, 1 << 16) == "direct"
    switch = sim.Network.switch(latency_s=1e-6, bandwidth_bytes_per_s=1e10)
    assert pick(switch, 2) == "direct"
    assert pick(switch, 1 << 16) == "tree"


# ---------------------------------------------------------------------------------------------- bidirectional


_BIDIRECTIONAL_PHASES = [  # (collective, body, phases of ceil((n-1)/2) steps)
    ("all_gather", lambda x: _C.all_gather(x, "x", tiled=True, algorithm="bidirectional_ring"), 1),
    ("psum_scatter", lambda x: _C.psum_scatter(x, "x", tiled=True, algorithm="bidirectional_ring"), 1),
    ("psum", lambda x: _C.psum(x, "x", algorithm="bidirectional_ring"), 2),
]


@pytest.mark.parametrize("op, body, phases", _BIDIRECTIONAL_PHASES, ids=[c[0] for c in _BIDIRECTIONAL_PHASES])
@pytest.mark.parametrize("n", range(2, 10))
def test_bidirectional_rings_take_half_the_hops(op, body, phases, n):
    """On a ring network, a tiny bidirectional_ring call takes ceil((n-1)/2) hop latencies per phase, odd and
    even n alike (not n - 1): each block or partial sum is relayed at most n // 2 hops, both ways at once;
    its results are the integers 'direct' gives."""
    latency = 1e-6
    network = sim.Network.ring(latency_s=latency, bandwidth_bytes_per_s=1e30)
    mesh = sim.Mesh({"x": n}, network=network, copy_cost=sim.CopyCost(bandwidth_bytes_per_s=1e30,
                                                                        run_overhead_s=0.0))
    xs = np.arange(n * n * 3, dtype=np.int32).reshape(n, n * 3) * 7 % 11
    spec = P("x")
    outcome = sim.shard_map(lambda x: body(x[0])[None], mesh=mesh, in_specs=(spec,), out_specs=spec,
                            check_vma=False).run(xs)
    assert max(call.exit_s for call in outcome.calls) == pytest.approx(phases * math.ceil((n - 1) / 2) * latency)
    sums = xs.sum(axis=0)
    want = {"all_gather": np.tile(xs.reshape(1, -1), (n, 1)), "psum": np.tile(sums, (n, 1)),
            "psum_scatter": sums.reshape(n, 3)}[op]
    assert np.array_equal(np.asarray(outcome.outputs).reshape(want.shape), want)
