"""The order in which a run's records happened: posted, then first carried, then arrived, then trace order."""

from __future__ import annotations

import numpy as np

from sim.record._trace import Trace


def time_order(trace: Trace, first: int | None = None) -> np.ndarray:
    """The trace's indices in time order (posted, first carried, arrived, then trace order), or the `first` of them.

    Worked on the trace's columns; with `first`, only the records posted no later than the `first`-th are
    sorted, so the head of a million-record run costs one partition and a small sort.

    >>> trace = Trace()
    >>> for posted in (3.0, 1.0, 2.0):
    ...     _ = trace.append(0, 1, 8, posted, posted, posted + 1, "psum", 0, {})
    >>> time_order(trace).tolist(), time_order(trace, 1).tolist()
    ([1, 2, 0], [1])
    """
    count = len(trace)
    posted = trace.column("send_time_s")
    candidates = np.arange(count)
    if first is not None and first < count:
        if first <= 0:
            return candidates[:0]
        candidates = np.flatnonzero(posted <= np.partition(posted, first - 1)[first - 1])
    started = trace.column("start_time_s")[candidates]
    arrived = trace.column("arrival_time_s")[candidates]
    ordered = candidates[np.lexsort((candidates, arrived, started, posted[candidates]))]
    return ordered if first is None else ordered[:first]
