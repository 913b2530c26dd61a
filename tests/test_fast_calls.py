"""A call's per-call work done once for all its members equals the per-member work bit for bit: ppermute's
row-major path against pack_slice / unpack_into, memories finding a program's value by the view it came from
against finding it by address. Each comparison also runs a deliberately wrong shortcut to show it can fail."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import collectives
import collectives._ppermute as ppermute_module
import sim
from layouts import Layout
from sim import P
from sim.memory._buffer import address_of
from sim.memory._memory import LocalMemory


def _run(n: int, perms: list[list[tuple[int, int]]], x: np.ndarray, out_layout: Layout | None,
         costs: sim.Costs | None) -> tuple:
    """Output bytes, trace JSON, end time, call records and device 0's program of one ppermute per perm."""
    def body(v):
        for perm in perms:
            v = collectives.ppermute(v, "x", perm, out_layout=out_layout)
        return v

    mesh = sim.Mesh({"x": n}) if costs is None else sim.Mesh({"x": n}, network=sim.Network(1e-6, 10e9, costs=costs))
    run = sim.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=True).run(x)
    calls = [(c.device, c.collective, c.call, c.members, c.enter_s, c.met_s, c.exit_s, c.algorithm)
             for c in run.simulation.calls]
    return (run.outputs.tobytes(), json.dumps(run.trace.to_json()).encode(), run.end_time_s, calls,
            str(run.simulation.programs[0]))


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every ppermute call take the per-member pack_slice / unpack_into path."""
    facts = ppermute_module._facts
    monkeypatch.setattr(ppermute_module, "_facts", lambda *a: facts(*a)[:2] + (False,))


@st.composite
def _cases(draw):
    n = draw(st.integers(1, 6))
    perms = []
    for _ in range(draw(st.integers(1, 3))):
        sources = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
        targets = draw(st.permutations(range(n)))[: len(sources)]
        perms.append(list(zip(sources, targets)))
    shape = (n * draw(st.integers(1, 3)),) + tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    dtype = draw(st.sampled_from(["int8", "int32", "float16", "float32", "float64"]))
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    x = np.frombuffer(draw(st.binary(min_size=size, max_size=size)), dtype).reshape(shape).copy()
    rank = len(shape)
    out_layout = draw(st.sampled_from([None, Layout(tuple(range(rank))), Layout(tuple(reversed(range(rank))))]))
    costs = draw(st.sampled_from([None, sim.Costs(launch_s=1e-6, per_message_s=2e-7)]))
    return n, perms, x, out_layout, costs


@given(case=_cases())
def test_ppermute_row_major_path_equals_pack_and_unpack(case):
    """Programs of several ppermutes (partial permutations, any dtype, row- or column-major results, with
    and without launch and issue costs) give the same result bytes, trace, end time, call records and
    program record whether row-major calls send straight from memory or every call packs and unpacks."""
    fast = _run(*case)
    with pytest.MonkeyPatch.context() as patch:
        _general(patch)
        slow = _run(*case)
    assert fast == slow


def test_ppermute_comparison_can_fail(monkeypatch):
    """A shortcut taken where it does not apply (a column-major result written as if row-major) is told
    apart from the per-member path."""
    case = (4, [[(0, 1), (1, 2), (2, 3), (3, 0)]], np.arange(24.0).reshape(8, 3), Layout((1, 0)), None)
    honest = _run(*case)
    facts = ppermute_module._facts
    monkeypatch.setattr(ppermute_module, "_facts", lambda *a: facts(*a)[:2] + (True,))
    wrong = _run(*case)
    assert honest[0] != wrong[0] or honest[1] != wrong[1]


def _by_address(memory: LocalMemory, array: np.ndarray) -> sim.Buffer | None:
    """`LocalMemory.find` as the address alone tells it: the buffer at the array's first byte, if the
    array is its whole view."""
    if not isinstance(array, np.ndarray) or array.size == 0:
        return None
    buffer = memory._by_address.get(address_of(array))
    if buffer is None or buffer.shape != array.shape or buffer.dtype != array.dtype:
        return None
    return buffer if memory.view(buffer).strides == array.strides else None


_VIEWS = {
    "whole": lambda v: v,
    "varying": lambda v: v.view(sim.Varying),
    "plain copy of a varying": lambda v: np.asarray(v.view(sim.Varying)),
    "view of a view": lambda v: v.view().view(),
    "first rows": lambda v: v[: max(1, len(v) // 2)],
    "last rows": lambda v: v[len(v) // 2:],
    "reversed": lambda v: v[::-1],
    "transposed": lambda v: v.T,
    "reshaped": lambda v: v.reshape(-1),
    "copy": lambda v: v.copy(),
}


@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), order=st.sampled_from(["row", "column"]),
       how=st.sampled_from(sorted(_VIEWS)), others=st.integers(0, 3))
def test_find_by_view_equals_find_by_address(shape, order, how, others):
    """A memory finds the buffer of an array made from a buffer's view (whole, sliced, reversed, transposed,
    reshaped, wrapped as a program value, copied) exactly when the address says the array is that whole
    buffer."""
    memory = LocalMemory(0)
    rank = len(shape)
    layout = Layout(tuple(range(rank)) if order == "row" else tuple(reversed(range(rank))))
    for k in range(others):
        memory.alloc(np.int16, (k + 1,))
    buffer = memory.alloc(np.float32, tuple(shape), layout)
    array = _VIEWS[how](memory.view(buffer))
    assert memory.find(array) is _by_address(memory, array)


def test_find_comparison_can_fail():
    """A finder that ignores strides takes a square buffer's transpose for the buffer; the address rule
    does not."""
    memory = LocalMemory(0)
    buffer = memory.alloc(np.float32, (3, 3))
    transposed = memory.view(buffer).T
    careless = memory._owners[id(memory.view(buffer))]  # what a strides-blind lookup would answer
    assert _by_address(memory, transposed) is None and careless is buffer
    assert memory.find(transposed) is None
