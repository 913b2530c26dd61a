"""Device-local array layouts: how a logical array sits in the bytes of one device memory.

`Layout(major_to_minor, tiling)` is the geometry, `encode`/`decode` the one translation between a logical
array and device bytes (every reader of a device memory goes through them), `Format` pairs a layout with
a sharding. The package's error base lives here too, at the bottom of the layers: `MeshError`, with
`InvalidArgumentError` (a ValueError) and `InvalidTypeError` (a TypeError) for caller mistakes. Imports
numpy only, and `ml_dtypes` for the element types numpy lacks (bfloat16, float8: `is_numeric`, `is_float`,
`is_movable`).

What XLA:CPU does with layouts (jax 0.10.2, measured through `unsafe_buffer_pointer()`):

- `major_to_minor`: honoured. Any permutation, any rank (0 to 4 checked), dtypes of 1, 2, 4 and 8 bytes;
  the buffer holds the elements densely in that order, for `jax.device_put` and for jit outputs alike.
- `tiling`: accepted and reported back (`x.format.layout.tiling`), but the elements are *not* reordered
  into tiles and the buffer is *not* padded: XLA:CPU allocates exactly `prod(shape) * itemsize` bytes
  (`malloc_usable_size` of the pointer) and fills them in the dense order above. Only
  `on_device_size_in_bytes()` grows, to XLA's `ShapeUtil::ArraySize`: the physical shape padded to
  whole *first-level* tiles (deeper tiles add nothing; a tile longer than the rank pads the missing major
  dimensions from 1). Reading that many bytes from the pointer reads past the allocation: the "padding"
  is other heap memory (undefined, and it can segfault). `Layout.size_in_bytes` reproduces the reported
  size, `nbytes` the defined bytes, and `encode`/`decode` the dense order.
- Rejected by XLA:CPU and here: a tile dimension of 0 ("tile dimension 0 must be positive"), a negative
  one (a parse error in XLA), an empty tile ("layout has invalid tiles"), a `major_to_minor` that is not
  a permutation or whose length is not the rank. `Layout.AUTO` is only for compiled functions
  (`device_put` rejects it), and a concrete layout needs a sharding.
- A tiled XLA layout on a backend that honours it (TPU) orders elements tile by tile; `encode(...,
  apply_tiling=True)` gives that order for reference, but no simulated memory uses it.
"""

from layouts._codec import contiguous_runs, decode, encode, layout_of, nbytes, offset, strides
from layouts._dtypes import (
    ABSTRACT_KEY,
    BFLOAT16,
    FLOAT8,
    NARROW_FLOATS,
    NUMPY_NUMBERS,
    finfo,
    is_any_float,
    is_float,
    is_movable,
    is_numeric,
    logical,
    native_array,
    native_dtype,
    short_name,
)
from layouts._errors import InvalidArgumentError, InvalidTypeError, MeshError
from layouts._format import Format
from layouts._layout import AUTO, AutoLayout, Layout

__all__ = [
    "AUTO", "AutoLayout", "Format", "InvalidArgumentError", "InvalidTypeError", "Layout", "MeshError",
    "contiguous_runs", "decode", "encode", "layout_of", "nbytes", "offset", "strides",
]
__all__ += ["ABSTRACT_KEY", "BFLOAT16", "FLOAT8", "NARROW_FLOATS", "NUMPY_NUMBERS", "finfo", "is_any_float", "is_float",
            "is_movable", "is_numeric", "logical", "native_array", "native_dtype", "short_name"]  # element types
