"""What every collective shares: finding its group, checking scalars, sending slices of arrays."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np

import layouts
import sim
from sim import Group, InvalidArgumentError, InvalidTypeError


def group_of(op: str, axis_name: Any, axis_index_groups: Any) -> tuple[sim.DeviceContext, Group]:
    """The calling device's context and its group for `op` over `axis_name`."""
    context = sim.current()
    if axis_index_groups is None and type(axis_name) is str:  # the common call, looked up once per device
        group = context.groups.get(axis_name)
        if group is None:
            group = context.groups[axis_name] = _group(op, context, axis_name, None)
        return context, group
    return context, _group(op, context, axis_name, axis_index_groups)


def _group(op: str, context: sim.DeviceContext, axis_name: Any, axis_index_groups: Any) -> Group:
    try:
        return context.mesh.group(context.device, axis_name, axis_index_groups)
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


def operand(op: str, device: int, name: str, value: Any, reduces: bool = False) -> np.ndarray:
    """`value` as a numpy array a collective may move (numeric, or a float8 type: `layouts.is_movable`) or,
    where it `reduces`, reduce (numeric: `layouts.is_numeric`); else a clear error. An array in another byte
    order (made inside the program: inputs are converted where they enter) comes back as a native copy, as
    JAX converts it, so that no protocol reinterprets its bytes."""
    array = np.asarray(value)
    dtype = array.dtype
    if dtype in layouts.NUMPY_NUMBERS:
        return array
    if not dtype.isnative:
        array = layouts.native_array(array)
        dtype = array.dtype
    if layouts.is_numeric(dtype):
        return array
    if layouts.is_movable(dtype):
        if not reduces:
            return array
        raise InvalidTypeError(f"device {device}: {op}: {name} has dtype {_shown(dtype)}; the float8 types are "
                               f"moved, not reduced (XLA's arithmetic on them is not modelled): convert {name} to "
                               f"bfloat16 or float32 before the {op}, or move it with a collective that only moves "
                               f"data")
    raise InvalidTypeError(f"device {device}: {op}: {name} has dtype {_shown(dtype)}; it must be numeric: bool, an "
                           f"integer, a float or complex number of numpy's, bfloat16, or (moved, not reduced) one of "
                           f"ml_dtypes' float8 types (the int4 types are not modelled)")


def _shown(dtype: np.dtype) -> str:
    """`dtype` as an error names it: an abstract payload's by its logical dtype ('abstract float8_e4m3fn')."""
    return f"abstract {layouts.logical(dtype)}" if sim.memory.is_hollow(dtype) else str(dtype)


def map_tree(fn: Callable[[Any], Any], tree: Any) -> Any:
    """`fn` applied to every leaf of a pytree of arrays, one collective call per leaf."""
    return sim.tree_map(fn, tree)


def axis_index(shape: tuple[int, ...], axis: int, index: Any) -> tuple:
    """An index tuple selecting `index` along `axis` of an array of `shape`."""
    return (slice(None),) * axis + (index,) + (slice(None),) * (len(shape) - axis - 1)


def same_across_group(op: str, members: tuple[int, ...], values: list[Any], what: str,
                      note: str = "") -> list[sim.Violation]:
    """Violations where a member's `what` differs from group index 0's (`note` ends each message); no run
    can skip them."""
    return [
        sim.Violation(members[i], f"mismatch: {what}", f"device {members[i]}: {op}: {what} is {values[i]} but device "
                      f"{members[0]} has {values[0]}; every device in the group must agree{note}")
        for i in range(1, len(values)) if values[i] != values[0]
    ]


def same_operands(op: str, group: Group) -> Callable[[list[Any]], list[sim.Violation]]:
    """The group check of a collective whose every member passes one operand (`args.buffer`) of the same
    dtype and shape."""
    def check(args: list[Any]) -> list[sim.Violation]:
        first = args[0].buffer
        shape, dtype = first.shape, first.dtype
        for a in args:
            buffer = a.buffer
            if buffer.shape != shape or buffer.dtype != dtype:
                break
        else:
            return []  # the common case, told without spelling out every member's operand
        kinds = [f"{a.buffer.dtype}{list(a.buffer.shape)}" for a in args]
        return same_across_group(op, group.members, kinds, "x")
    return check


def out_layout_of(op: str, device: int, layout: Any, rank: int) -> Any:
    """`layout` checked as the layout of a result of rank `rank` (None means row-major)."""
    if layout is None:
        return None
    if not isinstance(layout, layouts.Layout):
        raise InvalidTypeError(f"device {device}: {op}: out_layout={layout!r} must be a layouts.Layout or None")
    layout.check_rank(rank, f"device {device}: {op}: out_layout")
    return layout


def pack_slice(port: sim.Port, view: np.ndarray, layout: Any, **detail: Any) -> Generator:
    """The payload carrying `view`, a slice of a buffer in `layout`, and the header the receiver decodes by.

    The payload is the slice's bytes in the sender's memory order: a zero-copy view of the memory when
    they form one contiguous run, else a packed copy, which costs a timed "pack" step. (Given another
    layout than the buffer's, the payload holds the bytes in that layout's order, packed if need be.)
    """
    order = layout.major_to_minor
    if view.flags.c_contiguous and is_row_major(order):  # the common case, straight from memory
        return view, header_of(order)
    physical = view.transpose(order)
    runs = layouts.contiguous_runs(physical)
    if runs > 1:
        yield from sim.copy_step(port, "pack", physical.nbytes, runs, **detail)
        physical = np.ascontiguousarray(physical)
    return physical, header_of(order)


_ROW_MAJOR = tuple(tuple(range(rank)) for rank in range(33))
_HEADERS: dict[tuple[int, ...], dict] = {}


def row_major_everywhere(group_args: list[Any], also: Callable[[Any], bool] = lambda args: True) -> bool:
    """Whether every member's operand (`args.buffer`) and result (`args.out_layout`, None meaning row-major)
    are row-major and `also(args)` holds: then no payload needs packing or unpacking."""
    return all(is_row_major(a.buffer.layout.major_to_minor)
               and (a.out_layout is None or is_row_major(a.out_layout.major_to_minor)) and also(a)
               for a in group_args)


def is_row_major(order: tuple[int, ...]) -> bool:
    """Whether the major_to_minor `order` is the identity permutation."""
    return len(order) < len(_ROW_MAJOR) and order == _ROW_MAJOR[len(order)]


def header_of(order: tuple[int, ...]) -> dict:
    """The (shared, never modified) message header saying a payload's bytes lie in `order`."""
    header = _HEADERS.get(order)
    if header is None:
        header = _HEADERS[order] = {"major_to_minor": order}
    return header


def received(message: sim.Message) -> np.ndarray:
    """A message's payload as the logical array the sender sliced."""
    order = message.header.get("major_to_minor")
    if order is None or is_row_major(order):
        return message.payload
    return message.payload.transpose(np.argsort(order))


def unpack_into(port: sim.Port, message: sim.Message, target: np.ndarray, **detail: Any) -> Generator:
    """Write `message`'s values into `target` (a region of the receiver's memory, same elements).

    Scattering the payload into a region that is not one contiguous run, in the payload's order, costs
    a timed "unpack" step.
    """
    values = received(message)
    order = message.header.get("major_to_minor", tuple(range(values.ndim)))
    yield from unpack_values(port, values, order, target, **detail)


def unpack_values(port: sim.Port, values: np.ndarray, order: tuple[int, ...], target: np.ndarray,
                  **detail: Any) -> Generator:
    """Write `values`, whose bytes lie in `order` (a major_to_minor), into `target` as `unpack_into` does."""
    if target.flags.c_contiguous and is_row_major(order):  # one contiguous run: no step
        (target if target.shape == values.shape else target.reshape(values.shape))[...] = values
        return
    region = target.reshape(values.shape)  # only unit dimensions differ: a view of the memory
    if values.size and not np.may_share_memory(region, target):
        raise AssertionError(f"unpack_into: target {target.shape} cannot take values {values.shape} as a view")
    runs = layouts.contiguous_runs(region.transpose(order))
    if runs > 1:
        yield from sim.copy_step(port, "unpack", values.nbytes, runs, **detail)
    region[...] = values


def row_major(port: sim.Port, view: np.ndarray, **detail) -> Generator:
    """`view`'s values in row-major order: the memory itself when that is one contiguous run, else packed."""
    values, _ = yield from pack_slice(port, view, layouts.Layout.row_major(view.ndim), **detail)
    return values


def laid_out(port: sim.Port, values: np.ndarray, layout: layouts.Layout, **detail) -> Generator:
    """`values` (row-major) copied into a new buffer laid out with `layout`, a timed unpack where strided."""
    out = port.memory.view(port.memory.alloc(values.dtype, values.shape, layout))
    yield from unpack_values(port, values, tuple(range(values.ndim)), out, **detail)
    return out
