"""`Layout`: the order of an array's dimensions in one device memory, with optional XLA tiles; `AUTO`.

A layout is pure geometry. It knows nothing of values; `layouts._codec` turns it into bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from layouts._errors import InvalidArgumentError, InvalidTypeError

Tile = tuple[int, ...]


class AutoLayout:
    """The `Layout.AUTO` sentinel: ask the compiler to choose the layout. There is exactly one."""

    _instance: ClassVar[AutoLayout | None] = None

    def __new__(cls) -> AutoLayout:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "AUTO"

    def __reduce__(self) -> str:
        return "AUTO"


AUTO = AutoLayout()


@dataclass(frozen=True)
class Layout:
    """How an array's elements sit in one device memory: `major_to_minor` order and XLA `tiling`.

    `major_to_minor[0]` is the dimension whose index changes slowest in memory: `Layout((0, 1))` is
    row-major for a matrix, `Layout((1, 0))` column-major. `tiling` is a tuple of tile shapes applied the
    way XLA applies them: the first tile covers the minor-most dimensions in physical order (a tile with
    more entries than the array's rank treats missing dimensions as size 1), partial tiles are padded, and
    each further tile subdivides the tile before it. `Layout.AUTO` asks a compiled function to choose.

    >>> Layout((1, 0))
    Layout(major_to_minor=(1, 0))
    >>> Layout((0, 1), tiling=((2, 2),)).size_in_bytes(np.int32, (2, 3))   # 1 x 2 tiles of 2 x 2
    32

    Raises:
        InvalidArgumentError: `major_to_minor` is not a permutation of 0..n-1, or a tile is empty or has a
            dimension that is not a positive int (XLA:CPU rejects those too).
        InvalidTypeError: `major_to_minor` or `tiling` is not a sequence.
    """

    major_to_minor: tuple[int, ...]
    tiling: tuple[Tile, ...] = ()

    AUTO: ClassVar[AutoLayout] = AUTO

    def __post_init__(self) -> None:
        object.__setattr__(self, "major_to_minor", _check_order(self.major_to_minor))
        object.__setattr__(self, "tiling", _check_tiling(self.tiling))

    def __repr__(self) -> str:
        tiles = f", tiling={self.tiling}" if self.tiling else ""
        return f"Layout(major_to_minor={self.major_to_minor}{tiles})"

    @classmethod
    def row_major(cls, rank: int) -> Layout:
        """The default layout of rank `rank`: dimension 0 most major (XLA's `{n-1,...,1,0}`); one shared
        instance per rank (a layout is a value)."""
        found = _ROW_MAJOR.get(rank) if cls is Layout else None
        if found is None:
            found = cls(tuple(range(rank)))
            if cls is Layout:
                _ROW_MAJOR[rank] = found
        return found

    @classmethod
    def column_major(cls, rank: int) -> Layout:
        """Dimension 0 most minor: the reverse of `row_major(rank)`."""
        return cls(tuple(reversed(range(rank))))

    @property
    def rank(self) -> int:
        return len(self.major_to_minor)

    @property
    def minor_to_major(self) -> tuple[int, ...]:
        """XLA's spelling of the same order (what `{1,0}` means in HLO)."""
        return tuple(reversed(self.major_to_minor))

    def check_rank(self, rank: int, where: str = "") -> None:
        """Raise InvalidArgumentError unless this layout describes arrays of rank `rank`.

        Args:
            rank: the rank of the arrays the layout is for.
            where: what the layout is, to open the message with (e.g. "device 3: psum: out_layout").
        """
        if len(self.major_to_minor) != rank:
            raise InvalidArgumentError(
                f"{where}{': ' if where else ''}major_to_minor={self.major_to_minor} has "
                f"{len(self.major_to_minor)} entries but the array has rank {rank}; the length of major_to_minor "
                f"must equal the rank"
            )

    def physical_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """`shape`'s dimensions in memory order, most major first."""
        self.check_rank(len(shape))
        return tuple(int(shape[d]) for d in self.major_to_minor)

    def size_in_bytes(self, dtype: Any, shape: tuple[int, ...]) -> int:
        """What XLA reports as the on-device size: the physical shape padded to whole first-level tiles.

        This is XLA's `ShapeUtil::ArraySize`: only the first tile pads (deeper tiles are assumed to divide
        it), and a tile longer than the rank pads the missing major dimensions from 1.
        """
        physical = self.physical_shape(shape)
        if not self.tiling:
            return math.prod(physical) * np.dtype(dtype).itemsize
        tile = self.tiling[0]
        minor = (1,) * max(0, len(tile) - len(physical)) + physical[max(0, len(physical) - len(tile)):]
        major = physical[: max(0, len(physical) - len(tile))]
        padded = [-(-d // t) * t for d, t in zip(minor, tile)]
        return int(np.prod([*major, *padded], dtype=np.int64)) * np.dtype(dtype).itemsize


_ROW_MAJOR: dict[int, Layout] = {}


def _check_order(value: Any) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)):
        raise InvalidTypeError(f"major_to_minor={value!r} must be a tuple of dimension indices, e.g. (1, 0)")
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in value):
        raise InvalidTypeError(f"major_to_minor={tuple(value)!r} must hold ints")
    order = tuple(int(d) for d in value)
    if sorted(order) != list(range(len(order))):
        raise InvalidArgumentError(
            f"major_to_minor={order} must be a permutation of 0..{len(order) - 1} (each dimension exactly once)"
        )
    return order


def _check_tiling(value: Any) -> tuple[Tile, ...]:
    if value is None:
        return ()
    if not isinstance(value, (tuple, list)) or not all(isinstance(t, (tuple, list)) for t in value):
        raise InvalidTypeError(
            f"tiling={value!r} must be a tuple of tile shapes, e.g. ((8, 128),) or ((8, 128), (2, 1))")
    tiles = []
    for k, tile in enumerate(value):
        if len(tile) == 0:
            raise InvalidArgumentError(
                f"tiling={value!r}: tile {k} is empty; a tile needs at least one dimension")
        for d in tile:
            if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 1:
                raise InvalidArgumentError(
                    f"tiling={value!r}: tile {k} has dimension {d!r}; every tile dimension must be a positive int"
                )
        tiles.append(tuple(int(d) for d in tile))
    return tuple(tiles)
