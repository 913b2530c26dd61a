"""`axis_index`: the calling device's position along a mesh axis, without communication."""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives._common import group_of
from collectives._vma import INDEX, typed


def axis_index(axis_name: Any) -> np.ndarray:
    """This device's index along `axis_name` as an int32 scalar; no message is sent.

    For a tuple of names the index is row-major over the names in the tuple's order (first name most
    major), whatever the mesh order, as in `jax.lax.axis_index`.

    Example on a 2x2 mesh {'x': 2, 'y': 2} (device d at x = d // 2, y = d % 2): `axis_index('y')` gives
    0, 1, 0, 1 on devices 0..3, and `axis_index(('y', 'x'))` gives 0, 2, 1, 3.

    Raises:
        InvalidArgumentError: an unknown or repeated axis name.
    """
    return typed("axis_index", INDEX, axis_name, [], lambda: _axis_index(axis_name), {"axis_name": axis_name})


def _axis_index(axis_name: Any) -> np.ndarray:
    context, group = group_of("axis_index", axis_name, None)
    memory = context.memory
    return memory.view(memory.store(np.array(group.index, np.int32)))
