"""Generated calls of the vma and partial_manual kinds of the rules campaign.

`vma_cases(primitive)` draws a `VmaCase` (`oracles._vma_table`): a 1-D or 2-D mesh of up to 8 devices
(`scenarios.campaign._cases.meshes`), the lengths n and m, a dtype (float32 or int32), a variant of the
primitive's form, and for each operand the mesh axes it varies along (any subset, none included), with
values that differ from one coordinate to the next. `partial_cases(op)` draws a collective's call
(`scenarios.campaign._cases.cases`, small integers) on at most 4 devices, or on a 2-D mesh whose second
axis the call does not use, and which of the call's mesh axes beyond the collective's own are manual.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from oracles._rules import small_ints
from oracles._vma_table import VMA_PRIMITIVES, Operand, VmaCase
from scenarios.campaign._answers import Case
from scenarios.campaign._cases import cases, meshes

VMA_DTYPES = (np.dtype("float32"), np.dtype("int32"))


def _values(operand: Operand, lengths: dict[str, int], dtype: np.dtype, rows: int,
            rng: np.random.Generator) -> np.ndarray:
    """`rows` blocks of `operand`, one per coordinate along its axes."""
    shape = (rows, *operand.dims(lengths))
    if operand.kind == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if operand.kind == "index":
        return rng.integers(0, lengths[operand.high], shape).astype(np.int32)
    if operand.kind == "count":
        return rng.integers(0, 4, shape).astype(np.int32)
    return rng.integers(0, 9, shape).astype(dtype)


@st.composite
def vma_cases(draw: st.DrawFn, primitive: str) -> VmaCase:
    """A call of `primitive` with each operand varying along its own subset of the mesh axes."""
    mesh_shape = draw(meshes())
    n = draw(st.integers(2, 4))
    lengths = {"n": n, "m": draw(st.integers(1, n))}
    dtype = draw(st.sampled_from(VMA_DTYPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    varying, args = [], []
    for operand in VMA_PRIMITIVES[primitive]:
        axes = tuple(a for a in mesh_shape if draw(st.booleans()))
        varying.append(axes)
        rows = int(np.prod([mesh_shape[a] for a in axes]))
        args.append(_values(operand, lengths, dtype, rows, rng))
    return VmaCase(primitive, mesh_shape, tuple(varying), tuple(args), draw(st.integers(0, 5)), lengths)


def _leaves_room(case: Case) -> bool:
    """A partial-manual program needs an axis left to the compiler: room for the added one, or a mesh axis
    the collective does not use."""
    used = case.params["axis_name"] if isinstance(case.params["axis_name"], tuple) else (case.params["axis_name"],)
    return case.devices <= 4 or any(a not in used for a in case.mesh_shape)


@st.composite
def partial_cases(draw: st.DrawFn, op: str, **options: Any) -> tuple[Case, bool, tuple[str, ...]]:
    """A call of collective `op` (small integers), whether the program checks vma, and its manual axes: the
    collective's own and, drawn, others of the mesh (the rest, and an added axis of 2 when the devices
    allow it, are left to the compiler). `options` go to `cases` (e.g. `dtypes`)."""
    case = draw(cases(op, fillers=st.just(small_ints), **options).filter(_leaves_room))
    name = case.params["axis_name"]
    used = name if isinstance(name, tuple) else (name,)
    extra = [a for a in case.mesh_shape if a not in used and draw(st.booleans())]
    manual = tuple(a for a in case.mesh_shape if a in used or a in extra)
    if case.devices > 4 and len(manual) == len(case.mesh_shape):
        manual = tuple(a for a in manual if a in used)
    return case, draw(st.booleans()), manual


__all__ = ["VMA_DTYPES", "partial_cases", "vma_cases"]
