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

    When the block ends normally, what it made and kept goes straight to the collector's oldest generation
    (`gc.freeze()` then `gc.unfreeze()`: two list splices), as surviving a young collection would send it,
    but without that collection's scan of every object of the run (a tenth of a second for a 256-device,
    255-call program). A run makes no reference cycles (`tests/test_call_garbage.py`), so that scan would
    free nothing of it; a cycle that a device program of the user's made is freed by the next full
    collection instead of a young one. A block that raises is left to the young collection as it is (an
    error's traceback is a cycle that may hold a run's memories).
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    except BaseException:
        if collecting:
            gc.enable()
        raise
    if collecting:
        gc.freeze()
        gc.unfreeze()
        gc.enable()
