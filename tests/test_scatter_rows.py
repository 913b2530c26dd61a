"""The direct psum_scatter as one row and one column per member (`collectives._psum_scatter._direct_rows`)
gives the same bytes, trace, call records and end time as one message and one fold per chunk, on random
inputs of any dtype and networks; the row path is shown to run and the comparison to fail."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_steps import _network

import collectives
import sim
from sim import P


@st.composite
def _scatters(draw):
    """(devices, global input, tiled) of a direct psum_scatter along dimension 0, any dtype and trailing shape."""
    n = draw(st.integers(1, 8))
    tiled = draw(st.booleans())
    rows = n * (n * draw(st.integers(1, 2)) if tiled else n)
    shape = (rows,) + tuple(draw(st.lists(st.integers(0, 3), min_size=0 if tiled else 1, max_size=2)))
    dtype = draw(st.sampled_from(["int8", "int32", "float16", "float32", "float64"]))
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    x = np.frombuffer(draw(st.binary(min_size=size, max_size=size)), dtype).reshape(shape).copy()
    return n, x, tiled


def _scatter_run(n: int, x: np.ndarray, tiled: bool, network: str = "default") -> tuple:
    f = sim.shard_map(lambda v: collectives.psum_scatter(v, "x", tiled=tiled), mesh=sim.Mesh(
        {"x": n}, network=_network(network, (n,))), in_specs=P("x"), out_specs=P("x"), check_vma=False)
    run = f.run(x)
    return (np.asarray(run.outputs).tobytes(), json.dumps(run.trace.to_json()).encode(), [str(c) for c in run.calls],
            run.end_time_s)


def _scatter_by_messages(n: int, x: np.ndarray, tiled: bool, network: str = "default") -> tuple:
    import collectives._psum_scatter as psum_scatter

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(psum_scatter, "_in_place", lambda *a: False)
        return _scatter_run(n, x, tiled, network)


@settings(max_examples=60)
@given(case=_scatters(), network=st.sampled_from(["default", "switch", "costs"]))
def test_direct_scatter_rows_equal_message_by_message(case, network):
    """The direct psum_scatter as one row and one column per member gives the same bytes, trace (every
    column), call records and end time as one message and one fold per chunk."""
    n, x, tiled = case
    assert _scatter_run(n, x, tiled, network) == _scatter_by_messages(n, x, tiled, network)


def test_direct_scatter_rows_are_used_and_can_fail(monkeypatch):
    """The row path runs (else the equality above is vacuous), and one that folds a member's own chunk
    twice is told apart from the message-by-message run."""
    from collectives import _psum_scatter as psum_scatter

    x = np.arange(32.0)
    slow = _scatter_by_messages(4, x, True)
    rows = []
    real = psum_scatter._direct_rows
    monkeypatch.setattr(psum_scatter, "_direct_rows", lambda *a: rows.append(1) or real(*a))
    assert _scatter_run(4, x, True) == slow and rows
    monkeypatch.setattr(psum_scatter, "fold", lambda reduction, terms: terms.sum(0) + terms[0])
    assert _scatter_run(4, x, True)[0] != slow[0]
