"""A scenario file written from a drawn case (`strategies.Case`): its mesh, its `[collective]` table and one
`[[device]]` table per device, every value a TOML literal."""

from __future__ import annotations

from typing import Any

import numpy as np
from strategies import Case

import collectives


def _toml(value: Any) -> str:
    """A TOML literal of a scenario value: names, ints, booleans, lists, and (nested) lists of numbers."""
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(float(value)) if isinstance(value, (float, np.floating)) else str(int(value))


def _array_toml(array: np.ndarray) -> str:
    """An array as a TOML literal; an empty one as `{fill, shape}` (a literal [] would lose its shape)."""
    if array.size == 0:
        return f"{{fill = 0, shape = {_toml(list(array.shape))}}}"
    return _toml(array.tolist()) if array.ndim else _toml(array.item())


def scenario_text(case: Case) -> str:
    """A scenario file for `case`: its mesh, its `[collective]` table and one `[[device]]` table per device."""
    d = collectives.definition(case.op)
    params = {k: v for k, v in case.params.items() if v is not None}
    lines = ["[mesh]", "axes = {" + ", ".join(f"{a} = {n}" for a, n in case.mesh_shape.items()) + "}", "",
             "[collective]", f'op = "{case.op}"', *(f"{k} = {_toml(v)}" for k, v in params.items())]
    if d.arrays:
        dtype = np.asarray(case.args[d.arrays.index(d.data_arrays[0])][0]).dtype
        lines += ["", "[inputs]", f'dtype = "{dtype}"']
        for i in range(case.devices):
            lines += ["", "[[device]]", *(f"{name} = {_array_toml(np.asarray(arg[i]))}"
                                          for name, arg in zip(d.arrays, case.args))]
    return "\n".join(lines) + "\n"
