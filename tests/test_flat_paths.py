"""A mapped function called with a flat tuple of arrays and returning a tuple of arrays under one out_specs entry
(as the JAX bridge calls every shard_map) takes `sim.program._flat`'s paths: its inputs placed by the plan the
first call made (`FlatPlan`: signature, blocks, types, the input variables shared by every device's program),
its outputs checked, promoted, recorded and assembled without walking a tree. With those paths turned off, the
general paths give the same outputs, memories, programs (text and which variable each equation reads and
writes), trace, calls and times, on a first, a repeated and a third call, with `check_vma` on and off. A plan
that types its inputs wrongly is caught by the same comparison."""

from __future__ import annotations

import numpy as np
import pytest
from row_programs import links

import collectives
import sim
from sim.program import _shard_map

_MESHES = [{"x": 4}, {"x": 2, "y": 2}]


def _body(x: np.ndarray, w: np.ndarray, k: np.ndarray) -> tuple:
    """Three outputs: one varying along 'x', one invariant there (promoted under check_vma), one from a constant
    input."""
    return x * 2, collectives.psum(x, "x") + w[: x.shape[0]], k + 1


def _state(mesh: dict, check_vma: bool, flat: bool, wrong: bool = False) -> list:
    """Three calls of the same mapped function (the arguments made anew each time): outputs' bytes, memories'
    bytes, programs (text and links), trace, calls and end time."""
    with pytest.MonkeyPatch.context() as patch:
        if not flat:
            patch.setattr(_shard_map, "flat_key", lambda args: None)
            patch.setattr(_shard_map, "flat_outputs", lambda *a: None)
            patch.setattr(_shard_map, "arrays", lambda values: False)
        f = sim.shard_map(_body, mesh=sim.Mesh(mesh), in_specs=(sim.P("x"), sim.P(), sim.P()), out_specs=sim.P("x"),
                          check_vma=check_vma)
        states = []
        for call in range(3):
            if wrong and call:  # every plan types its inputs invariant
                for key, plan in f._flat.items():
                    f._flat[key] = type(plan)(plan.signature, plan.rows, tuple(frozenset() for _ in plan.vmas))
            x = np.arange(32, dtype=np.float32).reshape(16, 2)
            args = (x, x + call, np.arange(3, dtype=np.int32))
            try:
                run = f.run(*args)
            except sim.MeshError as error:
                states.append(f"{type(error).__name__}: {error}")
                continue
            states.append(([(o.dtype.str, o.shape, o.tobytes()) for o in run.outputs],
                           [[s.tobytes() for _, s in m._segments] for m in run.simulation.memories],
                           [(str(p), links(p)) for p in run.simulation.programs], run.trace.to_json(),
                           [repr(c) for c in run.calls], run.end_time_s))
        return states


@pytest.mark.parametrize("mesh", _MESHES, ids=str)
@pytest.mark.parametrize("check_vma", [True, False])
def test_flat_paths_equal_the_general_paths(mesh, check_vma):
    """Same outputs, memories, programs, trace, calls and times on three calls, with and without the flat paths."""
    fast = _state(mesh, check_vma, flat=True)
    assert not any(isinstance(s, str) for s in fast)
    assert fast == _state(mesh, check_vma, flat=False)


def test_flat_plan_is_made_once_and_shares_input_variables():
    """The first call makes the plan, later calls use it; every device's program reads the same input variables."""
    f = sim.shard_map(_body, mesh=sim.Mesh({"x": 4}), in_specs=(sim.P("x"), sim.P(), sim.P()), out_specs=sim.P("x"))
    args = (np.ones((16, 2), np.float32), np.ones((16, 2), np.float32), np.arange(3, dtype=np.int32))
    first, second = f.run(*args), f.run(*args)
    assert len(f._flat) == 1
    assert [v.type_str() for v in first.programs[0].inputs] == [v.type_str() for v in second.programs[0].inputs]
    assert all(p.inputs == second.programs[0].inputs for p in second.programs)


def test_flat_comparison_can_fail():
    """A plan typing its inputs invariant (wrong under check_vma for the input split over 'x') differs from the
    general path."""
    assert _state({"x": 4}, True, flat=True, wrong=True) != _state({"x": 4}, True, flat=False)
