"""`LocalMemory`: one device's flat byte address space, holding arrays at offsets.

A memory is a list of segments, each a uint8 array placed at an offset of the address space. Most
segments are its own (zeroed numpy memory that a bump allocator fills), but two kinds are other arrays'
bytes, so that placing inputs and assembling outputs need not copy:

- `adopt` holds a caller's block as it is: the segment is a read-only view of the caller's bytes. Device
  code sees it as it sees a JAX array, immutable ("assignment destination is read-only"); the bytes stay
  the caller's, so the memory aliases the caller's array (write into that array and the device's bytes
  change with it).
- `reserve` offers a region of another array (a block of a global output) to the next `alloc` of its
  dtype and shape in row-major order; that allocation takes the region as its storage, so the values a
  collective writes land in the global output directly.
"""

from __future__ import annotations

import math

import numpy as np

import layouts
from layouts import InvalidArgumentError, Layout
from sim.memory._abstract import buffer_dtype, hollow_empty, is_hollow
from sim.memory._buffer import Buffer, address_of, bytes_in_layout
from sim.memory._meter import MemoryMeter

_ALIGN_BYTES = 64
_MIN_SEGMENT_BYTES = 1 << 12  # one page: a mesh of many devices holding little costs little
_MAX_SPARE_BYTES = 64 << 20


class LocalMemory:
    """A device's memory: a flat address space with a bump allocator.

    The address space grows in segments so that views handed out earlier stay valid; an offset names one
    byte of the whole space. Reading an array always goes through `layouts.decode`. With a `meter` (a run's
    `MemoryMeter`), every array the memory comes to hold is charged to it first, and one that would pass the
    run's limit raises `MemoryLimitError` instead of being held.

    >>> memory = LocalMemory(0)
    >>> buffer = memory.store(np.array([[1, 2], [3, 4]], np.int8), Layout((1, 0)))
    >>> memory.raw(buffer).tolist(), memory.view(buffer).tolist()
    ([1, 3, 2, 4], [[1, 2], [3, 4]])
    """

    def __init__(self, device: int, meter: MemoryMeter | None = None) -> None:
        self.device = device
        self.meter = meter  # counts every allocation against the run's limit; None counts nothing
        self._segments: list[tuple[int, np.ndarray]] = []
        self._open: tuple[int, np.ndarray] | None = None  # the segment the bump allocator fills
        self._open_address = 0  # where its bytes start in the process's memory
        self._top = 0
        self._by_address: dict[int, Buffer] = {}
        # adopted blocks not yet in `_by_address` (their address is read only when `find` needs it), in order
        self._unaddressed: list[tuple[np.ndarray, Buffer, int | None]] = []  # (bytes, buffer, address if known)
        self._reserved: list[np.ndarray] = []
        # each buffer handed out and its view, each keeping the other alive (so an id here is never reused)
        self._views: dict[int, np.ndarray] = {}  # by id(buffer)
        self._owners: dict[int, Buffer] = {}  # by id(view)

    @property
    def size_bytes(self) -> int:
        """Bytes allocated so far."""
        return self._top

    def alloc(self, dtype, shape: tuple[int, ...], layout: Layout | None = None) -> Buffer:
        """Reserve zeroed space for an array of `dtype` and `shape` laid out with `layout` (default row-major).

        A pending region from `reserve` of this dtype and shape is taken first when the layout is row-major.

        Raises:
            ValueError: `layout` does not fit the rank of `shape`.
            MemoryLimitError: the run's memories would hold more than its limit (with a `meter`).
        """
        shape, dtype = tuple(map(int, shape)), np.dtype(dtype)
        row_major = Layout.row_major(len(shape))
        layout = layout or row_major
        # a row-major layout made for this rank needs no check and pads nothing
        size = math.prod(shape) * dtype.itemsize if layout is row_major else layout.size_in_bytes(dtype, shape)
        if is_hollow(dtype):  # an abstract array: address space only, never written
            self._charge("a new abstract array", dtype, shape, size)
            return self._attach(hollow_empty((size,), np.uint8).view(np.uint8), dtype, shape, layout, writable=True)
        if self._reserved and (layout is row_major or layout == row_major):
            for k, region in enumerate(self._reserved):
                if region.dtype == dtype and region.shape == shape:
                    self._charge("a block of a global output", dtype, shape, size)
                    del self._reserved[k]
                    return self._take(region, dtype, shape, layout)
        self._charge("a new array", dtype, shape, size)
        start = -(-self._top // _ALIGN_BYTES) * _ALIGN_BYTES
        base, segment = self._open or (0, np.empty(0, np.uint8))
        if self._open is None or start + size > base + segment.size:  # a 0-byte array needs a segment too
            # room for small arrays to follow, but never a large spare region behind a large array
            grown = max(size, min(2 * segment.size, _MAX_SPARE_BYTES), _MIN_SEGMENT_BYTES)
            start = self._append(_zeros_aligned(grown))
            self._open = self._segments[-1]
            self._open_address = address_of(self._open[1])
        self._top = start + size
        base, segment = self._open
        buffer = Buffer(self.device, start, dtype, shape, layout)
        count = math.prod(shape)
        if count and layout is row_major:  # C order over the segment's bytes: decode's own view, made directly
            view = np.frombuffer(segment, dtype, count, start - base)
            return self._register(buffer, None, self._open_address + start - base,
                                  view if len(shape) == 1 else view.reshape(shape))
        raw = segment[start - base : start - base + count * dtype.itemsize]
        return self._register(buffer, raw, self._open_address + start - base)

    def alloc_view(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """`view(alloc(dtype, shape))` for a numpy `dtype` and a tuple of ints `shape`, row-major: the same
        buffer, charge and view, made without converting the arguments when the array fits the open segment
        (the allocation of a call that every member of a group makes alike)."""
        count = math.prod(shape)
        size = count * dtype.itemsize
        start = -(-self._top // _ALIGN_BYTES) * _ALIGN_BYTES
        opened = self._open
        if self._reserved or not count or opened is None or start + size > opened[0] + opened[1].size \
                or (dtype.metadata is not None and is_hollow(dtype)):
            return self.view(self.alloc(dtype, shape))
        meter = self.meter
        if meter is not None:  # `MemoryMeter.charge`, its sum and comparison here (it raises past the limit)
            if meter.held_bytes + size > meter.max_memory_bytes:
                meter.charge(self.device, "a new array", dtype, shape, size)
            else:
                meter.held_bytes += size
        self._top = start + size
        base, segment = opened
        layout = _ROW_MAJOR.get(len(shape)) or _row_major(len(shape))
        buffer = Buffer(self.device, start, dtype, shape, layout)
        view = np.frombuffer(segment, dtype, count, start - base)
        if len(shape) != 1:
            view = view.reshape(shape)
        self._by_address[self._open_address + start - base] = buffer
        self._views[id(buffer)] = view
        self._owners[id(view)] = buffer
        return view

    def adopt(self, array: np.ndarray, layout: Layout | None = None) -> Buffer:
        """Hold `array` without copying it: a new segment that is a read-only view of its bytes.

        The buffer's view is read-only; the memory aliases `array` for as long as it lives.

        Raises:
            ValueError: `array`'s bytes are not one contiguous run in `layout` (default row-major), or it
                is empty; `store` copies such arrays.
        """
        array = np.asarray(array)
        layout = layout or Layout.row_major(array.ndim)
        raw = bytes_in_layout(array, layout)
        if raw is None:
            raise InvalidArgumentError(
                f"device {self.device}: adopt: array {array.dtype}{list(array.shape)} with strides "
                f"{array.strides} must be one non-empty contiguous run in layout {layout!r}"
            )
        size = layout.size_in_bytes(array.dtype, array.shape)
        self._charge("an input block held", array.dtype, array.shape, size)
        return self._attach(raw, array.dtype, array.shape, layout, writable=False)

    def place(self, array, layout: Layout | None = None) -> Buffer:
        """`array` held in `layout` (default row-major): adopted when its bytes allow it, else copied."""
        array = np.asarray(array)
        if layout is None and array.flags.c_contiguous and array.size and not array.dtype.hasobject \
                and not is_hollow(array.dtype):
            return self._adopt_rows(array)
        if bytes_in_layout(array, layout or Layout.row_major(array.ndim)) is None:
            return self.store(array, layout)
        return self.adopt(array, layout)

    def _adopt_rows(self, array: np.ndarray) -> Buffer:
        """`adopt` of a non-empty C-contiguous array in row-major order (what most input blocks are): the same
        segment, buffer and view, made without the general layout's checks."""
        self._charge("an input block held", array.dtype, array.shape, array.nbytes)
        raw = array.reshape(-1).view(np.uint8)  # a new view: the caller's array keeps its own flags
        raw.flags.writeable = False
        shape = array.shape
        return self._hold(raw, np.ndarray(shape, array.dtype, buffer=raw), Layout.row_major(len(shape)))

    def _hold(self, raw: np.ndarray, view: np.ndarray, layout: Layout, address: int | None = None) -> Buffer:
        """Hold an adopted block, already charged: `raw` its bytes (read-only uint8), `view` the block (read-only,
        C-contiguous, over the same bytes; `layout` row-major of its rank), in a segment of their own;
        `address`, where known, is where `raw` starts in the process's memory."""
        start = self._append(raw)
        self._open = None  # later small arrays start a segment of their own, after this one
        self._top = start + raw.size
        buffer = Buffer(self.device, start, view.dtype, view.shape, layout)
        self._unaddressed.append((raw, buffer, address))  # known by its address from the first `find` on
        self._views[id(buffer)] = view
        self._owners[id(view)] = buffer
        return buffer

    def _address_adopted(self) -> None:
        """Know the adopted blocks still waiting by their addresses, in the order they were adopted."""
        for raw, buffer, address in self._unaddressed:
            self._by_address[address_of(raw) if address is None else address] = buffer
        self._unaddressed = []

    def reserve(self, region: np.ndarray) -> None:
        """Offer `region` (writable, C-contiguous, non-empty) to the next row-major `alloc` of its dtype and
        shape; reservations are taken in the order they were made.

        The region must be zeroed, as any allocation is, until an allocation takes it.
        """
        self._check_region(region)
        self._reserved.append(region)

    def _check_region(self, region: np.ndarray) -> None:
        if region.size == 0 or not region.flags.c_contiguous or not region.flags.writeable:
            raise InvalidArgumentError(
                f"device {self.device}: reserve: region {region.dtype}{list(region.shape)} must be "
                f"non-empty, C-contiguous and writable"
            )

    def alloc_in(self, region: np.ndarray) -> np.ndarray | None:
        """`reserve(region)` then `view(alloc(region.dtype, region.shape))`, where the allocation takes `region`
        (writable, C-contiguous, non-empty, zeroed): its view, charged as `alloc` charges a reservation it
        takes. None, with nothing reserved or allocated, where an earlier reservation of that dtype and shape
        would be taken first."""
        dtype, shape = region.dtype, region.shape
        if any(r.dtype == dtype and r.shape == shape for r in self._reserved):
            return None
        self._check_region(region)
        self._charge("a block of a global output", dtype, shape, region.nbytes)
        return self.view(self._take(region, dtype, shape, Layout.row_major(len(shape))))

    def release(self) -> list[np.ndarray]:
        """Withdraw the reservations no allocation took, and return them (in the order they were made)."""
        untaken, self._reserved = self._reserved, []
        return untaken

    def raw(self, buffer: Buffer) -> np.ndarray:
        """The bytes holding `buffer`'s values (a uint8 view of the memory, padding excluded)."""
        for base, segment in reversed(self._segments):
            if buffer.offset >= base:
                return segment[buffer.offset - base : buffer.offset - base + buffer.nbytes]
        raise InvalidArgumentError(f"offset {buffer.offset} is not in device {self.device}'s memory")

    def view(self, buffer: Buffer) -> np.ndarray:
        """The logical array `buffer` holds, as a view of the memory (read-only for an adopted block); the
        same view object each time for a buffer this memory handed out (decoded once)."""
        view = self._views.get(id(buffer))  # a live buffer's id: `buffer` is the one handed out
        if view is not None:
            return view
        return layouts.decode(self.raw(buffer), buffer.dtype, buffer.shape, buffer.layout)

    def store(self, array, layout: Layout | None = None) -> Buffer:
        """Allocate a buffer laid out with `layout` (default row-major) and write `array` into it."""
        array = np.asarray(array)
        if layout is None or layout is Layout.row_major(array.ndim):  # `alloc`'s row-major buffer and view
            view = self.alloc_view(array.dtype, array.shape)
            view[...] = array
            return self._owners[id(view)]
        buffer = self.alloc(array.dtype, array.shape, layout)
        self.view(buffer)[...] = array
        return buffer

    def find(self, array: np.ndarray) -> Buffer | None:
        """The buffer whose whole view `array` is, if any (so operands need no copy)."""
        if not isinstance(array, np.ndarray) or array.size == 0:
            return None
        base, dtype = array.base, buffer_dtype(array)  # a `sim.Varying`'s `dtype` is its logical one
        for _ in range(3):  # a view of a buffer's view (a result, an input), through a few views of views
            buffer = self._owners.get(id(base))  # a live view's id: `base` is that view
            if buffer is not None:
                # a view within `base` with its shape and strides starts where it does: it is the whole buffer
                same = array.shape == base.shape and array.strides == base.strides and dtype == buffer_dtype(base)
                return buffer if same else None
            if base is None:
                break
            base = getattr(base, "base", None)
        if self._unaddressed:
            self._address_adopted()
        buffer = self._by_address.get(address_of(array))
        if buffer is None or buffer.shape != array.shape or buffer.dtype != dtype:
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

    def _attach(self, raw: np.ndarray, dtype: np.dtype, shape: tuple[int, ...], layout: Layout,
                writable: bool) -> Buffer:
        """A buffer whose bytes are `raw`, another array's, in a segment of their own."""
        if not writable:
            raw = raw.view()
            raw.flags.writeable = False
        start = self._append(raw)
        self._open = None  # later small arrays start a segment of their own, after this one
        self._top = start + layout.size_in_bytes(dtype, shape)
        buffer = Buffer(self.device, start, dtype, shape, layout)
        return self._register(buffer, self.raw(buffer), address_of(raw))

    def _take(self, region: np.ndarray, dtype: np.dtype, shape: tuple[int, ...], layout: Layout) -> Buffer:
        """A buffer of `dtype` and `shape` whose bytes are `region` (a reserved block, charged; `layout` row-major):
        `_attach`'s segment, buffer and view (C strides over the region's bytes, as decoding gives), made without
        decoding."""
        raw = region.reshape(-1).view(np.uint8)
        start = self._append(raw)
        self._open = None  # later small arrays start a segment of their own, after this one
        self._top = start + raw.size
        return self._register(Buffer(self.device, start, dtype, shape, layout), None, address_of(raw),
                              np.ndarray(shape, dtype, buffer=raw))

    def _append(self, segment: np.ndarray) -> int:
        """Place `segment` at the next aligned offset past every segment (and every allocation)."""
        end = max(self._top, self._segments[-1][0] + self._segments[-1][1].size if self._segments else 0)
        base = -(-end // _ALIGN_BYTES) * _ALIGN_BYTES
        self._segments.append((base, segment))
        return base

    def count_in(self, meter: MemoryMeter) -> None:
        """Charge every array held so far to `meter`, and every later one (a run taking this memory in)."""
        if self.meter is not meter:
            meter.charge(self.device, "the arrays held before the run", np.dtype(np.uint8), (self._top,), self._top)
            self.meter = meter

    def _charge(self, what: str, dtype: np.dtype, shape: tuple[int, ...], size: int) -> None:
        if self.meter is not None:
            if is_hollow(dtype):
                self.meter.abstract_bytes += size  # counted, not held: nothing is allocated
                return
            self.meter.charge(self.device, what, dtype, shape, size)

    def _register(self, buffer: Buffer, raw: np.ndarray | None, address: int, view: np.ndarray | None = None
                  ) -> Buffer:
        """Know `buffer` (whose value bytes are `raw`, at `address`) by its address, and its view (`view`, or
        decoded from `raw`) by its id."""
        if self._unaddressed:  # the blocks adopted before it come first, as if known at once
            self._address_adopted()
        self._by_address[address] = buffer
        if view is None:
            view = layouts.decode(raw, buffer.dtype, buffer.shape, buffer.layout)
        self._views[id(buffer)] = view
        self._owners[id(view)] = buffer
        return buffer


_ROW_MAJOR: dict[int, Layout] = {}  # `Layout.row_major(rank)` by rank, the same instances


def _row_major(rank: int) -> Layout:
    layout = _ROW_MAJOR[rank] = Layout.row_major(rank)
    return layout


def _zeros_aligned(size: int) -> np.ndarray:
    """`size` zeroed bytes whose first byte sits at a multiple of `_ALIGN_BYTES` in the process's memory, as
    XLA:CPU aligns its own buffers: so that every allocation (at an aligned offset) is aligned in the machine
    too, and a compiled computation given it as an operand reads it in place instead of copying it first."""
    raw = np.zeros(size + _ALIGN_BYTES, np.uint8)
    skip = -address_of(raw) % _ALIGN_BYTES
    return raw[skip:skip + size]
