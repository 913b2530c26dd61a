"""The element types a memory holds: numpy's numbers and bool, and bfloat16 from `ml_dtypes`.

JAX's bfloat16 is an `ml_dtypes` numpy extension type. numpy files it under kind 'V' (opaque bytes), so
`dtype.kind in "biufc"` refuses it; `is_numeric` and `is_float` are the questions every layer asks
instead. Importing this module registers the name with numpy, so `np.dtype("bfloat16")` works everywhere
once `layouts` is imported. The float8 and int4 types stay refused: XLA:CPU converts the float8 types
through float16 even where it only moves them. Measured on 4 CPU devices with all 256 bit patterns, an
all_gather, all_to_all or ppermute keeps the bits of float8_e4m3fn, _e4m3fnuz, _e5m2fnuz, _e4m3b11fnuz and
_e8m0fnu, but merges NaNs: float8_e5m2's five other NaNs become 0x7f (the sign dropped), _e4m3's become
0x7c or 0xfc and _e3m4's 0x78 or 0xf8 (the sign kept); on one device the all_to_all is compiled away and
keeps them. Those rules, and the reductions' arithmetic, are not modelled. (ml_dtypes files float8_e5m2
under numpy's kind 'f': `is_numeric` and `is_float` ask whether a dtype is numpy's own.)

>>> is_float("bfloat16"), is_numeric(np.dtype("float8_e4m3fn")), is_numeric(np.dtype("float8_e5m2")), is_numeric("U3")
(True, False, False, False)
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
NARROW_FLOATS: tuple[np.dtype, ...] = (BFLOAT16,)  # the ml_dtypes floats every layer accepts
# numpy's own numeric dtypes in native byte order, for a check by one look-up (`is_numeric` answers for any)
NUMPY_NUMBERS = frozenset(np.dtype(code) for code in "?bhilqBHILQefdgFDG")


ABSTRACT_KEY = "meshsim.abstract"  # the metadata key of an abstract payload's dtype (`sim.memory._abstract`)


def logical(dtype: Any) -> np.dtype:
    """The dtype an abstract payload's hollow dtype stands for (kept in its metadata); any other dtype itself."""
    dtype = np.dtype(dtype)
    metadata = dtype.metadata
    return metadata[ABSTRACT_KEY] if metadata is not None and ABSTRACT_KEY in metadata else dtype


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


def finfo(dtype: Any) -> Any:
    """Machine limits of the float `dtype` (eps, smallest_normal, max, ...), narrow floats included."""
    return ml_dtypes.finfo(np.dtype(dtype))


def short_name(dtype: Any) -> str:
    """JAX's short name of `dtype` as a jaxpr prints it: f32, i8, u16, c64, bool, bf16."""
    dtype = logical(dtype)
    if dtype == BFLOAT16:
        return "bf16"
    short = {"f": "f", "i": "i", "u": "u", "c": "c", "b": "bool"}[dtype.kind]
    return short if dtype.kind == "b" else f"{short}{dtype.itemsize * 8}"
