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
