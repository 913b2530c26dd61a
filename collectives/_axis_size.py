"""`axis_size`: the number of devices along a mesh axis, a constant every device knows without communication."""

from __future__ import annotations

from typing import Any

from collectives import _batch_rules as batch_rules
from collectives._algorithm import direct_only
from collectives._algorithms import check_algorithm
from collectives._common import group_of
from collectives._definition import AXIS_NAME, Definition, JaxBinding, NotLinear, Vma
from collectives._facts import LOCAL, WHOLE
from collectives._strategy import axes_only


def axis_size(axis_name: Any, *, algorithm: str = "direct") -> int:
    """The size of the mapped axis `axis_name` as a Python int; no message is sent and nothing is recorded.

    For a tuple of names it is the product of their sizes, as in `jax.lax.axis_size`. The result is a
    constant, the same on every device: in a program it is invariant along every axis (JAX folds it; a
    shard_map that returns it gives a 0-d int32). `algorithm` ('direct' or 'auto') is checked and changes
    nothing: there are no messages.

    Example on a 2x2 mesh {'x': 2, 'y': 2}: `axis_size('y')` gives 2 on every device, and
    `axis_size(('x', 'y'))` gives 4.

    Raises:
        InvalidArgumentError: an unknown or repeated axis name (JAX 0.10.2 multiplies a repeated name in: its
            `axis_size(('x', 'x'))` is the square), an unknown algorithm.
        MeshError: called outside a program run by `sim.shard_map`.
    """
    context, group = group_of("axis_size", axis_name, None)
    check_algorithm("axis_size", context.device, algorithm, group.size, ALGORITHMS)
    return group.size


ALGORITHMS = direct_only("direct: no messages: each device reads the axis's size from the mesh it runs on.",
                         messages=lambda shape: 0)

AXIS_SIZE = Definition(
    name="axis_size", function=axis_size, arrays=(), params=(AXIS_NAME,), vma=Vma.INVARIANT,
    batch=batch_rules.unbatched, algorithms=ALGORITHMS, reduction=None, sizes=LOCAL, sweep=None, drawing=WHOLE,
    transpose=NotLinear("axis_size takes no operand: its result is a constant, never linear in a program's inputs"),
    # JAX binds no primitive: `lax.axis_size` is psum(1, axis_name) on a constant, folded to a Python int
    jax=JaxBinding("axis_size", (), lambda jax, p: lambda: jax.lax.axis_size(**p)),
    strategy=axes_only,
)
