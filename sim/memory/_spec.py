"""`PartitionSpec` (alias `P`): how an array's dimensions map to mesh axes."""

from __future__ import annotations

from typing import Any

from sim._errors import InvalidTypeError


class PartitionSpec(tuple):
    """How an array's dimensions map to mesh axes: one entry per leading dimension.

    Each entry is None (not split), an axis name, or a tuple of axis names (split over them, first name
    most major). Missing trailing entries mean None. `P('x', None)` splits rows over axis 'x'.
    """

    def __new__(cls, *entries: Any) -> PartitionSpec:
        for entry in entries:
            names = entry if isinstance(entry, tuple) else (entry,)
            if entry is not None and not all(isinstance(n, str) for n in names):
                raise InvalidTypeError(f"PartitionSpec entry {entry!r} must be None, a name or a tuple of names")
        return super().__new__(cls, entries)

    def __repr__(self) -> str:
        return f"P{tuple.__repr__(self)}" if len(self) != 1 else f"P({self[0]!r})"

    def axes(self) -> list[str]:
        """Every mesh axis the spec names."""
        return [n for entry in self if entry is not None for n in (entry if isinstance(entry, tuple) else (entry,))]


P = PartitionSpec
