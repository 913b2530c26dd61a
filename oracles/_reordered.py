"""What "agree" means for a reduction whose algorithm adds in another order than XLA:CPU's.

The spec and JAX fold the members in group order (the 'direct' algorithm's order, bit for bit). Every other
algorithm ('ring', 'bidirectional_ring', 'recursive_doubling', 'rabenseifner', 'per_axis', 'multi_axis',
'hierarchical', 'tree', psum_scatter's 'ring', 'bidirectional_ring', 'recursive_halving', 'multi_axis' and
'hierarchical', and whatever 'auto' picks) folds the same n terms
along another binary tree of n-1 additions (besides additions to the identity, which are exact), so a float
sum may round differently. Each of the n-1 additions rounds with relative error at most eps/2 of a partial sum no larger
than sum|x_i|, so each answer is within (n-1) eps sum|x_i| of the exact sum (plus 2n times the smallest
normal number for float32/float64 and bfloat16, whose additions run in flushed float32); two answers within
that of the exact sum are within twice it of each other. eps is the result dtype's: 2^-7 for bfloat16 and
2^-10 for float16, whose reordering algorithms round every partial sum back to that dtype (the group-order
fold rounds a bfloat16 sum once, which is within the same bound). pmean scales the sum by 1/n and rounds
once more. pmax and pmin pick the same value in any order, except the sign of a zero (a tie of -0.0 and +0.0
keeps whichever came first). psum_scatter's terms for member j are the members' chunks j (each collective's
`Reduction` says what it reduces, and each `Algorithm` record whether it reorders). The bound holds
while no partial sum overflows: where finite terms' magnitudes add up past the dtype's largest finite value,
one order may overflow (to inf, or inf - inf = nan) where another does not, and any answer agrees.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import collectives
import layouts
from oracles import spec
from oracles._compare import Difference


def reorders(op: str, params: Mapping[str, Any], dtype: np.dtype) -> bool:
    """Whether `op` with `params` may round floats differently from the group-order fold: a reduction
    (`Definition.reduction`) by an algorithm whose record says it `reorders`."""
    definition = collectives.definition(op)
    if definition.reduction is None:
        return False
    algorithm = definition.algorithm(params.get("algorithm", definition.param("algorithm").default))
    return algorithm.reorders and (np.dtype(dtype).kind == "c" or layouts.is_float(dtype))


def compare_reordered(op: str, params: Mapping[str, Any], mesh_shape: dict, inputs: Sequence[np.ndarray],
                      expected: Sequence[np.ndarray], actual: Sequence[np.ndarray]) -> list[Difference]:
    """The devices whose `actual` result is not within the bound of `expected` (see the module docstring);
    same shape and dtype are still required."""
    found, reduction = [], collectives.definition(op).reduction
    for d, group in _groups_by_device(mesh_shape, params, len(inputs)).items():
        want, got = np.asarray(expected[d]), np.asarray(actual[d])
        if (want.dtype, want.shape) != (got.dtype, got.shape):
            found.append(Difference("aval", d, "", want, got))
            continue
        parts = [reduction.chunk(params, np.asarray(inputs[m]), group.index(d), len(group)) for m in group]
        with np.errstate(invalid="ignore", over="ignore"):  # NaN, inf - inf and overflow are judged, not warned of
            terms = np.stack(parts).astype(np.complex128 if want.dtype.kind == "c" else np.float64)
            bad = ~_within(reduction, want, got, terms)
        if bad.any():
            flat = np.flatnonzero(bad.reshape(-1))
            indices = tuple(tuple(int(i) for i in np.unravel_index(f, want.shape)) for f in flat[:6])
            found.append(Difference("bytes", d, "", want, got, len(flat), indices))
    return found


def _within(reduction: collectives.Reduction, want: np.ndarray, got: np.ndarray, terms: np.ndarray) -> np.ndarray:
    """Elementwise: does `got` agree with `want` as the module docstring says?"""
    w, g = want.astype(terms.dtype), got.astype(terms.dtype)
    same_class = (np.isnan(w) == np.isnan(g)) & (np.isinf(w) == np.isinf(g))
    if reduction.extreme:
        return same_class & ((w == g) | (np.isnan(w) & np.isnan(g)))
    info, n = layouts.finfo(want.dtype), len(terms)
    bound = (n - 1) * float(info.eps) * np.abs(terms).sum(axis=0)
    if layouts.is_float(want.dtype) and want.dtype != np.float16:
        bound = bound + 2 * n * float(info.smallest_normal)
    if reduction.mean:
        bound = bound / n + 2 * float(info.eps) * np.abs(w)
    finite = np.isfinite(w) & np.isfinite(g)
    close = np.abs(w - g) <= 2 * bound
    agree = same_class & np.where(finite, close, (w == g) | (np.isnan(w) & np.isnan(g)))
    # finite terms whose magnitudes add up past the largest finite value: a partial sum overflows in some
    # orders and not in others, so inf (or inf - inf = nan) in one order and a finite sum in another agree
    magnitude = np.abs(terms).sum(axis=0) * (1 + n * float(info.eps))
    return agree | (np.isfinite(terms).all(axis=0) & (magnitude >= float(info.max)))


def _groups_by_device(mesh_shape: dict, params: Mapping[str, Any], devices: int) -> dict[int, list[int]]:
    """Each device's group for the call's axis_name and axis_index_groups."""
    members = spec.groups(mesh_shape, params["axis_name"], params.get("axis_index_groups"))
    return {d: group for group in members for d in group if d < devices}
