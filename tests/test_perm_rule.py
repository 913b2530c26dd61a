"""ppermute's perm rule: checked as one array for plain ints, pair by pair otherwise, and once per run for the
equal permutations every device builds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import sim
from sim import P


def _perm_rule(perm: list, size: int) -> tuple | str:
    """The rule of `ppermute`'s perm, pair by pair: the pairs taken modulo `size`, or the first broken rule."""
    if not all(isinstance(p, tuple) and len(p) == 2 and all(type(i) is int or isinstance(i, np.integer)
                                                            for i in p) for p in perm):
        return "must be a sequence of (source, destination) pairs of ints"
    seen: dict[str, dict[int, int]] = {"source": {}, "destination": {}}
    for k, pair in enumerate(perm):
        for role, index in zip(("source", "destination"), pair):
            if not -size <= index < size:
                return f"perm[{k}]=({pair[0]}, {pair[1]}): {role} {index} must be in [{-size}, {size})"
            first = seen[role].setdefault(int(index) % size, k)
            if first != k:
                return f"perm[{k}]=({pair[0]}, {pair[1]}): {role} {int(index) % size} is already the {role}"
    return tuple((int(s) % size, int(d) % size) for s, d in perm)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.lists(st.tuples(st.one_of(st.integers(-8, 8), st.booleans(),
                                                       st.integers(-8, 8).map(np.int32)), st.integers(-8, 8)),
                                   max_size=8))
def test_a_permutation_checked_as_one_array_follows_the_rule_pair_by_pair(size, perm):
    """`check_perm` (whole-array checks for plain ints, pair by pair otherwise) gives what the rule read pair
    by pair gives: the same pairs, or an error naming the first offending pair and the rule it breaks."""
    from collectives._ppermute import check_perm

    expected = _perm_rule(perm, size)
    if isinstance(expected, tuple):
        assert check_perm(0, perm, size, "x") == expected
    else:
        with pytest.raises(sim.MeshError) as caught:
            check_perm(0, perm, size, "x")
        assert expected in str(caught.value)


def test_equal_permutations_each_device_builds_are_checked_once(monkeypatch):
    """Devices that each build their own, equal, permutation (as a body written the natural way does) share
    one checked permutation: it is checked once per run, not once per device."""
    from collectives import _ppermute

    checked = []
    check = _ppermute.check_perm
    monkeypatch.setattr(_ppermute, "check_perm", lambda *a, **k: checked.append(a) or check(*a, **k))
    mesh = sim.Mesh({"x": 8})
    f = sim.shard_map(lambda v: collectives.ppermute(v, "x", [(i, (i + 1) % 8) for i in range(8)]), mesh=mesh,
                      in_specs=P("x"), out_specs=P("x"))
    assert f(np.arange(8.0)).tolist() == [7.0, 0, 1, 2, 3, 4, 5, 6]
    assert len(checked) == 1
