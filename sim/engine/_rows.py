"""The tables of row exchanges: a call whose members each send one message to every member (`Port.send_each`,
`send_split`, `send_copies`) keeps each member's row here, and each receiver takes its column at once.

A row is a list of payloads and headers, or one array (`Whole`): part j of it to member j, or all of it to
every member. Arrival times live in the trace; a table holds a few numbers per member, not per message. A
receiver reads its column from the senders' memories as a strided view when their rows lie evenly spaced
in one buffer (inputs placed from one global array), else from a stack of the rows made once for the call
(messages under 64 KiB, 64 MiB in all: one stack copies no more than the receivers' columns would), else
part by part. Which of the three is worked out once per call, by its first receiver.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

from sim._simpy import fire_after as _fire
from sim.memory._abstract import restored

if TYPE_CHECKING:
    import simpy

    from sim.engine._transport import Transport


class Whole:
    """A row posted as one array: part j of `flat` to member j (`split`), or all of it to every member."""

    __slots__ = ("flat", "split")

    def __init__(self, flat: np.ndarray, split: bool) -> None:
        self.flat, self.split = flat, split

    def part(self, members: int, receiver: int) -> np.ndarray:
        if not self.split:
            return self.flat
        size = len(self.flat) // members
        return self.flat[receiver * size:(receiver + 1) * size]


_STACK_MESSAGES = 1  # past this many messages a call's rows are stacked once rather than read part by part
_STACK_MESSAGE_BYTES = 1 << 16  # ... when each message is smaller than this
_STACK_BYTES = 64 << 20  # ... and the copy of every row is at most this


class Table:
    """One call's all-pairs exchange: row s holds member s's messages to every member (a list of payloads
    and headers, or one `Whole` array), `firsts[s]` the trace index of its first message; a receiver is
    served when its column has fully arrived. Arrival times live in the trace, not here: a table holds
    a few numbers per member, not per message."""

    __slots__ = ("dsts", "env", "firsts", "known", "last", "members", "rows", "served", "stacked", "transport",
                 "waiting")

    def __init__(self, transport: Transport, members: tuple[int, ...]) -> None:
        self.transport, self.env, self.members = transport, transport.env, members
        n = len(members)
        self.dsts = np.asarray(members, np.int64)
        self.rows: list[Any] = [None] * n
        self.firsts = np.zeros(n, np.int64)
        self.known = np.zeros(n, np.int64)  # arrivals known, per receiver
        self.last = np.zeros(n)  # the latest of them
        self.served = 0
        self.waiting: dict[int, simpy.Event] = {}
        self.stacked: np.ndarray | bool | None = None  # None: not worked out yet; False: read part by part

    def post(self, sender: int, row: Any, first: int) -> None:
        self.rows[sender] = row
        self.firsts[sender] = first

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None:
        """Messages of one row to receivers `slots` arrived at `arrivals_s`."""
        self.known[slots] += 1
        self.last[slots] = np.maximum(self.last[slots], arrivals_s)
        if self.waiting and np.any(self.known[slots] == len(self.members)):
            self.transport._ready[id(self)] = self

    def serve(self) -> None:
        """Wake the waiting receivers whose columns have fully arrived, in the order they began waiting."""
        done = [r for r in self.waiting if self.known[r] == len(self.members)]
        for receiver in done:
            _fire(self.env, self.waiting.pop(receiver), None, self.last[receiver] - self.env.now)

    def expect(self, receiver: int) -> simpy.Event:
        event = self.env.event()
        if self.known[receiver] == len(self.members):
            _fire(self.env, event, None, self.last[receiver] - self.env.now)
        else:
            self.waiting[receiver] = event
        return event

    def take(self, receiver: int) -> list[tuple]:
        """(sender index, payload, header, arrival) of every row's message to `receiver`: made on taking, so a
        call over n members never holds n^2 of them at once."""
        n = len(self.members)
        arrivals = self.transport.trace.arrivals(self.firsts + receiver).tolist()
        return [(s, *((row.part(n, receiver), {}) if isinstance(row, Whole) else (row[0][receiver], row[1][receiver])),
                 arrivals[s]) for s, row in enumerate(self.rows)]

    def column(self, receiver: int) -> np.ndarray:
        """The parts to `receiver` of every row (posted as `Whole` arrays), stacked: one row per sender."""
        stacked = self._stack()
        if stacked is None:
            n = len(self.members)
            parts = [row.part(n, receiver) for row in self.rows]
            return restored(np.stack(parts), parts)  # abstract payloads keep their dtype
        return stacked[:, receiver] if self.rows[0].split else stacked

    def take_into(self, receiver: int, out: np.ndarray) -> None:
        """Copy the parts to `receiver` of every row into the rows of `out`, one per sender."""
        target = out.reshape(len(self.members), -1)
        stacked = self._stack()
        if stacked is not None:
            np.copyto(target, stacked[:, receiver] if self.rows[0].split else stacked)
            return
        n = len(self.members)
        for s, row in enumerate(self.rows):
            target[s] = row.part(n, receiver)

    def _stack(self) -> np.ndarray | None:
        """Every row as one array (senders, [receivers,] part) when reading it part by part would cost a
        Python step per message: a view when the rows lie evenly spaced in one buffer (inputs placed from
        one global array), else a copy made once; None for calls of few or large messages."""
        if self.stacked is None:  # worked out once per table, by its first receiver
            self.stacked = self._stacked()
        return None if self.stacked is False else self.stacked

    def _stacked(self) -> np.ndarray | bool:
        n, flats = len(self.members), [row.flat for row in self.rows]
        shape = (n, n, len(flats[0]) // n) if self.rows[0].split else (n, len(flats[0]))
        if any(flat.shape != flats[0].shape or flat.dtype != flats[0].dtype for flat in flats):
            return False
        view = _spaced(flats)
        if view is not None:
            return view.reshape(shape)
        if n * n > _STACK_MESSAGES and flats[0].nbytes // (n if self.rows[0].split else 1) < _STACK_MESSAGE_BYTES \
                and n * flats[0].nbytes <= _STACK_BYTES:
            return restored(np.stack(flats), flats).reshape(shape)  # abstract payloads keep their dtype
        return False


def _spaced(flats: list[np.ndarray]) -> np.ndarray | None:
    """The 1-D C-contiguous arrays `flats` (equal shapes and dtypes) as the rows of one strided view,
    without a copy, when they lie at evenly spaced addresses of one buffer; else None."""
    if len(flats) < 2 or not flats[0].size:
        return None
    roots = {id(_root(flat)) for flat in (flats[0], flats[-1])}
    addresses = [flat.__array_interface__["data"][0] for flat in flats]
    step = addresses[1] - addresses[0]
    if len(roots) != 1 or step <= 0 or any(b - a != step for a, b in itertools.pairwise(addresses)):
        return None
    root = _root(flats[0])
    low = root.__array_interface__["data"][0]
    if addresses[0] < low or addresses[-1] + flats[0].nbytes > low + root.nbytes:
        return None
    first = flats[0]
    # one-byte elements strided as bytes: numpy's `as_strided` cannot read float8_e5m2's type string ('<f1')
    raw = first.view(np.uint8) if first.itemsize == 1 else first
    return np.lib.stride_tricks.as_strided(raw, (len(flats), first.size), (step, first.itemsize),
                                           writeable=False).view(first.dtype)


def _root(array: np.ndarray) -> np.ndarray:
    """The array owning `array`'s memory (the last numpy array down its chain of bases)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array
