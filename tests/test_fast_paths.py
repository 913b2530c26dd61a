"""The fast paths equal the general ones bit for bit: row exchanges against message-by-message protocols,
the vectorised fold against the element loop. Each comparison also runs a deliberately wrong fast path to
show that it can fail."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from row_programs import row_calls, run_bytes

import collectives
import collectives._all_gather
import collectives._all_to_all
import collectives._allreduce
import sim
from collectives._arithmetic import combine, fold, identity

_FAST = {"all_to_all": collectives._all_to_all, "all_gather": collectives._all_gather,
         "psum": collectives._allreduce}
_SWITCH = {"all_to_all": "_rows_in_place", "all_gather": "_rows_in_place", "psum": "_in_place"}


@given(case=row_calls())
def test_row_exchanges_equal_message_by_message(case):
    """all_to_all, all_gather and the direct psum give the same bytes, trace and time whether members
    exchange whole rows or one message at a time."""
    op, n, tiled, x = case
    fast = run_bytes(op, n, x, tiled)
    module = _FAST[op]
    original = getattr(module, _SWITCH[op])
    setattr(module, _SWITCH[op], lambda *a: False)
    try:
        slow = run_bytes(op, n, x, tiled)
    finally:
        setattr(module, _SWITCH[op], original)
    assert fast == slow


def test_row_exchange_comparison_can_fail(monkeypatch):
    """A row exchange that puts blocks in the wrong order is told apart from the message-by-message run."""
    x = np.arange(16.0)
    honest = run_bytes("all_to_all", 4, x, True)
    real_send_split = sim.Port.send_split
    monkeypatch.setattr(sim.Port, "send_split", lambda self, source, **d:
                        real_send_split(self, np.ascontiguousarray(source[::-1]), **d))
    assert run_bytes("all_to_all", 4, x, True)[0] != honest[0]


def _loop(reduction: str, terms: np.ndarray) -> np.ndarray:
    acc = identity(reduction, terms.dtype)
    for term in terms:
        acc = combine(reduction, acc, term)
    return np.broadcast_to(acc, terms.shape[1:])


_SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-310, 1e38, -1e308, 1.0, -3.5]


@st.composite
def _terms(draw):
    dtype = np.dtype(draw(st.sampled_from(["int8", "uint8", "int32", "int64", "float16", "float32", "float64"])))
    shape = (draw(st.integers(1, 9)),) + tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    if draw(st.booleans()):  # finite terms wide enough to be added one after another (`_arithmetic._WIDE_TERM`)
        shape = shape[:1] + (draw(st.integers(64, 70)),)
        if dtype.kind == "f":
            rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
            with np.errstate(all="ignore"):
                return (rng.standard_normal(shape) * 10.0 ** draw(st.integers(-8, 8))).astype(dtype)
    size = int(np.prod(shape))
    if dtype.kind == "f" and draw(st.booleans()):
        with np.errstate(all="ignore"):
            values = np.array(draw(st.lists(st.sampled_from(_SPECIAL), min_size=size, max_size=size)), dtype)
        return values.reshape(shape)
    raw = draw(st.binary(min_size=size * dtype.itemsize, max_size=size * dtype.itemsize))
    return np.frombuffer(raw, dtype).reshape(shape)


@given(reduction=st.sampled_from(["sum", "max", "min"]), terms=_terms())
def test_fold_equals_the_element_loop(reduction, terms):
    """The vectorised fold returns the loop's bytes for every dtype, special value and bit pattern."""
    with np.errstate(all="ignore"):
        assert np.asarray(fold(reduction, terms)).tobytes() == np.ascontiguousarray(_loop(reduction, terms)).tobytes()


def test_fold_comparison_can_fail():
    """A pairwise sum (numpy's own float sum order) differs from the loop on some input: the test above
    would catch a fold that reordered additions."""
    terms = np.array([[1e8], [1.0], [-1e8], [1.0]] * 2, np.float32)
    assert np.add.reduce(terms[[0, 2, 1, 3, 4, 6, 5, 7]], axis=0).tobytes() != _loop("sum", terms).tobytes()
    assert fold("sum", terms).tobytes() == _loop("sum", terms).tobytes()


@pytest.mark.parametrize("op", sorted(_FAST))
def test_row_exchanges_are_used(op):
    """The fast path really runs for row-major operands along axis 0 (else the equality above is vacuous)."""
    module = _FAST[op]
    calls = []
    original = getattr(module, _SWITCH[op])
    setattr(module, _SWITCH[op], lambda *a: calls.append(original(*a)) or calls[-1])
    try:
        run_bytes(op, 4, np.arange(16.0), True)
    finally:
        setattr(module, _SWITCH[op], original)
    assert calls and all(calls)


def test_members_with_one_column_fold_it_once(monkeypatch):
    """In a direct psum over 16 devices every member reads the same column (one stack of the rows): it is
    folded once for the call, and every member still gets the sum of all 16 terms."""
    folds = []
    monkeypatch.setattr(collectives._allreduce, "fold", lambda *a: folds.append(a) or fold(*a))
    mesh = sim.Mesh({"x": 16})
    f = sim.shard_map(lambda v: collectives.psum(v * 2, "x"), mesh=mesh, in_specs=sim.P("x"), out_specs=sim.P("x"))
    out = f(np.arange(16 * 3, dtype=np.float32))
    assert np.array_equal(out.reshape(16, 3), np.tile(2 * np.arange(48, dtype=np.float32).reshape(16, 3).sum(0),
                                                      (16, 1)))
    assert len(folds) == 1
