"""`Layout` and the single encode/decode pair that maps logical arrays to device bytes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Layout:
    """The order in which an array's dimensions are laid out in memory, most major first.

    `Layout((0, 1))` is row-major for a matrix, `Layout((1, 0))` column-major. `Layout.row_major(n)` gives
    the default for rank n.
    """

    major_to_minor: tuple[int, ...]

    def __post_init__(self) -> None:
        order = tuple(int(d) for d in self.major_to_minor)
        if sorted(order) != list(range(len(order))):
            raise ValueError(
                f"major_to_minor={self.major_to_minor} must be a permutation of 0..{len(order) - 1}"
            )
        object.__setattr__(self, "major_to_minor", order)

    @classmethod
    def row_major(cls, rank: int) -> "Layout":
        """The default layout of rank `rank`: dimension 0 most major."""
        return cls(tuple(range(rank)))

    def check_rank(self, rank: int) -> None:
        """Raise if this layout cannot describe an array of rank `rank`."""
        if len(self.major_to_minor) != rank:
            raise ValueError(
                f"major_to_minor={self.major_to_minor} has {len(self.major_to_minor)} entries "
                f"but the array has rank {rank}"
            )


def nbytes(dtype: np.dtype, shape: tuple[int, ...], layout: Layout) -> int:
    """Bytes an array of `dtype` and `shape` occupies in memory with `layout`."""
    layout.check_rank(len(shape))
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def decode(raw: np.ndarray, dtype: np.dtype, shape: tuple[int, ...], layout: Layout) -> np.ndarray:
    """View the bytes `raw` (uint8, exactly `nbytes` long) as the logical array they hold.

    The result is a view: writing into it writes the memory.
    """
    physical_shape = tuple(shape[d] for d in layout.major_to_minor)
    physical = raw.view(np.dtype(dtype)).reshape(physical_shape)
    return physical.transpose(np.argsort(layout.major_to_minor))


def encode(array: np.ndarray, layout: Layout) -> np.ndarray:
    """The bytes (uint8, contiguous) that hold `array` in memory with `layout`."""
    layout.check_rank(array.ndim)
    physical = np.ascontiguousarray(np.asarray(array).transpose(layout.major_to_minor))
    return physical.reshape(-1).view(np.uint8)
