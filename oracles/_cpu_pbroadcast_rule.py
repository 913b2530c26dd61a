"""The CPU lowering of JAX's `pbroadcast`: the source's bytes copied down a tree of `ppermute`s.

JAX 0.10.2 lowers `jax.lax.pbroadcast(x, axis_name, source)` only on GPU (a CollectiveBroadcast HLO); its
docs define it as `psum(where(axis_index(axis_name) == source, x, 0), axis_name)`. A masked psum adds, and
adding zeros turns -0.0 into +0.0 and may quieten a NaN's payload, so this rule does no arithmetic on the
data: along each named axis in turn, a binary tree of `ppermute`s copies the value from the device whose
index on that axis is the source's to every other one, and `select` keeps what arrived. The result is the
source's bytes on every device of its group, bit for bit, for every dtype.

Worked example on {'i': 4}, source 1: the devices' relative indices (i - 1) mod 4 are 3, 0, 1, 2. Round 0
copies relative 0 to relative 1 (device 1 to device 2); round 1 copies relative 0 and 1 to relative 2 and
3 (devices 1 and 2 to devices 3 and 0). Every device now holds device 1's `x`, after ceil(log2 4) = 2
rounds and 3 copies.

For a tuple of axes the source is an index in the row-major order of the tuple (as `axis_index` of the
tuple counts): it is split into one coordinate per axis, and the tree runs along each axis from its
coordinate. Along the first axis every line of the mesh copies from its own device at that coordinate,
so after all axes every device holds the source's value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src.lax.parallel import pbroadcast_p
from jax.interpreters import mlir

PRIMITIVE = pbroadcast_p


def decomposition(x: jax.Array, *, axis_name: Any, source: int) -> jax.Array:
    """`pbroadcast(x, axis_name, source)` of one device: a `ppermute` tree along each named axis.

    Raises:
        ValueError: `source` is not an index of the axes' devices.
    """
    axes = names(axis_name)
    sizes = [lax.axis_size(a) for a in axes]
    count = int(np.prod(sizes, dtype=np.int64))
    if isinstance(source, bool) or not isinstance(source, (int, np.integer)) or not 0 <= source < count:
        raise ValueError(f"pbroadcast: source={source!r} must be an int in [0, {count}), an index of the "
                         f"{count} devices of axis_name={axis_name!r}")
    for axis, size, at in zip(axes, sizes, np.unravel_index(int(source), sizes)):
        x = tree(x, axis, size, int(at))
    return x


def tree(x: jax.Array, axis: Any, size: int, source: int) -> jax.Array:
    """`x` of the device at index `source` of `axis`, on every device of the axis: in round k the devices
    whose relative index (index - source) mod size is below 2**k send to the one 2**k further on."""
    relative = (lax.axis_index(axis) - source) % size
    step = 1
    while step < size:
        perm = [((source + r) % size, (source + r + step) % size) for r in range(min(step, size - step))]
        arrived = lax.ppermute(x, axis, perm)
        receiving = (relative >= step) & (relative < 2 * step)
        x = lax.select(jnp.broadcast_to(receiving, x.shape), arrived, x)
        step *= 2
    return x


def lowering() -> mlir.LoweringRule:
    """The CPU lowering rule of `pbroadcast_p`: `decomposition`, lowered through `mlir.lower_fun`."""
    return mlir.lower_fun(decomposition, multiple_results=False)


def names(axis_name: Any) -> Sequence[Any]:
    """The axis names of a `pbroadcast`'s `axis_name` parameter, as a tuple."""
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
