"""`axis_index`: the calling device's position along a mesh axis, without communication."""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives import _batch_rules as batch_rules
from collectives._algorithm import direct_only
from collectives._algorithms import check_algorithm
from collectives._common import group_of
from collectives._definition import AXIS_NAME, Definition, JaxBinding, NotLinear, Vma
from collectives._facts import LOCAL, WHOLE
from collectives._strategy import axes_only
from collectives._vma import typed


def axis_index(axis_name: Any, *, algorithm: str = "direct") -> np.ndarray:
    """This device's index along `axis_name` as an int32 scalar; no message is sent.

    For a tuple of names the index is row-major over the names in the tuple's order (first name most
    major), whatever the mesh order, as in `jax.lax.axis_index`. `algorithm` ('direct' or 'auto') is
    checked and changes nothing: there are no messages.

    Example on a 2x2 mesh {'x': 2, 'y': 2} (device d at x = d // 2, y = d % 2): `axis_index('y')` gives
    0, 1, 0, 1 on devices 0..3, and `axis_index(('y', 'x'))` gives 0, 2, 1, 3.

    Raises:
        InvalidArgumentError: an unknown or repeated axis name, an unknown algorithm.
    """
    return typed(AXIS_INDEX, axis_name, [], lambda: _axis_index(axis_name, algorithm), {"axis_name": axis_name})


def _axis_index(axis_name: Any, algorithm: str = "direct") -> np.ndarray:
    context, group = group_of("axis_index", axis_name, None)
    check_algorithm("axis_index", context.device, algorithm, group.size, ALGORITHMS)
    memory = context.memory
    return memory.view(memory.store(np.array(group.index, np.int32)))


ALGORITHMS = direct_only("direct: no messages: each device reads its own position along the axis.",
                         messages=lambda shape: 0)

AXIS_INDEX = Definition(
    name="axis_index", function=axis_index, arrays=(), params=(AXIS_NAME,), vma=Vma.INDEX,
    batch=batch_rules.unbatched, algorithms=ALGORITHMS, reduction=None, sizes=LOCAL, sweep=None, drawing=WHOLE,
    transpose=NotLinear("axis_index takes no operand: its result is never linear in a program's inputs"),
    jax=JaxBinding("axis_index", ("axis_index",), lambda jax, p: lambda: jax.lax.axis_index(**p)),
    strategy=axes_only,
)
