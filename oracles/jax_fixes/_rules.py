"""Corrected rules outside ragged_all_to_all (findings 4, 6, 7, 10, 11 and 12 of FINDINGS.md)."""

from __future__ import annotations

from collections.abc import Callable

FIXES: dict[str, Callable[[], None]] = {}
