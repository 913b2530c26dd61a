"""Messages split over several paths (a multipath network): each arrives when the last of its sub-flows does."""

from __future__ import annotations

import numpy as np


class Parts:
    """The messages in flight as several sub-flows, by key: how many sub-flows each still has in flight, the
    latest arrival among those that ended, and whom to tell (sink, slot) when the last one arrives.

    >>> parts = Parts()
    >>> keys = parts.add(np.array([7]), np.array([0]), np.array([2]))
    >>> parts.end(keys, np.array([1.5]))[2].tolist(), parts.end(keys, np.array([1.25]))[2].tolist()
    ([], [1.5])
    """

    def __init__(self) -> None:
        self.left = np.zeros(0, np.int64)
        self.latest = np.zeros(0)
        self.sink = np.zeros(0, np.int64)
        self.slot = np.zeros(0, np.int64)
        self.used = 0  # keys handed out since every split message last arrived (then they are reused)
        self.open = 0  # split messages not yet arrived

    def add(self, sinks: np.ndarray, slots: np.ndarray, parts: np.ndarray) -> np.ndarray:
        """Keys for messages (`sinks[i]`, `slots[i]`) split into `parts[i]` sub-flows each."""
        count = len(parts)
        first, self.used, self.open = self.used, self.used + count, self.open + count
        if self.used > len(self.left):
            grow = max(self.used, 2 * len(self.left)) - len(self.left)
            self.left, self.sink, self.slot = (np.concatenate([a, np.zeros(grow, np.int64)])
                                               for a in (self.left, self.sink, self.slot))
            self.latest = np.concatenate([self.latest, np.zeros(grow)])
        keys = np.arange(first, self.used, dtype=np.int64)
        self.left[keys], self.latest[keys], self.sink[keys], self.slot[keys] = parts, -np.inf, sinks, slots
        return keys

    def end(self, keys: np.ndarray, arrivals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sub-flows of messages `keys` arrived at `arrivals`: the (sinks, slots, arrival times) of the messages
        whose last sub-flow that was."""
        np.subtract.at(self.left, keys, 1)
        np.maximum.at(self.latest, keys, arrivals)
        done = np.unique(keys[self.left[keys] == 0])
        self.open -= len(done)
        if self.open == 0:
            self.used = 0
        return self.sink[done], self.slot[done], self.latest[done]
