"""An array in one line for a walkthrough: its type and its ends, so a big operand costs one line."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
from rich.text import Text

from layouts import short_name
from scenarios.cli.render._protocols import array_text

BRIEF = 16  # up to this many elements, a 1-D array is shown whole


def brief(array: np.ndarray, full: bool = False, sources: Sequence[int | None] | None = None,
          typed: bool = False) -> Text:
    """`array` for a walkthrough: whole (coloured by `sources` when 1-D) when `full` or when it is 1-D with at
    most `BRIEF` elements; else one line with its type and first and last entries, e.g.
    `f32[6,4] [[0., ..., 0.3], ..., [5., ..., 5.3]]`, or (`typed`, for a table's cell) its type alone."""
    array = np.asarray(array)
    if full:
        return array_text(array, sources, threshold=sys.maxsize)
    if array.ndim <= 1 and array.size <= BRIEF:
        return array_text(array, sources)
    kind = f"{short_name(array.dtype)}[{','.join(map(str, array.shape))}]"
    if typed:
        return Text(kind)
    body = np.array2string(array, separator=", ", threshold=0, edgeitems=1, precision=4, max_line_width=sys.maxsize)
    return Text(f"{kind} {' '.join(body.split())}")
