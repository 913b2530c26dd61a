"""`check_args`: a program scenario's `[[args]]` tables checked, and their memory estimated, before any is drawn."""

from __future__ import annotations

from typing import Any

import numpy as np

import sim
from scenarios import _fields as fields
from scenarios._budget import Budget, arg_bytes
from scenarios._errors import Source
from scenarios._fields import InFile

_ARG_KEYS = ("value", "shape", "seed", "dtype")


def check_args(source: Source, data: dict, mesh: sim.Mesh, budget: Budget, abstract: bool = False) -> None:
    """Raise a `ScenarioError` for an `[[args]]` table that breaks the format, or for arguments too large.

    Each table gives a literal `value`, or a `shape` (a list of non-negative integers) with an optional
    `seed` (a non-negative integer); `dtype` names a numeric numpy dtype (float32 by default). With `abstract`
    (`payload = "abstract"`) a `shape` is an abstract argument, which holds no bytes.
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
        sizes.append(0 if abstract else arg_bytes(table))
    budget.check_program(sizes, mesh)


def _dtype(source: Source, index: int, name: Any) -> np.dtype:
    """`dtype` as a numeric numpy dtype."""
    return fields.dtype(_where(source, index, "dtype"), name)


def _where(source: Source, index: int, key: str) -> InFile:
    """Field `key` of `[[args]]` table number `index`."""
    return InFile(source, "args", key, f"[[args]] number {index}: ", index)


def _check_value(source: Source, index: int, value: Any, dtype: np.dtype) -> None:
    """`value` is a number or a rectangular array of numbers that `dtype` holds as `fields.cast_exactly` says
    (no value changed beyond rounding: 4.5 as int32, 1e40 as float32 are refused)."""
    try:
        array = np.asarray(value)
        ok = array.dtype.kind in "biuf" or array.size == 0
    except (ValueError, TypeError, OverflowError):
        ok = False
    if not ok:
        shown = repr(value) if len(repr(value)) < 60 else repr(value)[:57] + "..."
        raise source.error("args", "value", f"[[args]] number {index}: value={shown} must be a number or a "
                                            f"rectangular array of numbers of dtype {dtype}", index)
    problem = fields.cast_exactly(array, dtype, value)[1]
    if problem is not None:
        raise source.error("args", "value", f"[[args]] number {index}: value{problem}; change the value or "
                                            f"dtype", index)


def _check_drawn(source: Source, index: int, table: dict) -> None:
    """A drawn argument has a `shape` of non-negative integers and, if given, a non-negative integer `seed`."""
    if "shape" not in table:
        raise source.error("args", None, f"[[args]] number {index} needs `value` or `shape`", index)
    fields.shape(_where(source, index, "shape"), table["shape"], example="[8]")
    fields.integer(_where(source, index, "seed"), table.get("seed", 0), minimum=0)
