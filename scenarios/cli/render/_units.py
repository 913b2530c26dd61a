"""How the commands write rows and times: `span((0, 2))` is `0:2`, `seconds(1.5e-6)` is `1.5 us`."""

from __future__ import annotations

from collections.abc import Sequence


def span(rows: Sequence[int] | None) -> str:
    """`(start, stop)` as `start:stop`; empty when absent."""
    return "" if rows is None else f"{rows[0]}:{rows[1]}"


def seconds(t: float) -> str:
    """`t` seconds in the largest unit that keeps it >= 1 (ASCII 'us' so any terminal encoding works)."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(t) >= scale:
            return f"{t / scale:.6g} {unit}"
    return f"{t / 1e-9:.6g} ns" if t else "0 s"
