"""Arrays as rich text: nested lists coloured by sender, big ones summarised to their edges as numpy does."""

from __future__ import annotations

import numpy as np
from rich.text import Text

import layouts
from scenarios import Provenance

# numpy's defaults: arrays of more than THRESHOLD elements show EDGEITEMS indices at each end of every axis;
# so do arrays of more than LINES lines (one per innermost row), which numpy would wrap but this prints tall.
THRESHOLD = 1000
EDGEITEMS = 3
LINES = 40
KEPT = "dim"  # the style of rows no message wrote
PALETTE = ("bright_cyan", "bright_magenta", "bright_green", "yellow", "bright_blue", "bright_red",
            "cyan", "magenta", "green", "bright_yellow", "blue", "red")


def colour(device: int) -> str:
    """The colour of rows sent by `device` (cycled on big meshes)."""
    return PALETTE[device % len(PALETTE)]


def summarised(array: np.ndarray, full: bool) -> bool:
    """Whether `array` prints as its edges: more than `THRESHOLD` elements or `LINES` lines, an axis longer
    than both ends' `EDGEITEMS`, and `full` not asked for."""
    lines = array.size // array.shape[-1] if array.ndim and array.shape[-1] else 1
    big = array.size > THRESHOLD or lines > LINES
    return not full and big and any(n > 2 * EDGEITEMS for n in array.shape)


def array_lines(array: np.ndarray, provenance: Provenance | None, full: bool = False) -> list[Text]:
    """Nested-list text of `array` (`[1, 3, 0, 0]`), one line per innermost row, each cell in its sender's colour.

    A summarised array (see `summarised`) shows `EDGEITEMS` indices at each end of every longer axis with
    `...` between them, so the text and the work to make it stay small whatever the array's size.
    """
    short = summarised(array, full)
    kept = tuple(_kept(n, short) for n in array.shape)
    shown = array[np.ix_(*kept)] if array.ndim else array
    gaps = tuple(EDGEITEMS if len(k) < n else None for k, n in zip(kept, array.shape))
    return _lines(_cells(shown), _styles(shown.shape, provenance, kept), gaps)


def _kept(length: int, short: bool) -> np.ndarray:
    """The indices of one axis that are shown: all of them, or `EDGEITEMS` at each end."""
    if not short or length <= 2 * EDGEITEMS:
        return np.arange(length)
    return np.concatenate([np.arange(EDGEITEMS), np.arange(length - EDGEITEMS, length)])


def _cells(array: np.ndarray) -> np.ndarray:
    """Each element as text, right-aligned to a common width; floats in their dtype's shortest form."""
    if layouts.is_float(array.dtype):  # narrow floats (bfloat16) print through float32, which holds them exactly
        shown = array if array.dtype.kind == "f" else array.astype(np.float32)
        texts = [np.format_float_positional(v, precision=4, unique=True, trim="0") for v in shown.flat]
    else:
        texts = [str(v) for v in array.flat]
    width = max((len(t) for t in texts), default=0)
    return np.array([t.rjust(width) for t in texts], dtype=object).reshape(array.shape)


def _styles(shape: tuple[int, ...], provenance: Provenance | None, kept: tuple[np.ndarray, ...]) -> np.ndarray:
    """Each shown element's colour: its sender's along the provenance axis, dim where no message wrote."""
    styles = np.full(shape, "", dtype=object)
    if provenance is not None:
        for i, index in enumerate(kept[provenance.axis]):
            source = provenance.sources[index]
            styles[(slice(None),) * provenance.axis + (i,)] = KEPT if source is None else colour(source)
    return styles


def _lines(cells: np.ndarray, styles: np.ndarray, gaps: tuple[int | None, ...]) -> list[Text]:
    """The text of `cells`, with `...` before position `gaps[axis]` of each axis that was cut."""
    if cells.ndim == 0:
        return [Text(cells.item(), style=styles.item())]
    gap = gaps[0]
    if cells.ndim == 1:
        line = Text("[")
        for i, (cell, style) in enumerate(zip(cells, styles)):
            line.append(", ..., " if i and i == gap else ", " if i else "")
            line.append(cell, style=style)
        return [line + Text("]")]
    lines: list[Text] = []
    for i, (sub_cells, sub_styles) in enumerate(zip(cells, styles)):
        if i == gap:
            lines.append(Text("...,"))
        sub = _lines(sub_cells, sub_styles, gaps[1:])
        sub[-1].append("," if i < len(cells) - 1 else "")
        lines += sub
    if not lines:
        return [Text("[]")]
    lines = [Text("[" if i == 0 else " ") + line for i, line in enumerate(lines)]
    lines[-1].append("]")
    return lines
