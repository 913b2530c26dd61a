"""`LocalMemory`: one device's flat byte address space, holding arrays at offsets."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import layouts
from layouts import Layout

_ALIGN_BYTES = 64
_MIN_SEGMENT_BYTES = 1 << 20
_MAX_SPARE_BYTES = 64 << 20


@dataclass(frozen=True)
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


class LocalMemory:
    """A device's memory: a flat address space with a bump allocator.

    The address space grows in segments so that views handed out earlier stay valid; an offset names one
    byte of the whole space. Reading an array always goes through `layouts.decode`.

    >>> memory = LocalMemory(0)
    >>> buffer = memory.store(np.array([[1, 2], [3, 4]], np.int8), Layout((1, 0)))
    >>> memory.raw(buffer).tolist(), memory.view(buffer).tolist()
    ([1, 3, 2, 4], [[1, 2], [3, 4]])
    """

    def __init__(self, device: int) -> None:
        self.device = device
        self._segments: list[tuple[int, np.ndarray]] = []
        self._top = 0
        self._by_address: dict[int, Buffer] = {}

    @property
    def size_bytes(self) -> int:
        """Bytes allocated so far."""
        return self._top

    def alloc(self, dtype, shape: tuple[int, ...], layout: Layout | None = None) -> Buffer:
        """Reserve zeroed space for an array of `dtype` and `shape` laid out with `layout` (default row-major).

        Raises:
            ValueError: `layout` does not fit the rank of `shape`.
        """
        shape = tuple(int(n) for n in shape)
        layout = layout or Layout.row_major(len(shape))
        size = layout.size_in_bytes(np.dtype(dtype), shape)
        base, segment = self._segments[-1] if self._segments else (0, np.empty(0, np.uint8))
        start = -(-self._top // _ALIGN_BYTES) * _ALIGN_BYTES
        if not self._segments or start + size > base + segment.size:  # a 0-byte array needs a segment too
            # room for small arrays to follow, but never a large spare region behind a large array
            grown = max(size, min(2 * segment.size, _MAX_SPARE_BYTES), _MIN_SEGMENT_BYTES)
            base, start = base + segment.size, base + segment.size
            self._segments.append((base, np.zeros(grown, np.uint8)))
        self._top = start + size
        buffer = Buffer(self.device, start, np.dtype(dtype), shape, layout)
        self._by_address[self._address(buffer)] = buffer
        return buffer

    def raw(self, buffer: Buffer) -> np.ndarray:
        """The bytes holding `buffer`'s values (a uint8 view of the memory, padding excluded)."""
        for base, segment in reversed(self._segments):
            if buffer.offset >= base:
                return segment[buffer.offset - base : buffer.offset - base + buffer.nbytes]
        raise ValueError(f"offset {buffer.offset} is not in device {self.device}'s memory")

    def view(self, buffer: Buffer) -> np.ndarray:
        """The logical array `buffer` holds, as a writable view of the memory."""
        return layouts.decode(self.raw(buffer), buffer.dtype, buffer.shape, buffer.layout)

    def store(self, array, layout: Layout | None = None) -> Buffer:
        """Allocate a buffer laid out with `layout` (default row-major) and write `array` into it."""
        array = np.asarray(array)
        buffer = self.alloc(array.dtype, array.shape, layout)
        self.view(buffer)[...] = array
        return buffer

    def find(self, array: np.ndarray) -> Buffer | None:
        """The buffer whose whole view `array` is, if any (so operands need no copy)."""
        if not isinstance(array, np.ndarray) or array.size == 0:
            return None
        buffer = self._by_address.get(array.__array_interface__["data"][0])
        if buffer is None or buffer.shape != array.shape or buffer.dtype != array.dtype:
            return None
        return buffer if self.view(buffer).strides == array.strides else None

    def resident(self, array, layout: Layout | None = None) -> Buffer:
        """`array`'s buffer if it already lives here, else a copy of it.

        The copy is laid out with `layout`, or by default in the dimension order `array`'s own strides
        walk (row-major for a C-contiguous array), so a block arriving from elsewhere keeps its layout.
        """
        found = self.find(array)
        if found is not None:
            return found
        array = np.asarray(array)
        return self.store(array, layout or layouts.layout_of(array))

    def _address(self, buffer: Buffer) -> int:
        raw = self.raw(buffer)
        return raw.__array_interface__["data"][0]
