"""`Array` and `device_put`: a global array placed on simulated devices, each block in a device memory.

An `Array` holds one `Shard` per device of its sharding: the block's index in the global array and a
`Buffer` in a `LocalMemory`. By default every placement gets fresh memories of its own (freed with the
array); pass `memories=` (e.g. a `Simulation`'s) to place into existing ones. Reading a block always
decodes its bytes through its layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import layouts
from layouts import AutoLayout, Format, Layout
from sim._errors import InvalidArgumentError, InvalidTypeError
from sim.memory._abstract import is_abstract
from sim.memory._buffer import Buffer
from sim.memory._memory import LocalMemory
from sim.memory._sharding import Index, Sharding, SingleDeviceSharding, check_sharding


@dataclass(frozen=True, eq=False)
class Shard:
    """One device's block of an `Array`: where it sits in the global array and in the device memory."""

    device: int
    index: Index
    memory: LocalMemory
    buffer: Buffer

    @property
    def data(self) -> np.ndarray:
        """The block's values: a view of the device memory, decoded through the layout."""
        return self.memory.view(self.buffer)

    def raw(self) -> np.ndarray:
        """The bytes holding the block's values (what a JAX CPU buffer holds; padding excluded)."""
        return self.memory.raw(self.buffer)

    @property
    def on_device_size_in_bytes(self) -> int:
        """Bytes the block occupies, padded to whole tiles (JAX's `on_device_size_in_bytes()`)."""
        return self.buffer.on_device_size_in_bytes


class Array:
    """A global array on the simulated devices: shape, dtype, `format` and one `Shard` per device.

    `committed` arrays were placed on purpose (`device_put` with a sharding or a Format): compiled
    functions take them only in the layout they were compiled for. Uncommitted ones (no target given)
    have the default row-major layout on device 0 and are relaid out as needed. `np.asarray(a)` gives the
    global values.

    >>> a = device_put(np.arange(6).reshape(2, 3), Format(Layout((1, 0)), SingleDeviceSharding(0)))
    >>> a.format.layout, a.committed, a.addressable_shards[0].raw().view(np.int64).tolist()
    (Layout(major_to_minor=(1, 0)), True, [0, 3, 1, 4, 2, 5])
    """

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, format: Format, committed: bool,
                 shards: Sequence[Shard]) -> None:
        self.shape, self.dtype, self.format, self.committed = tuple(shape), np.dtype(dtype), format, committed
        self.shards = tuple(shards)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def layout(self) -> Layout:
        return self.format.layout

    @property
    def sharding(self) -> Sharding:
        return self.format.sharding

    @property
    def addressable_shards(self) -> list[Shard]:
        """Every device's block, in device order."""
        return list(self.shards)

    def shard(self, device: int) -> Shard:
        """Device `device`'s block; raises if the array has none there."""
        for shard in self.shards:
            if shard.device == device:
                return shard
        raise InvalidArgumentError(f"device={device} holds no block of this array; it lives on "
                                   f"{[s.device for s in self.shards]}")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        for shard in self.shards:
            out[shard.index] = shard.data
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        kind = "committed" if self.committed else "uncommitted"
        return f"Array({self.dtype}{list(self.shape)}, {self.layout!r}, {self.sharding!r}, {kind})"


def device_put(x: Any, target: Format | Sharding | None = None, *,
               memories: Sequence[LocalMemory] | None = None) -> Array:
    """Place the global array `x` on the simulated devices, each block laid out as `target` asks.

    Args:
        x: a numpy array (or anything `np.asarray` takes), or an `Array` to copy to a new format. An array in
            non-native byte order (big-endian '>f4' on a little-endian machine) is converted to native once,
            by a copy, as `jax.device_put` does: device memories hold native bytes, and the Array's dtype is
            native (float32).
        target: a `Format(layout, sharding)`; a bare sharding (row-major blocks); or None for an uncommitted
            row-major array on device 0 (an `Array` passed with None is returned as it is).
        memories: device memories to place into, indexed by device id; fresh ones by default.

    Returns:
        An `Array`, committed unless `target` is None, whose blocks hold `x` in the requested layout. A
        block whose bytes are already one contiguous run of `x` in that layout (rows of a row-major `x`)
        is not copied: the device memory adopts `x`'s bytes read-only, so the Array aliases `x` (write
        into `x` and the device bytes change). Other blocks are copies.

    Raises:
        InvalidArgumentError: `Layout.AUTO` (only compiled functions choose layouts), a layout whose rank
            is not `x`'s, a spec that does not divide `x`.
        InvalidTypeError: `target` of the wrong kind, a non-numeric `x`.

    >>> import numpy as np
    >>> from layouts import Format, Layout
    >>> from sim import Mesh, NamedSharding, P, device_put
    >>> device_put(np.ones((4, 2)), Format(Layout((1, 0)), NamedSharding(Mesh({'x': 2}), P('x')))).shards[1].index
    (slice(2, 4, None), slice(0, 2, None))
    >>> device_put(np.arange(4, dtype='>i4')).dtype  # a big-endian array, converted where it enters
    dtype('int32')
    """
    if isinstance(x, Array) and target is None:
        return x
    if is_abstract(x):
        raise InvalidTypeError(f"device_put: x is abstract ({x!r}: a shape and dtype, no values); device_put places "
                               f"values: give a shard_map an abstract operand to run without bytes, or trace a "
                               f"compiled function with it (`sim.jit(f).trace(x)`)")
    value = layouts.native_array(x)
    if not layouts.is_movable(value.dtype):
        raise InvalidTypeError(f"device_put: x has dtype {value.dtype}; it must be numeric, bool or a float8 type")
    layout, sharding = _resolve(target, value.ndim)
    committed = target is not None
    placed = []
    for device, index in sharding.indices(value.shape).items():
        memory = memories[device] if memories is not None else LocalMemory(device)
        placed.append(Shard(device, index, memory, memory.place(value[index], layout)))
    return Array(value.shape, value.dtype, Format(layout, sharding), committed, placed)


def _resolve(target: Any, rank: int) -> tuple[Layout, Sharding]:
    """The concrete layout and sharding `target` asks for an array of rank `rank`."""
    if target is None:
        return Layout.row_major(rank), SingleDeviceSharding(0)
    if not isinstance(target, Format):
        return Layout.row_major(rank), check_sharding(target, "device_put: target")
    if isinstance(target.layout, AutoLayout):
        raise InvalidArgumentError(
            f"device_put: target={target!r}: Layout.AUTO is only for compiled functions; device_put needs a "
            f"concrete layout, e.g. Layout((1, 0)), or None for the default")
    if target.sharding is None:
        raise InvalidArgumentError(f"device_put: target={target!r} needs a sharding")
    sharding = check_sharding(target.sharding, "device_put: target.sharding")
    layout = target.layout or Layout.row_major(rank)
    layout.check_rank(rank, "device_put: target.layout")
    return layout, sharding

