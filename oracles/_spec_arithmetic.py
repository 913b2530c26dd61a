"""XLA:CPU's arithmetic for the executable spec's reductions: the fold of the members in group order.

XLA:CPU (jax 0.10.2, x86-64) starts each element of an all-reduce or reduce-scatter at the identity and
folds the members in group order. float32/float64 flush subnormal operands and results to signed zeros;
float16 is computed in float32 and rounded back, NaN results becoming the canonical 0x7e00 with their
sign. When both addends are NaN a float32/float64 sum keeps the later one and a float16 sum the earlier
one. max/min are std::max/std::min, which never pick a NaN. On a one-device mesh the all-reduce is
compiled away (the value is returned as is); psum_scatter is not.

XLA promotes the all-reduce and reduce-scatter of bfloat16 to float32: the terms are widened exactly,
folded in float32 as above, and the result is rounded back once (to nearest even; a NaN to 0x7fc0 with
its sign). pmean divides that bfloat16 sum in float32, by the float32 reciprocal of the group size. On a
one-device mesh the conversions stay where the all-reduce goes: the value comes back, NaNs canonical.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

WIDER = {"bfloat16": np.float32}

IDENTITY = {"sum": lambda dt: 0, "max": lambda dt: lowest(dt), "min": lambda dt: -lowest(dt) if dt.kind == "f"
             else (np.iinfo(dt).max if dt.kind in "iu" else True)}


def lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else (np.iinfo(dtype).min if dtype.kind in "iu" else False)


def flushed(a: np.ndarray) -> np.ndarray:
    """Subnormal float32/float64 values as zeros of their sign."""
    if a.dtype not in (np.float32, np.float64):
        return a
    return np.where(np.abs(a) < np.finfo(a.dtype).smallest_normal, np.copysign(np.zeros_like(a), a), a)


def quieted(a: np.ndarray) -> np.ndarray:
    bits = {4: (np.uint32, 1 << 22), 8: (np.uint64, 1 << 51)}[a.dtype.itemsize]
    return (a.view(bits[0]) | bits[0](bits[1])).view(a.dtype)


def combine(reduction: str, acc: np.ndarray, x: np.ndarray) -> np.ndarray:
    """One step of the fold, `reduction(acc, x)`, with XLA:CPU's rules for floats."""
    if acc.dtype.kind == "c":
        parts = np.float32 if acc.dtype == np.complex64 else np.float64
        return combine(reduction, acc.view(parts), x.view(parts)).view(acc.dtype)
    a, b = flushed(acc), flushed(x)
    if reduction != "sum":
        return np.where(a < b, b, a) if reduction == "max" else np.where(b < a, b, a)
    if a.dtype.kind in "iu":
        return (a + b).astype(a.dtype)
    with np.errstate(all="ignore"):
        if a.dtype == np.float16:
            a32, b32 = a.astype(np.float32), b.astype(np.float32)
            total = np.where(np.isnan(a32), a32, np.where(np.isnan(b32), b32, a32 + b32)).astype(np.float16)
            canonical = np.where(np.signbit(total), np.uint16(0xFE00), np.uint16(0x7E00)).view(np.float16)
            return np.where(np.isnan(total), canonical, total)
        return np.where(np.isnan(b), quieted(b), np.where(np.isnan(a), quieted(a), flushed(a + b)))


def narrowed(wide: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A wide fold's result rounded back to the narrow `dtype` it was promoted from."""
    with np.errstate(all="ignore"):
        return wide.astype(dtype)


def fold(xs: Sequence[np.ndarray], group: list[int], reduction: str) -> np.ndarray:
    dtype = np.asarray(xs[group[0]]).dtype
    if dtype.name in WIDER:
        return narrowed(fold([np.asarray(x).astype(WIDER[dtype.name]) for x in xs], group, reduction), dtype)
    acc = np.full(np.shape(xs[group[0]]), IDENTITY[reduction](dtype), dtype)
    for d in group:
        flat = [np.ascontiguousarray(v).reshape(-1) for v in (acc, xs[d])]
        acc = combine(reduction, *flat).reshape(acc.shape)
    return acc
