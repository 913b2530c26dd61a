"""`gc_paused`: Python's cyclic garbage collector off for a block that makes many acyclic objects."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while the block runs, back on after (if it was on).

    A run allocates millions of short-lived acyclic objects (events, records, views, a memory and a program per
    device): a collection scans them all and frees none, and the collections a large heap triggers (a previous
    run still alive, say) cost more than the run itself. The same holds for what is made from a big run
    afterwards (its timeline, its summaries). Nesting is harmless: the outermost block restores.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
