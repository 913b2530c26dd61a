"""psend / precv: one-sided sends and receives that pair up across devices, in programs with device-dependent
control flow; what they return (a token, an invariant result), their batching, and how a broken pairing is
reported. JAX's side (the jaxpr types, the bridge, ppermute as the oracle XLA:CPU leaves) is in test_bridge.py
and the registry's generated tests."""

from __future__ import annotations

import numpy as np
import pytest

import collectives
import sim
from sim import P

PIPE = [(0, 1), (1, 2), (2, 3)]


def _run(body, xs, mesh=None, check_vma=True):
    mesh = mesh or sim.Mesh({"i": len(xs)})
    f = sim.shard_map(lambda x: body(x[0])[None], mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=check_vma)
    return f.run(np.stack(xs))


def _like(x):
    return sim.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype)


def test_the_docstring_pipeline_gives_zeros_where_no_pair_ends():
    """Device d holds [d + 1]; psend then precv along PIPE gives [0], [1], [2], [3]."""
    run = _run(lambda x: collectives.precv(collectives.psend(x, "i", PIPE), _like(x), "i", PIPE),
               [np.array([d + 1.0]) for d in range(4)])
    assert run.outputs.tolist() == [[0.0], [1.0], [2.0], [3.0]]


def test_a_pipeline_with_device_dependent_control_flow_accumulates_stage_by_stage():
    """Stage d waits for stage d - 1's running sum, adds its own and sends it on: only the stages that send call
    psend, only those that receive call precv, with tokens from create_token(); the result is the prefix sum,
    and stage d cannot finish before the d messages before it have arrived."""
    def stage(x):
        d = int(collectives.axis_index("i"))
        if d > 0:
            x = collectives.precv(collectives.create_token(), _like(x), "i", [(d - 1, d)]) + x
        if d < 3:
            collectives.psend(x, "i", [(d, d + 1)])
        return x

    run = _run(stage, [np.array([d + 1.0, 10.0 * d]) for d in range(4)])
    assert run.outputs.tolist() == [[1, 0], [3, 10], [6, 30], [10, 60]]
    arrivals = sorted(m.arrival_time_s for m in run.trace)
    assert len(arrivals) == 3 and arrivals[0] < arrivals[1] < arrivals[2]


def test_repeated_pairs_match_in_order():
    """Two psends from 0 to 1 are taken by 1's two precvs in the order they were sent."""
    def body(x):
        first = collectives.psend(x, "i", [(0, 1)])
        collectives.psend(x * 10, "i", [(0, 1)])
        a = collectives.precv(first, _like(x), "i", [(0, 1)])
        b = collectives.precv(collectives.create_token(), _like(x), "i", [(0, 1)])
        return a + 100 * b

    run = _run(body, [np.array([1.0]), np.array([2.0])])
    assert run.outputs.tolist() == [[0.0], [1001.0]]


def test_psend_returns_tokens_and_precv_is_typed_invariant_as_in_jax():
    """psend of a pytree returns a pytree of Tokens recording the call; precv's result has no varying axes
    (JAX's abstract evaluation), and shard_map's out_specs then inserts a pvary, as JAX's jaxpr does."""
    seen = {}

    def body(x):
        tokens = collectives.psend({"a": x, "b": x}, "i", [(0, 1)])
        seen[int(collectives.axis_index("i"))] = tokens
        y = collectives.precv(tokens["a"], _like(x), "i", [(0, 1)])
        collectives.precv(tokens["b"], _like(x), "i", [(0, 1)])
        assert sim.vma_of(y) == frozenset()
        return y

    run = _run(body, [np.array([1.0]), np.array([2.0])])
    assert isinstance(seen[0]["a"], collectives.Token) and seen[0]["a"].perm == ((0, 1),)
    assert [eq.op for eq in run.program(1).equations if eq.op in ("precv", "pvary")][-1] == "pvary"


RING = [(0, 1), (1, 0)]


def _ring(body, x, check_vma=True):
    return sim.shard_map(body, mesh=sim.Mesh({"i": 2}), in_specs=P("i"), out_specs=P("i"), check_vma=check_vma)(x)


@pytest.mark.parametrize("check_vma", [True, False])
def test_precv_takes_the_pytree_of_shapes_of_a_psend_of_a_pytree(check_vma):
    """precv of a pytree of ShapeDtypeStructs (dict, tuple, list, nested) with psend's pytree of tokens, or
    with one token for every leaf, gives the pytree of what psend sent, leaf by leaf as ppermute moves it; the
    dicts' leaves pair by key whatever order each dict was built in (JAX's order: keys sorted)."""
    def body(x):
        sent = {"w": x, "b": 2 * x, "rest": (3 * x, [x[:1]])}
        tokens = collectives.psend(sent, "i", RING)
        like = _like(x)
        wanted = {"rest": (like, [_like(x[:1])]), "b": like, "w": like}  # built in another order
        got = collectives.precv(tokens, wanted, "i", RING)
        assert list(got) == ["rest", "b", "w"]  # out_shape's structure
        moved = collectives.ppermute(sent, "i", RING)
        for mine, theirs in zip(sim.leaves(got), sim.leaves(moved)):
            assert mine.tobytes() == theirs.tobytes()
        return got["w"], got["b"], got["rest"][0], got["rest"][1][0]

    w, b, r, first = _ring(body, np.arange(4.0), check_vma)
    assert (w.tolist(), b.tolist(), r.tolist(), first.tolist()) == ([2, 3, 0, 1], [4, 6, 0, 2], [6, 9, 0, 3], [2, 0])


def test_precv_of_a_pytree_takes_one_token_for_every_leaf():
    """One token (create_token(), or a psend's) stands for every leaf of precv's pytree of shapes."""
    def body(x):
        collectives.psend([x, 2 * x], "i", RING)
        return tuple(collectives.precv(collectives.create_token(), [_like(x), _like(x)], "i", RING))

    a, b = _ring(body, np.arange(4.0), check_vma=False)
    assert (a.tolist(), b.tolist()) == ([2, 3, 0, 1], [4, 6, 0, 2])


def test_precv_refuses_a_pytree_of_tokens_of_another_structure():
    """Tokens whose pytree is not out_shape's, and a leaf of out_shape without a shape and a dtype, are refused
    naming the device, the argument and the rule."""
    def tokens_differ(x):
        tokens = collectives.psend({"a": x}, "i", RING)
        return collectives.precv(tokens, {"a": _like(x), "b": _like(x)}, "i", RING)["a"]

    with pytest.raises(sim.InvalidArgumentError, match=r"device 0: precv: token=\{'a': Token\(.*\)\} must be one "
                                                       r"Token or a pytree of Tokens of the structure of out_shape="):
        _ring(tokens_differ, np.arange(4.0), check_vma=False)

    def shape_tuple(x):
        return collectives.precv(collectives.psend(x, "i", RING), (2,), "i", RING)

    with pytest.raises(sim.InvalidTypeError, match=r"device 0: precv: out_shape=\(2,\): its leaf 2 must have a "
                                                   r"shape and a dtype \(a ShapeDtypeStruct; out_shape may be a "
                                                   r"pytree of them\)"):
        _ring(shape_tuple, np.arange(4.0), check_vma=False)


def test_vmap_of_psend_sends_the_whole_batch_in_one_message():
    """psend's batching rule (JAX's ppermute batcher) keeps the batch axis: one message carries every entry, and
    a precv of the batched shape equals a loop of single calls."""
    def body(x):
        token = collectives.vmap(collectives.psend)(x, "i", PIPE)
        batched = collectives.precv(token, _like(x), "i", PIPE)
        looped = [collectives.precv(collectives.psend(x[k], "i", PIPE), _like(x[k]), "i", PIPE) for k in range(2)]
        return np.stack([batched, np.stack(looped)])

    run = _run(body, [np.arange(6.0).reshape(2, 3) + 10 * d for d in range(4)], check_vma=False)
    batched, looped = run.outputs[:, 0], run.outputs[:, 1]
    assert batched.tobytes() == looped.tobytes() and batched[1].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_an_unreceived_send_and_a_waiting_receive_are_reported_by_both_devices():
    """A deadlock with a precv no psend reaches names the waiting receiver and the sender it waits for, in a
    structured list (`unmatched`) beside the devices' activities."""
    f = sim.shard_map(lambda x: collectives.precv(collectives.create_token(), _like(x[0]), "i", [(1, 0)])[None],
                      mesh=sim.Mesh({"i": 2}), in_specs=P("i"), out_specs=P("i"))
    with pytest.raises(sim.ProtocolError, match="deadlock") as caught:
        f(np.ones((2, 1)))
    assert caught.value.unmatched == ["device 0 waits for a message from device 1 on 'psend #0 from device 1 to "
                                      "device 0 over devices [0, 1]' that device 1 never sent"]
    assert str(caught.value.activities[0]) == "waits in precv (call #0 over devices [0])"


@pytest.mark.parametrize("op", ["psend", "precv"])
def test_a_bad_perm_is_reported_under_the_name_of_the_call(op):
    """A destination outside the axis names psend or precv (the call the user wrote), the pair and the rule."""
    bad = [(0, 5)]
    def body(x):
        if op == "psend":
            return collectives.psend(x, "i", bad)
        return collectives.precv(collectives.create_token(), _like(x), "i", bad)
    with pytest.raises(sim.InvalidArgumentError, match=rf"device 0: {op}: perm\[0\]=\(0, 5\): destination 5 must "
                                                       r"be in \[-2, 2\) for axis_name='i' of size 2"):
        _run(lambda x: body(x) if op == "precv" else (body(x), x)[1], [np.zeros(1), np.zeros(1)])
