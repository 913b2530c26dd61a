"""The slices of a ragged exchange as the inputs describe them, kept as columns.

Sender `src`'s slice `i` goes to group member `i // per` (`per` slices per member), which takes it as its
slice `j = (src's place in the group) * per + i % per`, as the docs' pseudocode numbers them. A 1,000-device
exchange has a million slices, and `meshsim explain` shows a few of them, so the table is made in a few
array passes per sender and a `Slice` is made only for a slice that is shown.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scenarios import Scenario
from scenarios.picture import slices_per_member


@dataclass(frozen=True)
class Slice:
    """One slice of the exchange: sender `src` sends its slice `i` to `dst`, which receives it as slice `j`."""

    src: int
    i: int
    dst: int
    j: int
    src_rows: tuple[int, int]
    rows: tuple[int, int]
    recv_size: int | None


@dataclass(frozen=True, eq=False)
class Slices:
    """Every slice the inputs describe, sender by sender, one entry per slice in each column.

    `start` and `size` are the sender's `input_offsets[i]` and `send_sizes[i]`, `at` its `output_offsets[i]`
    (0 past the end of output_offsets), `recv_size` the receiver's `recv_sizes[j]`, where `received` says it
    has one.
    """

    src: np.ndarray
    i: np.ndarray
    dst: np.ndarray
    j: np.ndarray
    start: np.ndarray
    size: np.ndarray
    at: np.ndarray
    recv_size: np.ndarray
    received: np.ndarray

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, k: int) -> Slice:
        """Slice `k` as a record."""
        start, size, at = int(self.start[k]), int(self.size[k]), int(self.at[k])
        return Slice(int(self.src[k]), int(self.i[k]), int(self.dst[k]), int(self.j[k]), (start, start + size),
                     (at, at + size), int(self.recv_size[k]) if self.received[k] else None)

    def by_receiver(self) -> np.ndarray:
        """The slices' indices ordered by receiver, then by the slot `j` it takes each at (ties in table order)."""
        return np.lexsort((np.arange(len(self)), self.j, self.dst))

    def disagreeing_first(self) -> np.ndarray:
        """The slices' indices, those whose receiver expects another size (or none) first, each part in order."""
        return np.argsort(self.received & (self.recv_size == self.size), kind="stable")

    def empty(self) -> np.ndarray:
        """The indices of the slices that send no rows."""
        return np.flatnonzero(self.size == 0)


def slices_of(scenario: Scenario) -> Slices:
    """Every slice the inputs of `scenario` describe (its index arrays one vector per device)."""
    devices = list(scenario.mesh.devices)
    recv = [np.asarray(scenario.inputs[d]["recv_sizes"], np.int64) for d in devices]
    width = max((len(r) for r in recv), default=0)
    table = np.zeros((len(devices), width), np.int64)  # recv_sizes by device, padded with zeros
    has = np.zeros((len(devices), width), bool)  # where a device's recv_sizes has an entry
    for d, r in zip(devices, recv):
        table[d, :len(r)], has[d, :len(r)] = r, True
    parts = [_sender(scenario, src, table, has) for src in devices]
    return Slices(*(np.concatenate(column) for column in zip(*parts)))


def _sender(scenario: Scenario, src: int, recv: np.ndarray, has: np.ndarray) -> tuple[np.ndarray, ...]:
    """The columns of sender `src`'s slices (`recv` and `has`: every device's recv_sizes, padded)."""
    arrays = scenario.inputs[src]
    offsets, sizes = (np.asarray(arrays[name], np.int64) for name in ("input_offsets", "send_sizes"))
    count = min(len(offsets), len(sizes))
    members, per = slices_per_member(scenario, src)
    i = np.arange(count)
    dst = np.asarray(members, np.int64)[np.minimum(i // per, len(members) - 1)]
    j = members.index(src) * per + i % per
    out = np.asarray(arrays["output_offsets"], np.int64)[:count]
    at = np.concatenate([out, np.zeros(count - len(out), np.int64)])
    inside = j < recv.shape[1]
    recv_size, received = np.zeros(count, np.int64), np.zeros(count, bool)
    recv_size[inside], received[inside] = recv[dst[inside], j[inside]], has[dst[inside], j[inside]]
    return np.full(count, src, np.int64), i, dst, j, offsets[:count], sizes[:count], at, recv_size, received


def overlapping(src: np.ndarray, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """Which of the non-empty spans `[start, stop)`, each read by sender `src`, overlap another span of the
    same sender, in one pass over them ordered by (sender, start, stop): a span overlaps an earlier one when it
    starts before the furthest stop of those, and a later one when the next span starts before its stop (the
    next span starts first of the later ones, and every later span stops after that start)."""
    order = np.lexsort((stop, start, src))
    who, a, b = src[order], start[order], stop[order]
    hit = np.zeros(len(order), bool)
    if len(order) < 2:
        return hit
    # The furthest stop so far of each sender: lifted by sender, so no earlier sender's stop reaches past it.
    low = int(b.min())
    lift = who * (int(b.max()) - low + 1)
    reach = np.maximum.accumulate(b - low + lift) - lift + low
    same = who[1:] == who[:-1]
    hit[1:] |= same & (a[1:] < reach[:-1])
    hit[:-1] |= same & (a[1:] < b[:-1])
    found = np.empty_like(hit)
    found[order] = hit
    return found
