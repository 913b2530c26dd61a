"""`gc_paused`: Python's cyclic garbage collector off for a block that makes many acyclic objects."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

# Objects the blocks sent to the oldest generation since the last full collection, and how many the collector
# tracked after it: past a quarter of that (CPython's own rule for a full collection) and at least `FLOOR`,
# a block's end collects fully instead, so cycles among them are freed as they would have been.
FLOOR = 4_000_000
_since = {"promoted": 0, "tracked": 0}


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while the block runs, back on after (if it was on).

    A run allocates millions of short-lived acyclic objects (events, records, views, a memory and a program per
    device): a collection scans them all and frees none, and the collections a large heap triggers (a previous
    run still alive, say) cost more than the run itself. The same holds for what is made from a big run
    afterwards (its timeline, its summaries). Nesting is harmless: the outermost block restores.

    When the block ends normally, what it made and kept goes straight to the collector's oldest generation
    (`gc.freeze()` then `gc.unfreeze()`: two list splices), as surviving the young collections would send it,
    but without their scans of every object of the run (a tenth of a second for a 256-device, 255-call
    program). A run makes no reference cycles (`tests/test_call_garbage.py`), so those scans would free
    nothing of it; the young generations the caller had before the block are collected as it starts. CPython
    counts promotions of its own to decide when to collect fully, not these; so once the blocks have
    promoted a quarter of what the collector tracked after the last full collection (and at least `FLOOR`
    objects), a block's end makes a full collection instead, which frees any cycle a device program of the
    user's made. A block that raises is left to the collector as it is (an error's traceback is a cycle
    that may hold a run's memories).
    """
    collecting = gc.isenabled()
    if collecting:
        gc.collect(1)  # the caller's young garbage, before it would be promoted with the block's objects
    gc.disable()
    try:
        yield
    except BaseException:
        if collecting:
            gc.enable()
        raise
    if collecting:
        _since["promoted"] += gc.get_count()[0]
        if _since["promoted"] > max(FLOOR, _since["tracked"] // 4):
            gc.enable()
            gc.collect()
            _since["promoted"], _since["tracked"] = 0, len(gc.get_objects())
        else:
            gc.freeze()
            gc.unfreeze()
            gc.enable()
