"""The raw bytes of a JAX CPU device buffer, as XLA laid them out (the JAX worker and the bridge read them)."""

from __future__ import annotations

import ctypes

import jax
import numpy as np


def raw_bytes(array: jax.Array) -> bytes:
    """The bytes holding a single-device array's values, read through its buffer pointer once it is ready.

    Only `prod(shape) * itemsize` bytes: XLA:CPU allocates no tile padding, and reading
    `on_device_size_in_bytes()` of a tiled buffer would read past its allocation.
    """
    array.block_until_ready()
    size = int(np.prod(array.shape)) * array.dtype.itemsize
    return ctypes.string_at(array.unsafe_buffer_pointer(), size) if size else b""
