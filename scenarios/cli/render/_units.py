"""How the commands write rows and times: `span((0, 2))` is `0:2`, `seconds(1.5e-6)` is `1.5 us`."""

from __future__ import annotations

from collections.abc import Sequence

import sim.record


def span(rows: Sequence[int] | None) -> str:
    """`(start, stop)` as `start:stop`; empty when absent."""
    return "" if rows is None else f"{rows[0]}:{rows[1]}"


def seconds(t: float) -> str:
    """`t` seconds in the largest unit that keeps it >= 1, to six figures (`sim.record.seconds`)."""
    return sim.record.seconds(t, figures=6)
