"""The element arithmetic of JAX's CPU backend (XLA:CPU, x86-64), which the reductions reproduce bit for bit.

Measured against jax 0.10.2 on random bit patterns, subnormals, signed zeros and NaN payloads:

- An all-reduce or reduce-scatter starts every element from the identity of its operation (0 for sum,
  -inf or the lowest integer for max, +inf or the highest integer for min) and folds the members' values
  into it in group order: `acc = op(acc, x)`. So `psum` of -0.0 and -0.0 is +0.0.
- float32 and float64 arithmetic runs with denormals flushed: a subnormal operand counts as a zero of its
  sign, and a subnormal result becomes a zero of its sign.
- float16 arithmetic is done in float32 and rounded back; a NaN result is the canonical NaN 0x7e00 with
  the sign of the float32 NaN (the payload is dropped).
- When both operands of a float32/float64 `acc + x` are NaN the result is `x`, quieted (for float16 it is
  `acc`, canonicalised); a single NaN operand is kept, quieted; an invalid operation (inf - inf) gives
  the processor's default NaN.
- max and min are C++'s `std::max(acc, x)` (`x if acc < x else acc`) and `std::min(acc, x)`
  (`x if x < acc else acc`): a NaN never replaces the accumulator, so pmax of NaNs alone is -inf, and a
  tie of -0.0 and +0.0 keeps the accumulator.
- pmean multiplies the sum by the reciprocal of the group size rounded to the result dtype (XLA rewrites
  the division by a constant into that multiplication).
- bfloat16 is promoted (XLA's all-reduce promotion): every operand is converted exactly to float32, the
  whole fold runs there by the float32 rules above (subnormals flushed), and the result is rounded back
  once, to nearest even, a NaN becoming 0x7fc0 with its sign. So a bfloat16 psum rounds once, where a
  float16 psum rounds after every addition. pmean rounds the sum to bfloat16, widens it again and
  multiplies it by the float32 reciprocal of the group size (XLA divides bfloat16 in float32), rounding
  once more. `combine` alone (one step of 'ring' or 'recursive_doubling') widens, adds and rounds back,
  so those algorithms round after every step in every float dtype.

>>> combine("sum", np.float32([-0.0]), np.float32([-0.0])).tobytes() == np.float32([-0.0]).tobytes()
True
>>> float(combine("max", identity("max", np.dtype("float32")), np.float32(np.nan)))
-inf
"""

from __future__ import annotations

import numpy as np

import layouts
from sim.memory import hollow_empty, is_hollow, logical_dtype

REDUCTIONS = ("sum", "max", "min")
_FLUSHED = (np.dtype(np.float32), np.dtype(np.float64))
_UNSIGNED = {2: np.uint16, 4: np.uint32, 8: np.uint64}
_QUIET_BIT = {2: 0x0200, 4: 0x0040_0000, 8: 0x0008_0000_0000_0000}
# a float dtype's bits as an unsigned integer: the unsigned dtype, the mask of |value|, |smallest normal|, |inf|
_FLOAT_BITS = {np.dtype(np.float32): (np.uint32, np.uint32(0x7FFF_FFFF), 0x0080_0000, 0x7F80_0000),
               np.dtype(np.float64): (np.uint64, np.uint64(0x7FFF_FFFF_FFFF_FFFF), 0x0010_0000_0000_0000,
                                      0x7FF0_0000_0000_0000)}


def identity(reduction: str, dtype: np.dtype) -> np.ndarray:
    """The value every element of a `reduction` starts from, as a 0-d array of `dtype`."""
    dtype = np.dtype(dtype)
    if reduction == "sum":
        return np.zeros((), dtype)
    low = reduction == "max"
    if dtype.kind == "b":
        return np.array(not low)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array(info.min if low else info.max, dtype)
    return np.array(-np.inf if low else np.inf, dtype)


def accumulator(dtype: np.dtype) -> np.dtype:
    """The dtype XLA:CPU reduces `dtype` in: float32 for bfloat16, else `dtype` itself."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype == layouts.BFLOAT16 else dtype


def widen(a: np.ndarray) -> np.ndarray:
    """`a` converted exactly to its `accumulator` dtype (no copy when that is its own)."""
    a = np.asarray(a)
    return a.astype(accumulator(a.dtype), copy=False)


def convert(wide: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`wide` (the accumulator dtype of `dtype`) rounded to `dtype` as XLA:CPU converts: to nearest even, a
    NaN to the canonical quiet NaN keeping its sign (ml_dtypes' cast rounds the same way, checked on every
    float32 bit pattern class against JAX)."""
    dtype, wide = np.dtype(dtype), np.asarray(wide)
    if wide.dtype == dtype:
        return wide
    with np.errstate(all="ignore"):
        return wide.astype(dtype)


def combine(reduction: str, acc: np.ndarray, x: np.ndarray) -> np.ndarray:
    """`reduction(acc, x)` elementwise, as XLA:CPU computes it; `x` is the later term of the fold."""
    acc, x = np.asarray(acc), np.asarray(x)
    quick = quick_combine(reduction, acc, x)
    return quick if quick is not None else combine_by_rules(reduction, acc, x)


def started(reduction: str, terms: np.ndarray) -> np.ndarray:
    """`terms` folded into the identity: the first step of every fold, so that every algorithm's partial
    results start where 'direct''s do (a max's or min's accumulator is never a NaN, a sum's never -0.0).

    >>> float(started("max", np.float32(np.nan)))
    -inf
    """
    return combine(reduction, identity(reduction, np.asarray(terms).dtype), terms)


def quick_combine(reduction: str, acc: np.ndarray, x: np.ndarray) -> np.ndarray | None:
    """`combine` of two C-contiguous float32 or float64 arrays (of one shape, or one of them 0-d) in a few
    whole-array operations, where none of the rules above can change an element: no subnormal operand (nor
    a NaN or a subnormal among the operands and the sums, for a sum). None where one might, or for any other
    operands (`combine_by_rules` then applies the rules element by element).

    >>> quick_combine("sum", np.float32([1.5]), np.float32([2.0])).tolist(), quick_combine(
    ...     "sum", np.float32([1e-40]), np.float32([0.0]))
    ([3.5], None)
    """
    bits = _FLOAT_BITS.get(acc.dtype)
    if (bits is None or acc.dtype.metadata is not None or x.dtype != acc.dtype or x.dtype.metadata is not None
            or (acc.shape != x.shape and min(acc.ndim, x.ndim) != 0) or max(acc.ndim, x.ndim) == 0
            or not acc.flags.c_contiguous or not x.flags.c_contiguous):
        return None
    unsigned, magnitude, smallest_normal, infinity = bits
    if reduction == "sum":
        with np.errstate(all="ignore"):
            out = acc + x
        terms = (acc.reshape(-1), x.reshape(-1), out.reshape(-1))
    elif reduction in ("max", "min"):  # std::max / std::min: a NaN never replaces the accumulator
        out = np.where(acc < x, x, acc) if reduction == "max" else np.where(x < acc, x, acc)
        terms = (acc.reshape(-1), x.reshape(-1))
    else:
        return None
    size = np.concatenate(terms).view(unsigned) & magnitude  # |value| as an integer: ordered like the floats
    special = size - 1 < smallest_normal - 1  # a subnormal (zero wraps round to the top)
    if reduction == "sum":
        special |= size > infinity  # a NaN
    return None if special.any() else out


def combine_by_rules(reduction: str, acc: np.ndarray, x: np.ndarray) -> np.ndarray:
    """`combine` applying every rule of the module's docstring element by element (any dtype and shapes)."""
    if _abstract(acc, x):
        return hollow_empty(np.broadcast_shapes(np.shape(acc), np.shape(x)), np.asarray(acc).dtype)
    acc, x = np.broadcast_arrays(np.asarray(acc), np.asarray(x))
    if accumulator(acc.dtype) != acc.dtype:  # one step in the wide dtype, rounded back
        return convert(combine(reduction, widen(acc), widen(x)), acc.dtype)
    if acc.dtype.kind == "c":  # componentwise: complex add is two float adds
        parts = _component_dtype(acc.dtype)
        flat = [np.ascontiguousarray(v).reshape(-1).view(parts) for v in (acc, x)]
        return combine(reduction, *flat).view(acc.dtype).reshape(acc.shape)
    a, b = flush(acc), flush(x)
    if reduction == "max":
        return np.where(a < b, b, a)
    if reduction == "min":
        return np.where(b < a, b, a)
    if a.dtype.kind in "iu":
        return np.add(a, b, dtype=a.dtype)
    if a.dtype == np.float16:  # computed in float32; here the accumulator's NaN wins
        wide_a, wide_b = a.astype(np.float32), b.astype(np.float32)
        with np.errstate(all="ignore"):
            wide = wide_a + wide_b
        return narrow(np.where(np.isnan(wide_a), wide_a, np.where(np.isnan(wide_b), wide_b, wide)))
    with np.errstate(all="ignore"):
        total = flush(a + b)
    return np.where(np.isnan(b), quiet(b), np.where(np.isnan(a), quiet(a), total))


def fold(reduction: str, terms: np.ndarray) -> np.ndarray:
    """`combine` folded over `terms[0], terms[1], ...` (at least one) from the identity, bit for bit what
    the loop `acc = combine(reduction, acc, term)` computes.

    Where the loop's answer provably equals a vectorised one it is computed in one pass: integer sums
    (which wrap the same in any order), and floats without NaN whose running sums never fall into the
    flushed subnormal range. Everything else takes the loop. bfloat16 folds in its `accumulator` dtype
    and rounds once at the end, as XLA:CPU's promoted all-reduce does.
    """
    terms = np.asarray(terms)
    if is_hollow(terms.dtype):  # abstract terms: a sum of their shape, without values
        return hollow_empty(terms.shape[1:], terms.dtype)
    if accumulator(terms.dtype) != terms.dtype:
        return convert(fold(reduction, widen(terms)), terms.dtype)
    fast = _fold_vectorised(reduction, terms)
    if fast is not None:
        return fast
    acc = identity(reduction, terms.dtype)
    for term in terms:
        acc = combine(reduction, acc, term)
    return acc


def _fold_vectorised(reduction: str, terms: np.ndarray) -> np.ndarray | None:
    """The fold in one pass, or None where only the loop is exact (NaNs, flushed running sums, complex)."""
    dtype = terms.dtype
    if dtype.kind in "biu":
        if reduction == "sum":
            return np.add.reduce(terms, axis=0, dtype=dtype)
        extreme = np.maximum if reduction == "max" else np.minimum
        return extreme.reduce(terms, axis=0, initial=identity(reduction, dtype))
    if dtype.kind != "f" or np.isnan(terms).any():
        return None
    flushed = flush(terms)
    if reduction == "sum":
        with np.errstate(all="ignore"):
            running = _running_sums(flushed)
        if np.isnan(running).any() or (dtype in _FLUSHED and _subnormal(running).any()):
            return None
        return running[-1]
    # std::max / std::min keep the accumulator on ties: the answer is the first term equal to the extreme
    extreme = flushed.max(axis=0) if reduction == "max" else flushed.min(axis=0)
    first = np.argmax(flushed == extreme, axis=0)
    return np.take_along_axis(flushed, first[None], axis=0)[0]


_WIDE_TERM = 64  # terms of at least this many elements are added one after another, not by `accumulate`


def _running_sums(terms: np.ndarray) -> np.ndarray:
    """The running sums of `terms` along axis 0, from the identity +0, strictly in order: `np.add.accumulate`
    for narrow terms; for wide ones one `np.add` per term (accumulate along axis 0 of wide rows is many
    times slower, and the sums are the same: each is the previous plus the next term, rounded once)."""
    if terms.size < _WIDE_TERM * len(terms):
        return np.add.accumulate(np.concatenate([np.zeros((1,) + terms.shape[1:], terms.dtype), terms]), axis=0)
    running = np.zeros((len(terms) + 1,) + terms.shape[1:], terms.dtype)
    for k in range(len(terms)):
        np.add(running[k], terms[k], out=running[k + 1])
    return running


def _abstract(*values: np.ndarray) -> bool:
    """Whether any of `values` is an abstract payload (then arithmetic gives shapes, not values)."""
    return any(is_hollow(np.asarray(v).dtype) for v in values)


def _subnormal(a: np.ndarray) -> np.ndarray:
    return (np.abs(a) < np.finfo(a.dtype).smallest_normal) & (a != 0)


def narrow(wide: np.ndarray) -> np.ndarray:
    """float32 -> float16 as XLA:CPU rounds it: to nearest even, NaN to the signed canonical 0x7e00."""
    with np.errstate(all="ignore"):
        half = wide.astype(np.float16)
    signed_nan = np.where(np.signbit(wide), np.uint16(0xFE00), np.uint16(0x7E00)).view(np.float16)
    return np.where(np.isnan(wide), signed_nan, half)


def mean_dtype(dtype: np.dtype) -> np.dtype:
    """pmean's result dtype: floats keep theirs; bool and integers of up to 32 bits give float32, 64-bit float64."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c" or layouts.is_float(dtype):
        return dtype
    return np.dtype(np.float64 if dtype.itemsize == 8 else np.float32)


def scale_to_mean(total: np.ndarray, size: int) -> np.ndarray:
    """`total * (1 / size)` in pmean's dtype, the reciprocal rounded to that dtype, as XLA:CPU computes it."""
    if is_hollow(np.asarray(total).dtype):
        return hollow_empty(np.shape(total), mean_dtype(logical_dtype(total.dtype)))
    dtype = mean_dtype(total.dtype)
    value = np.asarray(total).astype(dtype)
    if dtype.kind == "c":
        return value / np.array(size, dtype)  # XLA keeps complex division (checked against JAX)
    wide = accumulator(dtype)  # the division runs in the accumulator dtype, so the reciprocal is rounded to it
    reciprocal = np.asarray(wide.type(1) / wide.type(size))
    return convert(_times(widen(value), reciprocal), dtype)


def _times(value: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """`value * factor` for float16/32/64 as XLA:CPU multiplies: float16 in float32, the others flushed."""
    with np.errstate(all="ignore"):
        if value.dtype == np.float16:
            return narrow(value.astype(np.float32) * factor.astype(np.float32))
        return flush(flush(value) * factor)


def flush(a: np.ndarray) -> np.ndarray:
    """`a` with subnormal float32/float64 values replaced by zeros of the same sign; other dtypes unchanged."""
    a = np.asarray(a)
    if a.dtype not in _FLUSHED:
        return a
    tiny = np.finfo(a.dtype).smallest_normal
    return np.where((np.abs(a) < tiny) & (a != 0), np.copysign(np.zeros((), a.dtype), a), a)


def quiet(a: np.ndarray) -> np.ndarray:
    """`a` with the quiet bit of every NaN set (what an x86 operation does to a signalling NaN operand)."""
    a = np.asarray(a)
    unsigned = _UNSIGNED[a.dtype.itemsize]
    return (a.view(unsigned) | unsigned(_QUIET_BIT[a.dtype.itemsize])).view(a.dtype)


def _component_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32 if dtype == np.complex64 else np.float64)
