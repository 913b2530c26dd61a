"""Bytes <-> logical arrays: the one encode/decode pair every part of meshsim reads memory through.

XLA:CPU (jax 0.10.2) places the elements of every array densely in `major_to_minor` order and ignores the
tiles when it places them: tiling changes only the size it reports (`Layout.size_in_bytes`). The default
(`apply_tiling=False`) is therefore what a JAX CPU buffer holds, byte for byte. `apply_tiling=True` gives
the order of a backend that honours tiles (XLA's tiled layout, as on TPU), with padding zero-filled.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from layouts._errors import InvalidArgumentError
from layouts._layout import Layout


def nbytes(dtype: Any, shape: tuple[int, ...], layout: Layout) -> int:
    """Bytes of values an array of `dtype` and `shape` holds with `layout`: every element exactly once.

    >>> nbytes(np.int32, (2, 3), Layout((0, 1), tiling=((2, 2),)))   # tiles pad only the reported size
    24
    """
    layout.check_rank(len(shape))
    return math.prod(shape) * np.dtype(dtype).itemsize


def strides(dtype: Any, shape: tuple[int, ...], layout: Layout) -> tuple[int, ...]:
    """Byte stride of each logical dimension in the dense placement (the one decode views through).

    >>> strides(np.int32, (2, 3), Layout((1, 0)))
    (4, 8)
    """
    physical = layout.physical_shape(shape)
    step = np.dtype(dtype).itemsize
    by_dim = [0] * len(shape)
    for position in reversed(range(len(physical))):
        by_dim[layout.major_to_minor[position]] = step
        step *= physical[position]
    return tuple(by_dim)


def offset(index: tuple[int, ...], dtype: Any, shape: tuple[int, ...], layout: Layout) -> int:
    """Byte offset of the element at logical `index`, e.g. `offset((1, 0), np.int32, (2, 3), Layout((1, 0)))`
    is 4."""
    return int(sum(i * s for i, s in zip(index, strides(dtype, shape, layout))))


def decode(raw: np.ndarray, dtype: Any, shape: tuple[int, ...], layout: Layout, *,
           apply_tiling: bool = False) -> np.ndarray:
    """The logical array held by the bytes `raw` (uint8) in `layout`.

    Args:
        raw: exactly `nbytes` bytes (or, with `apply_tiling`, the tiled bytes `encode` gives).
        apply_tiling: read the tiled order of a tile-honouring backend instead of XLA:CPU's dense order.

    Returns:
        A writable view of `raw` (writing into it writes the bytes); with `apply_tiling`, a copy.

    >>> decode(np.array([0, 0, 3, 0, 1, 0, 4, 0], np.uint8), np.int16, (2, 2), Layout((1, 0))).tolist()
    [[0, 1], [3, 4]]
    """
    shape = tuple(map(int, shape))
    if apply_tiling and layout.tiling:
        slots = _tiled_slots(shape, layout)
        physical = np.empty(math.prod(shape), np.dtype(dtype))
        physical[slots[slots >= 0]] = raw.view(np.dtype(dtype))[slots >= 0]
        return physical.reshape(layout.physical_shape(shape)).transpose(np.argsort(layout.major_to_minor))
    size = nbytes(dtype, shape, layout)
    if raw.dtype != np.uint8 or raw.ndim != 1 or raw.size != size:
        raise InvalidArgumentError(f"raw has {raw.dtype}[{raw.size}] but a {np.dtype(dtype)}{list(shape)} array "
                                   f"needs uint8[{size}]")
    if not size:
        return np.zeros(shape, np.dtype(dtype))
    if layout.major_to_minor == _IDENTITY.get(len(shape)):  # the dense row-major placement: C strides
        return np.ndarray(shape, np.dtype(dtype), buffer=raw)
    return np.ndarray(shape, np.dtype(dtype), buffer=raw, strides=strides(dtype, shape, layout))


_IDENTITY = {rank: tuple(range(rank)) for rank in range(33)}


def encode(array: Any, layout: Layout, *, apply_tiling: bool = False) -> np.ndarray:
    """The bytes (uint8, contiguous) that hold `array` in memory with `layout`.

    With `apply_tiling`, the bytes a tile-honouring backend holds: `len` is the fully tiled size and
    padding is zero.

    >>> encode(np.array([[1, 2, 3], [4, 5, 6]], np.int8), Layout((1, 0))).tolist()
    [1, 4, 2, 5, 3, 6]
    >>> encode(np.array([[1, 2, 3], [4, 5, 6]], np.int8), Layout((0, 1), ((2, 2),)), apply_tiling=True).tolist()
    [1, 2, 4, 5, 3, 0, 6, 0]
    """
    array = np.asarray(array)
    layout.check_rank(array.ndim)
    physical = np.ascontiguousarray(array.transpose(layout.major_to_minor)).reshape(-1)
    if apply_tiling and layout.tiling:
        slots = _tiled_slots(array.shape, layout)
        tiled = np.zeros(slots.size, array.dtype)
        tiled[slots >= 0] = physical[slots[slots >= 0]]
        return tiled.view(np.uint8)
    return physical.view(np.uint8)


def _tiled_slots(shape: tuple[int, ...], layout: Layout) -> np.ndarray:
    """For each slot of the tiled memory, the dense physical index it holds, or -1 for padding."""
    physical = layout.physical_shape(shape)
    slots = np.arange(math.prod(physical), dtype=np.int64).reshape(physical)
    for tile in layout.tiling:
        slots = _apply_tile(slots, tile)
    return slots.reshape(-1)


def _apply_tile(a: np.ndarray, tile: tuple[int, ...]) -> np.ndarray:
    """`a` tiled by `tile` over its minor-most dimensions: shape (major..., tile counts..., tile...)."""
    if len(tile) > a.ndim:
        a = a.reshape((1,) * (len(tile) - a.ndim) + a.shape)
    lead = a.ndim - len(tile)
    minor = a.shape[lead:]
    padded = [-(-d // t) * t for d, t in zip(minor, tile)]
    a = np.pad(a, [(0, 0)] * lead + [(0, p - d) for p, d in zip(padded, minor)], constant_values=-1)
    a = a.reshape(a.shape[:lead] + tuple(x for p, t in zip(padded, tile) for x in (p // t, t)))
    order = [*range(lead), *(lead + 2 * i for i in range(len(tile))), *(lead + 2 * i + 1 for i in range(len(tile)))]
    return a.transpose(order)


def layout_of(array: np.ndarray) -> Layout:
    """The permutation layout in which `array`'s strides walk memory (row-major when C-contiguous).

    >>> layout_of(np.zeros((2, 3)).T)
    Layout(major_to_minor=(1, 0))
    """
    if array.flags.c_contiguous:
        return Layout.row_major(array.ndim)
    order = sorted(range(array.ndim), key=lambda d: -abs(array.strides[d]) if array.shape[d] > 1 else 0)
    return Layout(tuple(order))


def contiguous_runs(physical: np.ndarray) -> int:
    """How many separate contiguous byte runs reading `physical` in C order touches (0 when empty).

    1 means one block copy (or none at all); more means a strided gather or scatter.

    >>> contiguous_runs(np.zeros((4, 6))[:, :3])
    4
    """
    if physical.size == 0:
        return 0
    run_bytes = physical.itemsize
    runs = physical.size
    for n, stride in reversed(list(zip(physical.shape, physical.strides))):
        if n == 1:
            continue
        if stride != run_bytes:
            break
        run_bytes *= n
        runs //= n
    return runs
