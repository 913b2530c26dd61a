"""`place_blocks`: every device's block of every input held at once, one meter charge for them all."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from layouts import Layout
from sim.memory._buffer import address_of
from sim.memory._memory import LocalMemory


def place_blocks(memories: Sequence[LocalMemory], inputs: Sequence[tuple[np.ndarray, Sequence[int]]]
                 ) -> list[list[np.ndarray]] | None:
    """Each device's block of each input held at once, as `place` holds it: for each input `(stack, which)`
    (`stack` a C-contiguous, non-empty, numeric array whose leading axis numbers the blocks), `memories[d]`
    adopts block `which[d]` of `stack`; inputs in order, so each memory holds them in that order. Returns each
    input's block views by device. The bytes are charged to the memories' meter in one sum.

    None, with nothing held, when the memories do not share one meter or the sum would pass its limit: then
    `place` device by device charges the blocks and names the one that passes the limit.
    """
    meter = memories[0].meter if memories else None
    total = sum(stack.nbytes // len(stack) * len(which) for stack, which in inputs)
    if meter is None or any(memory.meter is not meter for memory in memories) \
            or meter.held_bytes + total > meter.max_memory_bytes:
        return None
    meter.held_bytes += total
    return [_hold_blocks(memories, stack, which) for stack, which in inputs]


def _hold_blocks(memories: Sequence[LocalMemory], stack: np.ndarray, which: Sequence[int]) -> list[np.ndarray]:
    """`memories[d]` holds block `which[d]` of `stack` (charged already); the blocks' views by device."""
    stack = stack.view()  # read-only, while the caller's array keeps its own flags
    stack.flags.writeable = False
    raws = stack.reshape(-1).view(np.uint8).reshape(len(stack), -1)
    layout = Layout.row_major(stack.ndim - 1)
    if stack.ndim > 1 and len(which) == len(stack) == len(set(which)):  # each block held once: views at once
        blocks, rows = list(stack), list(raws)
        views = [blocks[k] for k in which]
        first, step = address_of(raws), raws.shape[1]  # row k starts k rows past the first
        for memory, k, view in zip(memories, which, views):
            memory._hold(rows[k], view, layout, first + k * step)
        return views
    views = [stack[k, ...] for k in which]  # `...`: a 0-d block stays an array, and no two devices share a view
    for memory, k, view in zip(memories, which, views):
        memory._hold(raws[k], view, layout)
    return views
