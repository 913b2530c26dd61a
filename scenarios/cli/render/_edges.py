"""Long listings cut to their ends unless `--full`: the first and last few items, and a line saying how many
were left out between them, so what a 1,000-device run prints stays readable and small."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from rich.table import Table
from rich.text import Text

from scenarios.cli.render._arrays import KEPT

T = TypeVar("T")
DEVICE_EDGE = 8  # tables of devices: beyond twice this many, this many at each end
LINE_EDGE = 20  # listings of messages or slices: beyond twice this many, this many at each end


def gap(left_out: int, what: str) -> Text:
    """`... 24 more devices (--full shows every one)`."""
    return Text(f"... {left_out} more {what} (--full shows every one)", style=KEPT)


def edges(items: Sequence[T], full: bool, edge: int, what: str) -> list[T | Text]:
    """`items`, or (unless `full`) beyond `2 * edge` of them only `edge` at each end with a `gap` between."""
    if full or len(items) <= 2 * edge:
        return list(items)
    return [*items[:edge], gap(len(items) - 2 * edge, what), *items[-edge:]]


def fill(table: Table, items: Sequence[Any], full: bool, edge: int, what: str, add: Callable[[Any], None]) -> None:
    """Add each item's rows to `table` with `add(item)`; past `2 * edge` items (unless `full`) only the ends,
    a row of `...` between them, and how many were left out as the table's caption."""
    for item in edges(items, full, edge, what):
        if isinstance(item, Text):
            table.add_row(*("...",) * len(table.columns))
            table.caption = item.plain
        else:
            add(item)
