"""What a run of many collective calls keeps for Python's cyclic garbage collector to scan after it (a run
pauses the collector, so the first collection after it walks every object the run made and kept): per device
and call, the program's variable, its equation and one `(var,)` tuple, the result's `Buffer` and the
`CallRecord`, each one object (slotted records, no `__dict__` beside them); an equation that reads one
variable shares the tuple of the equation that made it. A record class given a `__dict__` again is caught."""

from __future__ import annotations

import collections
import dataclasses
import gc
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import sim
from sim import P
from sim._frozen import quick_init
from sim.record import _equations

_KEPT = ("Var", "Equation", "tuple", "Buffer", "CallRecord", "dict")


def _ring(n: int, calls: int, check_vma: bool) -> sim.ShardMapped:
    perm = [(i, (i + 1) % n) for i in range(n)]

    def body(v):
        for _ in range(calls):
            v = collectives.ppermute(v, "x", perm)
        return v

    return sim.shard_map(body, mesh=sim.Mesh({"x": n}), in_specs=P("x"), out_specs=P("x"), check_vma=check_vma)


def _kept(n: int, calls: int) -> collections.Counter:
    """The objects of each kind that one run of the ring program keeps (tracked by the collector)."""
    program, x = _ring(n, calls, False), np.arange(n, dtype=np.float32)
    program.run(x)  # what is made once per process is made
    program.last_run = None
    gc.collect()
    before = collections.Counter(type(o).__name__ for o in gc.get_objects())
    run = program.run(x)
    after = collections.Counter(type(o).__name__ for o in gc.get_objects())
    assert run.outputs.tobytes() == np.roll(x, calls).tobytes()
    return after - before


def _kept_per_call(n: int) -> dict[str, float]:
    """The objects of the kinds in `_KEPT` that each call of each device adds to what a run keeps: a run of
    28 calls against one of 4."""
    few, many = _kept(n, 4), _kept(n, 28)
    return {kind: (many[kind] - few[kind]) / (n * 24) for kind in _KEPT}


def test_a_call_keeps_five_objects_per_device() -> None:
    """Per device and call a run keeps one variable, one equation, one tuple, one buffer and one call record,
    and no `__dict__` of any of them."""
    kept = _kept_per_call(16)
    for kind in ("Var", "Equation", "tuple", "Buffer", "CallRecord"):
        assert kept[kind] == pytest.approx(1.0, abs=0.1), (kind, kept)
    assert kept["dict"] < 0.25, kept  # a few per device and run, not four per call


def test_a_record_with_a_dict_again_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The count tells when the program's variables carry a `__dict__` again (a dataclass without slots)."""
    @quick_init  # (which fills the instance's `__dict__`)
    @dataclasses.dataclass(frozen=True, eq=False)
    class Var:  # the program's variable as a dataclass without slots
        name: str
        dtype: np.dtype
        shape: tuple
        vma: frozenset

    monkeypatch.setattr(_equations, "Var", Var)
    kept = _kept_per_call(16)
    assert kept["dict"] >= 1.0, kept  # one more per call: each variable's


@settings(max_examples=12, deadline=None)
@given(n=st.integers(2, 6), calls=st.integers(1, 5), check_vma=st.booleans())
def test_equations_share_the_tuple_of_the_variable_they_read(n: int, calls: int, check_vma: bool) -> None:
    """Each ppermute equation reads the variable the equation before it made, through that equation's own
    `outputs` tuple; the program prints and compares as one made with fresh tuples does."""
    program, x = _ring(n, calls, check_vma), np.arange(n, dtype=np.float32)
    run = program.run(x)
    for record in run.programs:
        equations = [e for e in record.equations if e.op == "ppermute"]
        assert len(equations) == calls
        for before, after in itertools.pairwise(equations):
            assert after.inputs is before.outputs
        fresh = [dataclasses.replace(e, inputs=tuple(e.inputs), outputs=tuple(e.outputs))
                 for e in record.equations]
        assert [str(e) for e in fresh] == [str(e) for e in record.equations]
