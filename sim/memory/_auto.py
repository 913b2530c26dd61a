"""How `Layout.AUTO` is resolved: from the way a compiled function reads its arguments.

The rule, for each argument compiled with `Layout.AUTO`:

1. Compiling runs the function once on zeros; every basic index applied directly to the argument
   (`y[:, 0]`, `x[0]`, `x[1:3, :, 2]`) is recorded with the number of elements it selects.
2. A read *fixes* the dimensions it indexes with an integer and *keeps* the others. The layout that makes
   the selected elements one contiguous run puts the fixed dimensions most major and the kept ones most
   minor, each group in logical order: `y[:, 0]` asks for `(1, 0)` (column-major, its column is
   contiguous), `x[0, :]` for `(0, 1)`, `z[:, 0, :]` for `(1, 0, 2)`.
3. The read selecting the most elements decides (the first of equals). An argument read only whole,
   elementwise, through numpy functions or by advanced indexing gets the default row-major layout, so
   uncommitted default arrays need no copy.

An output compiled with `Layout.AUTO` gets the dimension order in which the function produced it
(`layouts.layout_of`): a freshly computed array is row-major, `x.T` of a row-major `x` column-major (XLA:CPU
makes the same choice for `x.T`, which lets the transpose be a relabelling instead of a copy).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from layouts import Layout

Read = tuple[tuple[int, ...], int]


class Recorder(np.ndarray):
    """A probe argument: records each basic index applied to it directly; derived arrays record nothing."""

    reads: list[Read] | None

    def __array_finalize__(self, obj: Any) -> None:
        self.reads = None

    def __getitem__(self, index: Any) -> Any:
        plain = np.asarray(self)
        result = plain[index]
        if self.reads is not None:
            fixed = fixed_dims(index, self.ndim)
            if fixed is not None:
                self.reads.append((fixed, int(np.size(result))))
        return result


def recorder(block: np.ndarray, reads: list[Read]) -> Recorder:
    """`block` (not copied) as a probe that appends its reads to `reads`."""
    probe = block.view(Recorder)
    probe.reads = reads
    return probe


def fixed_dims(index: Any, rank: int) -> tuple[int, ...] | None:
    """The dimensions a basic index fixes with an integer, or None for any other kind of index."""
    items = index if isinstance(index, tuple) else (index,)
    if not all(_basic(item) for item in items):
        return None
    consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
    fixed, dim = [], 0
    for item in items:
        if item is Ellipsis:
            dim += rank - consumed
        elif item is None:
            continue
        else:
            if isinstance(item, (int, np.integer)):
                fixed.append(dim)
            dim += 1
    return tuple(fixed)


def _basic(item: Any) -> bool:
    return (item is None or item is Ellipsis or isinstance(item, slice)
            or (isinstance(item, (int, np.integer)) and not isinstance(item, bool)))


def layout_from_reads(rank: int, reads: list[Read]) -> Layout:
    """Rule 2 and 3 of the module docstring: the layout the largest read asks for, else row-major."""
    best: Read | None = None
    for read in reads:
        if best is None or read[1] > best[1]:
            best = read
    if best is None or not best[0]:
        return Layout.row_major(rank)
    fixed = best[0]
    return Layout(fixed + tuple(d for d in range(rank) if d not in fixed))
