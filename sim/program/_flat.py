"""The fast paths of `sim.ShardMapped` for calls whose inputs and outputs are flat tuples of arrays.

A program mapped over a mesh is mostly called with a tuple of plain numpy arrays and returns a tuple of arrays
under one out_specs entry (as a JAX shard_map does). How such inputs are placed depends only on their shapes
and dtypes, so the first call's findings (the signature, each input's blocks as runs of rows, its type) are
kept in a `FlatPlan` and a repeated call places the inputs by it; how such outputs are checked and assembled
depends only on their count (`flat_outputs`). What the general path finds is the same.

>>> flat_key((np.zeros((4, 2), np.float32),))
(((4, 2), dtype('float32')),)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.memory._spec import PartitionSpec


@dataclass(frozen=True)
class FlatPlan:
    """How a call whose inputs are a flat tuple of plain arrays of some shapes and dtypes is placed: the inputs'
    signature, each input's (block count, block number by device) as `sim.ShardMapped` finds them, each input's
    type (vma), and the input variables of a program numbering them from 0 (made on first use)."""

    signature: str
    rows: tuple[tuple[int, list[int]], ...]
    vmas: tuple[frozenset, ...]
    inputs: list = field(default_factory=list, compare=False)


def flat_key(args: Any) -> tuple | None:
    """The shapes and dtypes of `args` when it is a tuple of non-empty C-contiguous numpy arrays in native byte
    order (the inputs a `FlatPlan` places as they are); None otherwise."""
    if type(args) is not tuple:
        return None
    key = []
    for x in args:
        if type(x) is not np.ndarray or not x.size or not x.flags.c_contiguous or not x.dtype.isnative:
            return None
        key.append((x.shape, x.dtype))
    return tuple(key)


def stacked(x: np.ndarray, count: int) -> np.ndarray:
    """`x` as a stack of `count` blocks of whole rows along a new leading axis (a 0-d array: one block)."""
    return x.reshape((count, x.shape[0] // count, *x.shape[1:])) if x.ndim else x.reshape(1)


def arrays(values: tuple) -> bool:
    """Whether every value is a numpy array."""
    return not [value for value in values if not isinstance(value, np.ndarray)]


def flat_outputs(out_specs: Any, results: list, kept: dict[int, tuple[tuple, tuple]]) -> tuple[tuple, tuple] | None:
    """When every device returned a tuple of arrays of one length and `out_specs` is one spec: each output's
    spec and path (as `_expand` and `_paths` give them: the spec repeated, `out[k]`), made once per length and
    kept in `kept`. None otherwise."""
    first = results[0]
    if type(first) is not tuple or not isinstance(out_specs, PartitionSpec):
        return None
    count = len(first)
    for result in results:
        if type(result) is not tuple or len(result) != count or not arrays(result):
            return None
    found = kept.get(count)
    if found is None:
        found = kept[count] = ((out_specs,) * count, tuple(f"out[{k}]" for k in range(count)))
    return found
