"""The element types a memory holds: numpy's numbers and bool, bfloat16 and the float8 types from `ml_dtypes`.

JAX's bfloat16 is an `ml_dtypes` numpy extension type. numpy files it under kind 'V' (opaque bytes), so
`dtype.kind in "biufc"` refuses it; `is_numeric` and `is_float` are the questions every layer asks
instead. Importing this module registers the name with numpy, so `np.dtype("bfloat16")` works everywhere
once `layouts` is imported.

The float8 types (`FLOAT8`, the eight JAX 0.10.2 names) are moved, not reduced: `is_movable` says a
collective that only moves data (all_gather, all_to_all, ragged_all_to_all, ppermute and their kin) takes
them and moves their bytes unchanged, as a TPU or GPU moves them; the reductions refuse them, since XLA's
arithmetic on them is not modelled. XLA:CPU converts the float8 types through float16 even where it only
moves them. Measured on 4 CPU devices with all 256 bit patterns, an all_gather, all_to_all or ppermute keeps
every bit pattern but the NaNs: float8_e5m2's five other NaNs become 0x7f (the sign dropped), _e4m3's become
0x7c or 0xfc and _e3m4's 0x78 or 0xf8 (the sign kept), while the other five types keep every bit pattern;
on one device the all_to_all is compiled away and keeps them. meshsim keeps every NaN's bits: the docs leave a
NaN's payload undefined, so that difference is reported, not imitated (docs/concepts/numerics.md). The
int4 types stay refused. (ml_dtypes files float8_e5m2 under numpy's kind 'f': `is_numeric` and `is_float`
ask whether a dtype is numpy's own.)

>>> is_float("bfloat16"), is_numeric(np.dtype("float8_e4m3fn")), is_movable("float8_e5m2"), is_movable("int4")
(True, False, True, False)
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
NARROW_FLOATS: tuple[np.dtype, ...] = (BFLOAT16,)  # the ml_dtypes floats every layer accepts
# numpy's own numeric dtypes in native byte order, for a check by one look-up (`is_numeric` answers for any)
NUMPY_NUMBERS = frozenset(np.dtype(code) for code in "?bhilqBHILQefdgFDG")
# ml_dtypes' one-byte floats, by JAX's names: moved bit for bit, never reduced (`is_movable`)
FLOAT8: tuple[np.dtype, ...] = tuple(np.dtype(getattr(ml_dtypes, name)) for name in (
    "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
    "float8_e5m2fnuz", "float8_e8m0fnu"))


ABSTRACT_KEY = "meshsim.abstract"  # the metadata key of an abstract payload's dtype (`sim.memory._abstract`)


def logical(dtype: Any) -> np.dtype:
    """The dtype an abstract payload's hollow dtype stands for (kept in its metadata); any other dtype itself."""
    dtype = np.dtype(dtype)
    metadata = dtype.metadata
    return metadata[ABSTRACT_KEY] if metadata is not None and ABSTRACT_KEY in metadata else dtype


def native_dtype(dtype: Any) -> np.dtype:
    """`dtype` in the machine's byte order (itself when it already is, or has none: one byte, bool).

    Every value a memory holds, a collective takes and a program returns is in native byte order, as JAX's
    are (`jnp.asarray` of a big-endian numpy array gives a native one); meshsim converts where a user's array
    enters (`sim.shard_map`'s inputs, `sim.device_put`, `sim.jit`, `sim.ShapeDtypeStruct`).

    >>> native_dtype(">f4") == np.float32, native_dtype(">f4").isnative
    (True, True)
    """
    dtype = np.dtype(dtype)
    return dtype if dtype.isnative else dtype.newbyteorder("=")


def native_array(x: Any) -> np.ndarray:
    """`x` as a numpy array in native byte order (`native_dtype`): `np.asarray(x)` itself when it already is,
    else a copy holding the same values.

    >>> native_array(np.array([1, 2], ">i4")).dtype
    dtype('int32')
    """
    array = np.asarray(x)
    return array if array.dtype.isnative else array.astype(native_dtype(array.dtype))


def is_float(dtype: Any) -> bool:
    """Whether `dtype` is a real floating type: numpy's float16/32/64 or one of `NARROW_FLOATS`."""
    dtype = np.dtype(dtype)
    return (dtype.kind == "f" and _numpys(dtype)) or dtype in NARROW_FLOATS


def _numpys(dtype: np.dtype) -> bool:
    """Whether `dtype` is numpy's own, not an `ml_dtypes` type that files itself under numpy's kinds
    (float8_e5m2 says kind 'f')."""
    return dtype.type.__module__ == "numpy"


def is_numeric(dtype: Any) -> bool:
    """Whether `dtype` holds numbers a collective may move or reduce: bool, integers, floats, complex (or
    stands for them, without values: an abstract payload's dtype)."""
    dtype = logical(dtype)
    return (dtype.kind in "biufc" and _numpys(dtype)) or dtype in NARROW_FLOATS


def is_movable(dtype: Any) -> bool:
    """Whether a collective that only moves data may move `dtype`'s elements: a numeric dtype (`is_numeric`)
    or a float8 type (`FLOAT8`), or an abstract payload's dtype standing for one."""
    dtype = logical(dtype)
    return is_numeric(dtype) or dtype in FLOAT8


def is_any_float(dtype: Any) -> bool:
    """Whether `dtype`'s values are floats: a float `is_float` accepts, or a float8 type (moved, not reduced)."""
    return is_float(dtype) or np.dtype(dtype) in FLOAT8


def finfo(dtype: Any) -> Any:
    """Machine limits of the float `dtype` (eps, smallest_normal, max, ...), narrow floats included."""
    return ml_dtypes.finfo(np.dtype(dtype))


def short_name(dtype: Any) -> str:
    """JAX's short name of `dtype` as a jaxpr prints it: f32, i8, u16, c64, bool, bf16."""
    dtype = logical(dtype)
    if dtype == BFLOAT16:
        return "bf16"
    if dtype in FLOAT8:
        return "f8_" + dtype.name.removeprefix("float8_")
    short = {"f": "f", "i": "i", "u": "u", "c": "c", "b": "bool"}[dtype.kind]
    return short if dtype.kind == "b" else f"{short}{dtype.itemsize * 8}"
