"""What every collective shares: finding its group, checking scalars, sending slices of arrays."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

import sim
from sim import Group, InvalidArgumentError, InvalidTypeError


def group_of(op: str, axis_name: Any, axis_index_groups: Any) -> tuple[sim.DeviceContext, Group]:
    """The calling device's context and its group for `op` over `axis_name`."""
    context = sim.current()
    try:
        return context, context.mesh.group(context.device, axis_name, axis_index_groups)
    except (InvalidArgumentError, InvalidTypeError) as error:
        raise type(error)(f"device {context.device}: {op}: {error}") from None


def canonical_axis(op: str, device: int, name: str, value: Any, rank: int, negative: bool = True) -> int:
    """`value` as an axis index into `rank` dimensions; negative values count from the end if `negative`."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise InvalidTypeError(f"device {device}: {op}: {name}={value!r} must be an int")
    low = -rank if negative else 0
    if not low <= value < rank:
        raise InvalidArgumentError(
            f"device {device}: {op}: {name}={value} must be in [{low}, {rank}) for rank {rank}"
        )
    return int(value) % rank


def operand(op: str, device: int, name: str, value: Any) -> np.ndarray:
    """`value` as a numeric numpy array, or a clear error."""
    array = np.asarray(value)
    if array.dtype.kind not in "biufc":
        raise InvalidTypeError(f"device {device}: {op}: {name} has dtype {array.dtype}; it must be numeric")
    return array


def map_tree(fn: Callable[[Any], Any], tree: Any) -> Any:
    """`fn` applied to every leaf of a pytree of arrays, one collective call per leaf."""
    return sim.tree_map(fn, tree)


def axis_index(shape: tuple[int, ...], axis: int, index: Any) -> tuple:
    """An index tuple selecting `index` along `axis` of an array of `shape`."""
    return (slice(None),) * axis + (index,) + (slice(None),) * (len(shape) - axis - 1)


def pack(view: np.ndarray) -> np.ndarray:
    """`view` as a contiguous payload: zero-copy when it already is, a packing copy when strided."""
    return view if view.flags.c_contiguous else view.copy(order="C")


def same_across_group(op: str, members: tuple[int, ...], values: list[Any], what: str) -> list[str]:
    """Violations where a member's `what` differs from group index 0's."""
    return [
        f"device {members[i]}: {op}: {what} is {values[i]} but device {members[0]} has {values[0]}; "
        f"every device in the group must agree"
        for i in range(1, len(values)) if values[i] != values[0]
    ]
