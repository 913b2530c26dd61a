"""The columns of a `Trace` chunk, kept as compactly as their values allow.

A value every record of a chunk shares is kept once (`Shared`; `Same` for a detail value); a batch's
receivers are the group's members as given (`Members`); details are one column per key (`Details`), each
a list, a range, one shared value, or an array of ints, floats or int tuples; all read back as the plain
Python values that were recorded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Same:
    """One detail value shared by every message of a batch (`Trace.append_batch`), kept once."""

    value: Any


class Shared:
    """A chunk's column holding one value for all of its `count` records."""

    __slots__ = ("count", "dtype", "value")

    def __init__(self, value: Any, count: int, dtype: type | None = None) -> None:
        self.value = value if dtype is None else dtype(value).item()  # read back as the array's item would be
        self.count, self.dtype = count, dtype

    def array(self) -> np.ndarray:
        if self.dtype is not None:
            return np.full(self.count, self.value, self.dtype)
        return constant(self.value, self.count)

    def item(self, k: int) -> Any:
        return self.value


class Members:
    """A chunk's column of device ids kept as the sequence it was given (a group's members, shared)."""

    __slots__ = ("values",)

    def __init__(self, values: Sequence[int]) -> None:
        self.values = values

    def array(self) -> np.ndarray:
        return np.asarray(self.values, np.int64)

    def item(self, k: int) -> int:
        return int(self.values[k])


def column_of(values: Sequence | float | int, count: int, dtype: type) -> np.ndarray | Shared:
    if isinstance(values, (int, float, np.integer, np.floating)):
        return Shared(values, count, dtype)
    return np.array(values, dtype)


class Details:
    """A batch's detail column, kept as one sequence (or one `Same` value) per key until someone reads it."""

    def __init__(self, columns: dict[str, Any], count: int) -> None:
        self.columns, self.count = columns, count

    def __len__(self) -> int:
        return self.count

    def values(self, key: str) -> list:
        """Every record's value of `key` (None for all when no record has it)."""
        column = self.columns.get(key)
        if column is None:
            return [None] * self.count
        if isinstance(column, Same):
            return [column.value] * self.count
        if isinstance(column, np.ndarray):
            return column.tolist() if column.ndim == 1 else [tuple(row) for row in column.tolist()]
        return list(column)

    def item(self, k: int) -> dict:
        return {key: _value(column, k) for key, column in self.columns.items()}

    def dicts(self) -> np.ndarray:
        keys = list(self.columns)
        rows = zip(*(self.values(key) for key in keys)) if keys else ((),) * self.count
        values = np.empty(self.count, object)
        values[:] = [dict(zip(keys, row)) for row in rows]
        return values


def numbers_of(column: Any, count: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """One key's detail column (None, `Same`, an array, or a sequence with None where a record lacks the key)
    as int64 values of shape `(count,)` or `(count, width)`, zero where absent, and a mask of where present.

    >>> numbers_of(Same((0, 2)), 3, 2)[0].tolist()
    [[0, 2], [0, 2], [0, 2]]
    """
    shape = (count, width) if width else (count,)
    if column is None or (isinstance(column, Same) and column.value is None):
        return np.zeros(shape, np.int64), np.zeros(count, bool)
    if isinstance(column, Same):
        return np.broadcast_to(np.asarray(column.value, np.int64), shape), np.ones(count, bool)
    if isinstance(column, np.ndarray):
        return column.astype(np.int64, copy=False).reshape(shape), np.ones(count, bool)
    present = np.fromiter((v is not None for v in column), bool, count)
    if present.all():
        return np.asarray(column, np.int64).reshape(shape), present
    values = np.zeros(shape, np.int64)
    values[present] = np.asarray([v for v in column if v is not None], np.int64).reshape((-1, *shape[1:]))
    return values, present


def joined_numbers(details: list, key: str, width: int) -> tuple[np.ndarray, np.ndarray]:
    """`numbers_of` one key over the detail columns of every chunk (`Details`, or an array of dicts), joined;
    batches that each share one value (a gather's `rows`) are repeated in one pass."""
    columns = [d.columns.get(key) if isinstance(d, Details) else None for d in details]
    if all(isinstance(c, Same) and c.value is not None for c in columns):
        counts = [d.count for d in details]
        values = np.array([c.value for c in columns], np.int64).reshape((len(columns), width) if width else -1)
        return np.repeat(values, counts, axis=0), np.ones(sum(counts), bool)
    parts = [numbers_of(column, d.count, width) if isinstance(d, Details) else
             numbers_of([one.get(key) for one in d], len(d), width) for column, d in zip(columns, details)]
    return np.concatenate([v for v, _ in parts]), np.concatenate([p for _, p in parts])


def _value(column: Any, k: int) -> Any:
    """Record k's value in one key's detail column."""
    if isinstance(column, Same):
        return column.value
    if isinstance(column, np.ndarray):
        return column[k].item() if column.ndim == 1 else tuple(column[k].tolist())
    return column[k]


_SHARED = (int, str, type(None))  # values a column may keep once when all are equal (not floats: -0.0 == 0.0)


def packed_details(details: tuple[dict, ...]) -> Any:
    """Staged rows' details as one column per key (each as compact as its values allow) when every
    detail has the same keys in the same order; else one dict per row."""
    keys = tuple(details[0])
    if any(len(d) != len(keys) or tuple(d) != keys for d in details):
        column = np.empty(len(details), object)
        column[:] = details
        return column
    return Details({key: _compact([d[key] for d in details]) for key in keys}, len(details))


def _compact(values: list) -> Any:
    """One key's values: `Same` when all are one plain value, an array when all are ints (or floats, or
    tuples of as many ints), else the list."""
    first = values[0]
    kind = type(first)
    if kind in _SHARED and values.count(first) == len(values) and all(type(v) is kind for v in values):
        return Same(first)
    if kind in (int, float) and all(type(v) is kind for v in values):
        with contextlib.suppress(OverflowError):
            return np.array(values, np.int64 if kind is int else np.float64)
    if kind is tuple and all(type(v) is tuple and len(v) == len(first) and all(type(e) is int for e in v)
                             for v in values) and first:
        with contextlib.suppress(OverflowError):
            return np.array(values, np.int64)
    return values


def kinds_of(column: Any) -> set:
    """The kinds a chunk's records have."""
    return {column.value} if isinstance(column, Shared) else set(column.tolist())


def constant(value: str, count: int) -> np.ndarray:
    column = np.empty(count, object)
    column[:] = [value] * count if isinstance(value, (tuple, list, dict)) else value
    return column


def array_of(column) -> np.ndarray:
    if isinstance(column, Details):
        return column.dicts()
    return column.array() if isinstance(column, (Shared, Members)) else column


def joined_column(columns: list) -> np.ndarray:
    """The chunks' columns of one field as one array; the members of a group that many batches share
    (`Members` of one sequence) are made an array once."""
    if all(isinstance(c, Shared) for c in columns) and _plain_shared(columns):  # e.g. each batch's sender
        values = np.array([c.value for c in columns], columns[0].dtype or object)
        return np.repeat(values, [c.count for c in columns])
    members: dict[int, np.ndarray] = {}
    parts = []
    for column in columns:
        if isinstance(column, Members):
            made = members.get(id(column.values))
            if made is None:
                made = members[id(column.values)] = column.array()
            parts.append(made)
        else:
            parts.append(array_of(column))
    return np.concatenate(parts)


def _plain_shared(columns: list[Shared]) -> bool:
    """Whether these shared values make one array as they are: numbers of one dtype, or strings."""
    dtype = columns[0].dtype
    if dtype is not None:
        return all(c.dtype is dtype for c in columns)
    return all(c.dtype is None and type(c.value) is str for c in columns)


def item_of(column, k: int):
    """Element `k` of a chunk's column, as a Python value (a batch's detail made for this one record)."""
    if isinstance(column, (Details, Shared, Members)):
        return column.item(k)
    value = column[k]
    return value.item() if isinstance(value, np.generic) else value
