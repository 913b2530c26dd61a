"""A generated `Case` written as a `[collective]` scenario file that `meshsim check` replays exactly.

Every input is literal, so the file is the case: integers as numbers; floats as their shortest decimal
form, which reads back to the same bits in every float dtype (bfloat16, float16 and float8 included, -0.0,
infinities and subnormals); a float array holding a NaN as `{bits = [...]}`, hex strings of its elements'
bits, so NaN payloads and signs survive; an array with no elements as `{fill = 0, shape = [...]}`. The
data dtype and, when it is not int32, the dtype of offsets and sizes go in `[inputs]`.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

import collectives
import layouts
from scenarios.campaign._answers import Case


def scenario_text(case: Case, title: str, notes: list[str]) -> str:
    """The TOML text of a scenario file for `case`, with `title` and `notes` as comment lines at the top.

    Raises:
        InvalidArgumentError: the case holds a pytree (a scenario file gives one array per argument).
    """
    definition = collectives.definition(case.op)
    lines = [f"# {_comment(note)}" for note in notes]
    lines += [f"title = {_string(title)}", "", "[mesh]", f"axes = {_table(case.mesh_shape)}", "",
              "[collective]", f"op = {_string(case.op)}"]
    lines += [f"{key} = {_value(value)}" for key, value in case.params.items() if value is not None]
    arrays = dict(zip(definition.arrays, case.args))
    data = [per_device[0] for name, per_device in arrays.items() if name not in definition.index_arrays]
    index = [per_device[0] for name, per_device in arrays.items() if name in definition.index_arrays]
    settings = {}
    if data:
        settings["dtype"] = _array_dtype(data[0]).name
    if index and _array_dtype(index[0]) != np.dtype(np.int32):
        settings["index_dtype"] = _array_dtype(index[0]).name
    if settings:
        lines += ["", "[inputs]"] + [f"{key} = {_string(value)}" for key, value in settings.items()]
    for d in range(case.devices):
        lines += ["", f"[[device]]  # device {d}"]
        lines += [f"{name} = {_literal(np.asarray(per_device[d]))}" for name, per_device in arrays.items()]
    return "\n".join(lines) + "\n"


def _array_dtype(value: Any) -> np.dtype:
    """The dtype of one device's argument, which must be one array (not a pytree)."""
    if not isinstance(value, (np.ndarray, np.generic)):
        raise layouts.InvalidArgumentError(f"a scenario file gives one array per argument; value of type "
                                           f"{type(value).__name__} must be a numpy array (no pytrees)")
    return value.dtype


def _literal(array: np.ndarray) -> str:
    """One array as TOML that reads back bit for bit in its dtype (see the module docstring)."""
    if array.size == 0:
        return f"{{fill = 0, shape = {list(array.shape)}}}"
    floating = layouts.is_any_float(array.dtype)
    if floating and np.isnan(array.astype(np.float64)).any():
        unsigned = array.view(np.dtype(f"u{array.dtype.itemsize}"))
        width = 2 * array.dtype.itemsize
        return f"{{bits = {_nested(unsigned, lambda w: _string(f'0x{int(w):0{width}x}'))}}}"
    if floating:
        return _nested(array.astype(np.float64), _float)
    return _nested(array, lambda v: str(int(v)))


def _nested(array: np.ndarray, show: Any) -> str:
    """`array` as nested TOML arrays, each element written by `show`."""
    if array.ndim == 0:
        return show(array[()])
    return "[" + ", ".join(_nested(row, show) for row in array) + "]"


def _float(value: float) -> str:
    """A float as TOML: the shortest decimal that reads back to the same float64, or inf/-inf."""
    value = float(value)
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def _value(value: Any) -> str:
    """A parameter as TOML: strings, booleans, integers, and lists (tuples too) of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, str):
        return _string(value)
    return "[" + ", ".join(_value(v) for v in value) + "]"


def _table(mapping: dict[str, int]) -> str:
    """An inline TOML table of names and integers, e.g. `{x = 2, y = 1}`."""
    return "{" + ", ".join(f"{_string(k)} = {int(v)}" for k, v in mapping.items()) + "}"


def _string(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(str(text), ensure_ascii=False)


def _comment(text: str) -> str:
    """`text` safe inside a TOML comment: one line, no control characters."""
    return "".join(c if c.isprintable() else " " for c in text)
