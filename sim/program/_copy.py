"""Local copies inside one device's memory: packing, unpacking and relayouts, timed and traced.

A copy between a contiguous run of bytes and a strided region costs the device time: a fixed overhead per
contiguous run it touches plus its bytes over the device's copy bandwidth (`CopyCost`). A copy that moves
one contiguous run to another is free (a send straight from memory, or a receive straight into it), so it
has no step at all. Every costed copy becomes a `CopyRecord` in the run's trace.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

import layouts
from layouts import Layout
from sim._errors import InvalidTypeError
from sim.engine._driver import current_or_none
from sim.engine._port import Port
from sim.engine._rendezvous import Collective
from sim.network._mesh import Group, Mesh
from sim.network._network import CopyCost
from sim.program._varying import Varying
from sim.record._trace import CopyRecord


def copy_cost(mesh: Mesh) -> CopyCost:
    """The copy cost of `mesh`'s devices."""
    return mesh.copy_cost


def copy_step(port: Port, kind: str, size_bytes: int, runs: int, **detail: Any) -> Generator:
    """Spend the time of one strided copy on `port`'s device and record it; nothing for a contiguous one."""
    duration_s = copy_cost(port.mesh).time_s(size_bytes, runs)
    if duration_s <= 0:
        return
    env = port.transport.env
    start_s = float(env.now)
    device = detail.pop("device", port.device)
    port.transport.trace.add(CopyRecord(device, device, size_bytes, start_s, start_s, start_s + duration_s,
                                    port.collective.name, port.call, {"runs": runs, **detail}, kind=kind))
    yield env.timeout(duration_s)


def relayout_runs(source: np.ndarray, layout: Layout) -> int:
    """Contiguous runs touched when `source` is read in `layout`'s memory order."""
    return layouts.contiguous_runs(source.transpose(layout.major_to_minor))


@dataclass(frozen=True)
class _Relayout:
    source: np.ndarray
    layout: Layout
    device: int
    what: str


def _relayout_protocol(port: Port, args: _Relayout) -> Generator:
    buffer = port.memory.alloc(args.source.dtype, args.source.shape, args.layout)
    target = port.memory.view(buffer)
    yield from copy_step(port, "relayout", buffer.nbytes, relayout_runs(args.source, args.layout),
                         device=args.device, what=args.what, major_to_minor=args.layout.major_to_minor)
    target[...] = args.source
    return target


def relayout(array: np.ndarray, layout: Layout, what: str, device: int | None = None) -> np.ndarray:
    """Inside a device program: copy `array` into a new buffer laid out with `layout`, as a timed step.

    The copy runs as a one-device step on the program's clock and appears in the trace as a
    `CopyRecord(kind="relayout")` naming `what` (and `device`, the device id to report if it differs
    from the simulation's). Returns the new buffer's logical view.
    """
    context = current_or_none()
    assert context is not None, "relayout runs inside a simulated program"
    group = Group((context.device,), 0)
    args = _Relayout(np.asarray(array), layout, context.device if device is None else device, what)
    return context.collective(Collective("relayout", group, (("what", what),), args, _relayout_protocol))


def with_layout_constraint(x: Any, layout: Layout) -> Any:
    """`x` with its bytes laid out in `layout`: pins the layout of an intermediate value.

    Inside a device program (a `sim.jit` function or a `sim.shard_map` body) the result lives in the
    device's memory with `layout`: when `x` is already such a buffer it is returned as it is, otherwise
    it is copied by a timed "relayout" step that shows in the trace. Values never change. Outside a
    program the result is a host array viewed through `layout`'s strides.

    Example, as in the layout guide: `y = with_layout_constraint(x.T, Layout((0, 1)))` materialises the
    transpose row-major instead of leaving it a column-major view of `x`.

    Raises:
        InvalidTypeError: `layout` is not a concrete `Layout` (AUTO is for compiled functions' formats).
        InvalidArgumentError: `layout` does not fit the rank of `x`.
    """
    if not isinstance(layout, Layout):
        raise InvalidTypeError(f"layout={layout!r} must be a concrete layouts.Layout")
    array = np.asarray(x)
    layout.check_rank(array.ndim, "with_layout_constraint")
    context = current_or_none()
    if context is None:
        return layouts.decode(layouts.encode(array, layout), array.dtype, array.shape, layout)
    found = context.memory.find(array)
    if found is not None and found.layout == layout:
        return x
    return _retyped(relayout(array, layout, "with_layout_constraint"), x)


def _retyped(result: np.ndarray, like: Any) -> Any:
    """`result` with `like`'s device-variance type and program variable: a layout is not a new value."""
    if not isinstance(like, Varying):
        return result
    typed = result.view(Varying)
    typed.vma, typed.variable = like.vma, like.variable
    return typed
