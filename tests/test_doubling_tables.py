"""Recursive doubling and halving as rows (`collectives._doubling_rows`: a step's copies and folds for all
members at once) give the bytes, trace (every column), call records and times of the loop that makes one
Python call per message (`collectives._ring_steps.PerMember`) and of the member-by-member protocol, on random
programs, meshes, networks, dtypes and uneven or empty chunks; the comparison is shown to fail, and the rows
are shown to run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from row_programs import case_axes, run_case

import collectives
import collectives._doubling_loops as doubling_loops
import collectives._doubling_rows as doubling_rows
import collectives._ring_steps
import layouts
import sim
from sim import P
from sim.memory._memory import LocalMemory
from sim.memory._meter import MemoryMeter

_CALLS = (("all_gather", "recursive_doubling"), ("psum", "recursive_doubling"), ("psum", "rabenseifner"),
          ("pmax", "recursive_doubling"), ("pmin", "rabenseifner"), ("psum_scatter", "recursive_halving"))
_SHAPES = ((2,), (4,), (8,), (16,), (2, 2), (2, 4), (4, 2), (2, 8))


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
    if kind == "hierarchical" and len(shape) == 2:
        return sim.Network.hierarchical(shape[-1], n // shape[-1], 1e-6, 8e9, 5e-6, 1e9)
    return sim.Network()


def _call(op: str, algorithm: str, x, axis_name, tiled: bool):
    if op == "all_gather":
        return collectives.all_gather(x, axis_name, tiled=tiled, algorithm=algorithm)
    if op == "psum_scatter":
        whole = np.concatenate([np.asarray(x).reshape(-1)] * collectives.axis_size(axis_name))  # scatters evenly
        return collectives.psum_scatter(whole, axis_name, tiled=True, algorithm=algorithm)
    return getattr(collectives, op)(x, axis_name, algorithm=algorithm)


def _program(calls: list[tuple], axes: tuple[str, ...]):
    def body(x):
        out = x
        for (op, algorithm), which, tiled in calls:
            axis_name = axes if which == "all" else axes[which % len(axes)]
            out = _call(op, algorithm, x, axis_name, tiled)
            x = x + out.reshape(-1)[:x.size].reshape(x.shape).astype(x.dtype)
        return x, out
    return body


def _run(case) -> tuple:
    """Output bytes, trace JSON, call records and end time of a case."""
    shape, network, calls, x = case
    return run_case(shape, _network(network, shape), _program(calls, case_axes(shape)), x)


def _per_member(case) -> tuple:
    """The case with one Python call per message (`PerMember`)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(doubling_rows, "by_rows", lambda *a: False)
        return _run(case)


def _member_by_member(case) -> tuple:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(collectives._ring_steps, "by_tables", lambda *a: False)
        return _run(case)


def _by_runs(case) -> tuple:
    """The case as rows, the folds by the indices of every run (never blocks of rows by slices)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(doubling_rows, "grid", lambda rows, size: None)
        return _run(case)


def _apart(case) -> tuple:
    """The case as rows, but every member's buffers taken as apart (the writes one message at a time)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(doubling_rows.Rows, "of", staticmethod(lambda *a, **k: None))
        return _run(case)


@st.composite
def _cases(draw):
    shape = draw(st.sampled_from(_SHAPES))
    network = draw(st.sampled_from(["default", "switch", "ring", "torus", "store_and_forward", "costs",
                                    "hierarchical"]))
    calls = draw(st.lists(st.tuples(st.sampled_from(_CALLS), st.sampled_from([0, 1, "all"]), st.booleans()),
                          min_size=1, max_size=3))
    n = int(np.prod(shape))
    block = (draw(st.sampled_from([1, 2, 3, 5, 8])),) + tuple(draw(st.lists(st.integers(1, 3), max_size=1)))
    dtype = draw(st.sampled_from(["int8", "int32", "float32", "float64", "bfloat16"]))
    x = _values(draw, (n * block[0],) + block[1:], dtype)
    return shape, network, calls, x


def _values(draw, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Random bits of `dtype`: floats with NaNs, infinities and subnormals among them (both paths fold the
    same operands in the same order, so even NaN payloads must come out alike)."""
    kind = layouts.BFLOAT16 if dtype == "bfloat16" else np.dtype(dtype)
    size = int(np.prod(shape)) * kind.itemsize
    raw = draw(st.binary(min_size=size, max_size=size))
    return np.frombuffer(raw, kind).reshape(shape).copy()


@settings(max_examples=100)
@given(case=_cases())
def test_rows_equal_per_member(case):
    """Recursive doubling, Rabenseifner and recursive halving give the same bytes, trace (every column, in
    order), call records and end time as rows (folded by blocks of rows or by the indices of every run), as
    rows held apart, and one Python call per message."""
    rows = _run(case)
    assert rows == _per_member(case)
    assert rows == _apart(case)
    assert rows == _by_runs(case)


@settings(max_examples=100)
@given(case=_cases())
def test_rows_equal_member_by_member(case):
    """The same against the member-by-member protocol (no step tables at all)."""
    assert _run(case) == _member_by_member(case)


def test_rows_comparison_can_fail(monkeypatch):
    """Rows that fold a partner's run into nothing (the lower run alone) are told apart from the per-message
    loop, and so are copies that skip the last step."""
    case = ((8,), "switch", [(("psum", "rabenseifner"), 0, True)], np.arange(24, dtype=np.int32))
    slow = _per_member(case)
    monkeypatch.setattr(doubling_rows, "combine", lambda reduction, low, high: low)
    assert _run(case)[0] != slow[0]
    monkeypatch.undo()
    case = ((8,), "switch", [(("all_gather", "recursive_doubling"), 0, True)], np.arange(8.0))
    slow = _per_member(case)
    real = doubling_rows.Copies.move
    monkeypatch.setattr(doubling_rows.Copies, "move", lambda self, receivers, senders, steps, ways: real(
        self, receivers[steps < 2], senders[steps < 2], steps[steps < 2], ways[steps < 2]))
    assert _run(case)[0] != slow[0]


@pytest.mark.parametrize("op", ["psum", "pmax"])
def test_scalar_all_reduce_equals_per_member(op):
    """A scalar operand's all-reduce by recursive doubling (its result a buffer apart from the rows) gives
    the per-message loop's bytes, trace and times."""
    def run(by_rows: bool) -> tuple:
        with pytest.MonkeyPatch.context() as patch:
            if not by_rows:
                patch.setattr(doubling_rows, "by_rows", lambda *a: False)
            f = sim.shard_map(lambda v: getattr(collectives, op)(v[0], "x", algorithm="recursive_doubling"),
                              mesh=sim.Mesh({"x": 8}), in_specs=P("x"), out_specs=P(), check_vma=False)
            run = f.run(np.arange(8, dtype=np.int32) * 3 - 7)
            return np.asarray(run.outputs).tobytes(), json.dumps(run.trace.to_json()), run.end_time_s
    assert run(True) == run(False)


@pytest.mark.parametrize(("op", "algorithm"), _CALLS)
@pytest.mark.parametrize("per_member", [5, 8])
def test_rows_are_used(op, algorithm, per_member, monkeypatch):
    """Each loop really runs as rows of one array (else the equalities above are vacuous): every step's
    writes go through whole-step numpy operations, none one message at a time; the folds take blocks of
    rows by slices where every run of a step is of one length (8 elements over 8 members)."""
    used: list[str] = []
    for cls, name in ((doubling_rows.Folds, "_fold_apart"), (doubling_rows.Folds, "_fold_runs"),
                      (doubling_rows.Folds, "_fold_blocks"), (doubling_rows.Copies, "move")):
        real = getattr(cls, name)
        monkeypatch.setattr(cls, name, lambda *a, real=real, name=name: used.append(name) or real(*a))
    _run(((8,), "switch", [((op, algorithm), 0, True)], np.arange(8 * per_member, dtype=np.float32)))
    assert used and "_fold_apart" not in used
    if op == "all_gather":
        return
    if per_member == 8:  # chunks of one size: every step by blocks of rows
        assert "_fold_blocks" in used and "_fold_runs" not in used
    elif algorithm == "rabenseifner":  # 5 elements in 8 chunks: runs of several lengths
        assert "_fold_runs" in used


def test_rows_charge_what_per_message_allocates(monkeypatch):
    """Each member's buffers of partial results are charged to its own memory: every device's memory is
    charged the same bytes as rows as by one Python call per message, which allocates each partial result
    on its own."""
    def charged(by_rows: bool) -> dict[int, int]:
        totals: dict[int, int] = {}
        real = MemoryMeter.charge
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(MemoryMeter, "charge", lambda self, device, what, dtype, shape, size: (
                totals.__setitem__(device, totals.get(device, 0) + size), real(self, device, what, dtype, shape, size)))
            # every allocation through `MemoryMeter.charge` (alloc_view charges the meter inline)
            patch.setattr(LocalMemory, "alloc_view", lambda self, dtype, shape: self.view(self.alloc(dtype, shape)))
            if not by_rows:
                patch.setattr(doubling_rows, "by_rows", lambda *a: False)
            body = lambda v: (collectives.psum(v, "x", algorithm="rabenseifner"),
                              collectives.psum(v, "x", algorithm="recursive_doubling"),
                              collectives.psum_scatter(np.concatenate([v] * 8), "x", tiled=True,
                                                       algorithm="recursive_halving"))
            f = sim.shard_map(body, mesh=sim.Mesh({"x": 8}), in_specs=P("x"), out_specs=(P("x"),) * 3,
                              check_vma=False)
            f.run(np.arange(8 * 13, dtype=np.float32))
        return totals
    rows = charged(True)
    assert rows == charged(False)
    assert len(rows) == 8 and min(rows.values()) > 0


def test_joined_details_keep_the_messages_order():
    """A table mixing the two loops of a `Joined` loop (members at different phases posting at one instant)
    gives each message its own loop's detail, in the messages' order."""
    class Part:
        def __init__(self, name: str) -> None:
            self.name = name

        def details(self, positions, steps, ways):
            return {"phase": [self.name] * len(steps), "step": steps.tolist(), "chunks": positions.tolist()}

    loop = doubling_loops.Joined.__new__(doubling_loops.Joined)
    loop.parts, loop.cut = (Part("halving"), Part("doubling")), 3
    positions, steps = np.array([5, 6, 7, 8]), np.array([3, 2, 4, 0])
    assert loop.details(positions, steps, np.zeros(4, np.int64)) == {
        "phase": ["doubling", "halving", "doubling", "halving"], "step": [0, 2, 1, 0], "chunks": [5, 6, 7, 8]}
