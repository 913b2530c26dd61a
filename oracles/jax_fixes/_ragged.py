"""Corrected rules of `ragged_all_to_all` (findings 1, 2, 3, 5, 8 and 9 of FINDINGS.md)."""

from __future__ import annotations

from collections.abc import Callable

FIXES: dict[str, Callable[[], None]] = {}
