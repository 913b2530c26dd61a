"""`check_args`: a program scenario's `[[args]]` tables checked, and their memory estimated, before any is drawn."""

from __future__ import annotations

from typing import Any

import numpy as np

import layouts
import sim
from scenarios._budget import Budget, arg_bytes
from scenarios._errors import Source

_ARG_KEYS = ("value", "shape", "seed", "dtype")


def check_args(source: Source, data: dict, mesh: sim.Mesh, budget: Budget) -> None:
    """Raise a `ScenarioError` for an `[[args]]` table that breaks the format, or for arguments too large.

    Each table gives a literal `value`, or a `shape` (a list of non-negative integers) with an optional
    `seed` (a non-negative integer); `dtype` names a numeric numpy dtype (float32 by default).
    """
    tables = data.get("args", [])
    if not isinstance(tables, list) or not all(isinstance(table, dict) for table in tables):
        raise source.error("", "args", "args must be an array of tables: write [[args]] once per argument")
    sizes = []
    for index, table in enumerate(tables):
        source.check_keys("args", table, (), _ARG_KEYS, index)
        dtype = _dtype(source, index, table.get("dtype", "float32"))
        if "value" in table:
            _check_value(source, index, table["value"], dtype)
            sizes.append(0)  # as large as the file
            continue
        _check_drawn(source, index, table)
        sizes.append(arg_bytes(table))
    budget.check_program(sizes, mesh)


def _dtype(source: Source, index: int, name: Any) -> np.dtype:
    """`dtype` as a numeric numpy dtype."""
    try:
        dtype = np.dtype(name) if isinstance(name, str) else None
    except TypeError:
        dtype = None
    if dtype is None or not (dtype.kind in "biuf" or layouts.is_float(dtype)):
        raise source.error("args", "dtype", f"[[args]] number {index}: dtype={name!r} must name a numeric numpy "
                                            f"dtype, e.g. 'float32' or 'int32'", index)
    return dtype


def _check_value(source: Source, index: int, value: Any, dtype: np.dtype) -> None:
    """`value` is a number or a rectangular array of numbers that `dtype` holds."""
    try:
        array = np.asarray(value)
        ok = array.dtype.kind in "biuf" or array.size == 0
        np.asarray(value, dtype)
    except (ValueError, TypeError, OverflowError):
        ok = False
    if not ok:
        shown = repr(value) if len(repr(value)) < 60 else repr(value)[:57] + "..."
        raise source.error("args", "value", f"[[args]] number {index}: value={shown} must be a number or a "
                                            f"rectangular array of numbers of dtype {dtype}", index)


def _check_drawn(source: Source, index: int, table: dict) -> None:
    """A drawn argument has a `shape` of non-negative integers and, if given, a non-negative integer `seed`."""
    if "shape" not in table:
        raise source.error("args", None, f"[[args]] number {index} needs `value` or `shape`", index)
    shape, seed = table["shape"], table.get("seed", 0)
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise source.error("args", "shape", f"[[args]] number {index}: shape={shape!r} must be a list of "
                                            f"non-negative integers, e.g. shape = [8]", index)
    if type(seed) is not int or seed < 0:
        raise source.error("args", "seed", f"[[args]] number {index}: seed={seed!r} must be a non-negative "
                                           f"integer", index)
