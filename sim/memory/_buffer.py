"""`Buffer`: where an array lives in a device memory and how its bytes decode; and the raw bytes of numpy
arrays (`bytes_in_layout`, `address_of`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import layouts
from layouts import Layout
from sim._frozen import quick_init


@quick_init
@dataclass(frozen=True, slots=True)
class Buffer:
    """An array living in a device memory: where, and how its bytes decode.

    The first `nbytes` bytes at `offset` hold the values (the bytes a JAX CPU buffer holds for the same
    array and layout). A tiled layout reserves `on_device_size_in_bytes` (what JAX reports); the bytes
    past `nbytes` are padding that nothing writes or reads, undefined as on XLA:CPU.
    """

    device: int
    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]
    layout: Layout

    @property
    def nbytes(self) -> int:
        """Bytes that hold values."""
        return layouts.nbytes(self.dtype, self.shape, self.layout)

    @property
    def on_device_size_in_bytes(self) -> int:
        """Bytes reserved, padded to whole tiles: JAX's `on_device_size_in_bytes()` for this array."""
        return self.layout.size_in_bytes(self.dtype, self.shape)


def bytes_in_layout(array: np.ndarray, layout: Layout) -> np.ndarray | None:
    """`array`'s bytes as one uint8 run in `layout`'s order, viewed without a copy; None if they are not
    one contiguous run in that order (or `array` is empty)."""
    physical = array.transpose(layout.major_to_minor)
    if array.size == 0 or array.dtype.hasobject or not physical.flags.c_contiguous:
        return None
    return physical.reshape(-1).view(np.uint8)


def address_of(array: np.ndarray) -> int:
    """Where `array`'s first byte is in the process's memory."""
    return array.__array_interface__["data"][0]
