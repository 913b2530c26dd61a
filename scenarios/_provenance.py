"""`Provenance`: who wrote each row of a device's result, replayed from where the run's messages landed."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import FrozenInstanceError
from typing import Any

import numpy as np

import sim


class Provenance:
    """Who wrote each index along `axis` (the leading axis for ragged_all_to_all) of one device's result.

    `sources[i]` is the sending device and `messages[i]` the position in the trace of the message that
    wrote index i; both are None where no message wrote it (the row kept the ragged op's `output` value).
    Only collectives whose messages say where they land (`rows` in their detail: all_gather,
    all_gather_invariant, all_to_all, ragged_all_to_all) have a provenance.

    Immutable, equal by value like a frozen dataclass of its three fields. A run's provenance keeps its
    indices as arrays and makes the tuples on first read, so the devices nobody reads (a 1,000-device
    gather shows 16) cost no Python object per row:

    >>> p = Provenance.of_arrays(0, np.array([2, -1]), np.array([5, -1]))
    >>> p.sources, p.messages
    ((2, None), (5, None))
    >>> p == Provenance(0, (2, None), (5, None))
    True
    """

    __slots__ = ("_arrays", "_messages", "_sources", "axis")

    def __init__(self, axis: int, sources: tuple[int | None, ...], messages: tuple[int | None, ...]) -> None:
        for name, value in (("axis", axis), ("_sources", tuple(sources)), ("_messages", tuple(messages)),
                            ("_arrays", None)):
            object.__setattr__(self, name, value)

    @classmethod
    def of_arrays(cls, axis: int, sources: np.ndarray, messages: np.ndarray) -> Provenance:
        """The provenance whose `sources` and `messages` are these int arrays, -1 for None (made into tuples
        when first read)."""
        made = cls.__new__(cls)
        for name, value in (("axis", axis), ("_sources", None), ("_messages", None), ("_arrays", (sources, messages))):
            object.__setattr__(made, name, value)
        return made

    @property
    def sources(self) -> tuple[int | None, ...]:
        if self._sources is None:
            object.__setattr__(self, "_sources", _or_none(self._arrays[0]))
        return self._sources

    @property
    def messages(self) -> tuple[int | None, ...]:
        if self._messages is None:
            object.__setattr__(self, "_messages", _or_none(self._arrays[1]))
        return self._messages

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple:
        return Provenance, (self.axis, self.sources, self.messages)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.axis, self.sources, self.messages) == (other.axis, other.sources, other.messages)

    def __hash__(self) -> int:
        return hash((self.axis, self.sources, self.messages))

    def __repr__(self) -> str:
        return f"Provenance(axis={self.axis!r}, sources={self.sources!r}, messages={self.messages!r})"

    def to_dict(self, array: Callable[[Sequence], Any] = list) -> dict:
        """`axis`, `sources` and `messages` as JSON-ready values (`sources` and `messages` as `array` makes them)."""
        return {"axis": self.axis, "sources": array(self.sources), "messages": array(self.messages)}


def provenance_of(trace: sim.Trace, outputs: tuple[np.ndarray, ...], keeps: bool) -> tuple[Provenance | None, ...]:
    """Each device's provenance, replayed from where its messages landed (their `rows` along the axis, in
    trace order: a later message wins); unwritten rows stay None. When no message says where it landed,
    None for every device, unless the collective `keeps` its output's rows (ragged_all_to_all with every
    slice empty: every row kept `output`).

    Worked on columns, not records: a million-message run's provenance costs a few numpy passes.
    """
    rows, present = trace.detail_numbers("rows", 2)
    located = np.flatnonzero(present)
    if not len(located):
        return tuple(Provenance(0, (None,) * len(o), (None,) * len(o)) if keeps else None for o in outputs)
    axis = trace[int(located[0])].detail.get("axis", 0)
    spans = rows[located]
    lengths = np.array([o.shape[axis] for o in outputs], np.int64)
    offset = np.concatenate([[0], np.cumsum(lengths)])  # each device's first row in one flat row space
    count = spans[:, 1] - spans[:, 0]
    starts = offset[trace.column("dst")[located]] + spans[:, 0]
    if count.min(initial=1) == 1 and count.max(initial=1) == 1:  # one row per message: no runs to spread
        rows_at, writer = starts, located
    else:
        rows_at = np.repeat(starts, count) + np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        writer = np.repeat(located, count)
    writers = np.full(int(offset[-1]), -1, np.int64)
    np.maximum.at(writers, rows_at, writer)  # trace order: the last write wins
    sources = np.where(writers < 0, -1, trace.column("src")[np.maximum(writers, 0)])
    return tuple(Provenance.of_arrays(axis, sources[start:stop], writers[start:stop])
                 for start, stop in itertools.pairwise(offset.tolist()))


def _or_none(values: np.ndarray) -> tuple[int | None, ...]:
    """`values` as Python ints, None for -1."""
    if values.min(initial=0) >= 0:
        return tuple(values.tolist())
    return tuple(None if v < 0 else v for v in values.tolist())
