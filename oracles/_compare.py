"""`compare`: two sets of per-device answers, bit for bit, as structured `Difference`s.

An answer is one value per device: an array or a pytree of arrays (dicts, tuples, lists). Two leaves agree
when their dtype, shape and row-major bytes are equal, so NaN payloads and the sign of zero count, and
values that compare equal in another dtype do not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_SHOWN_INDICES = 6  # how many differing element indices a difference keeps


@dataclass(frozen=True, eq=False)
class Difference:
    """One place where an answer differs from the expected one.

    `kind` is "devices" (answers for different device counts: `expected`/`actual` are the counts),
    "tree" (different pytree structure: the leaf paths), "aval" (different dtype or shape: the leaves) or
    "bytes" (same dtype and shape, different bytes: the leaves, `count` differing elements, the first
    few at `indices`). `device` is None for "devices"; `path` names the leaf ('' for a bare array).
    """

    kind: str
    device: int | None
    path: str
    expected: Any
    actual: Any
    count: int = 0
    indices: tuple[tuple[int, ...], ...] = ()

    @property
    def first_index(self) -> tuple[int, ...] | None:
        """The index of the first differing element (row-major), for a "bytes" difference."""
        return self.indices[0] if self.indices else None

    def first_values(self) -> tuple[Any, Any]:
        """(expected, actual) values of the first differing element."""
        index = self.first_index
        return np.asarray(self.expected)[index], np.asarray(self.actual)[index]

    def first_bits(self) -> tuple[str, str]:
        """(expected, actual) bits of the first differing element as big-endian hex, e.g. '0x7fc00000'."""
        return tuple(f"0x{np.ascontiguousarray(v).view(np.uint8)[::-1].tobytes().hex()}"
                     for v in self.first_values())


def compare(expected: Sequence[Any], actual: Sequence[Any]) -> list[Difference]:
    """Every device and leaf where `actual` differs from `expected` in dtype, shape or bytes.

    Returns:
        The differences in device order, leaves left to right; empty when the answers agree bit for bit.
    """
    if len(expected) != len(actual):
        return [Difference("devices", None, "", len(expected), len(actual))]
    found = []
    for d, (want, got) in enumerate(zip(expected, actual)):
        want_leaves, got_leaves = flatten(want), flatten(got)
        if [p for p, _ in want_leaves] != [p for p, _ in got_leaves]:
            found.append(Difference("tree", d, "", [p for p, _ in want_leaves], [p for p, _ in got_leaves]))
            continue
        for (path, w), (_, a) in zip(want_leaves, got_leaves):
            if (w.dtype, w.shape) != (a.dtype, a.shape):
                found.append(Difference("aval", d, path, w, a))
            elif np.ascontiguousarray(w).tobytes() != np.ascontiguousarray(a).tobytes():
                flat = _differing_elements(w, a)
                indices = tuple(tuple(int(i) for i in np.unravel_index(f, w.shape)) for f in flat[:_SHOWN_INDICES])
                found.append(Difference("bytes", d, path, w, a, len(flat), indices))
    return found


def describe(difference: Difference, expected_name: str = "spec", actual_name: str = "simulator") -> str:
    """The difference as text: the device, the leaf, and what differs (avals, or the elements and bits)."""
    d = difference
    if d.kind == "devices":
        return f"{actual_name} answered for {d.actual} devices, {expected_name} for {d.expected}"
    where = f"device {d.device}{d.path}: {actual_name} != {expected_name}"
    if d.kind == "tree":
        return f"{where}: tree {d.actual} vs {d.expected}"
    if d.kind == "aval":
        return f"{where}: {actual_name} gives {aval(d.actual)}, {expected_name} gives {aval(d.expected)}"
    want_bits, got_bits = d.first_bits()
    return (f"{where}: bytes differ at {d.count} element(s), first {list(d.indices)} (bits {got_bits} vs "
            f"{want_bits})\n      {actual_name:>9}: {show(d.actual)}\n      {expected_name:>9}: {show(d.expected)}")


def _differing_elements(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Flat (row-major) positions of the elements whose bytes differ."""
    width = want.dtype.itemsize
    w = np.ascontiguousarray(want).view(np.uint8).reshape(-1, width)
    g = np.ascontiguousarray(got).view(np.uint8).reshape(-1, width)
    return np.flatnonzero((w != g).any(axis=1))


def flatten(tree: Any, path: str = "") -> list[tuple[str, np.ndarray]]:
    """(path, leaf) pairs of a pytree of dicts (sorted keys) and tuples/lists, left to right."""
    if isinstance(tree, dict):
        return [pair for key in sorted(tree) for pair in flatten(tree[key], f"{path}[{key!r}]")]
    if isinstance(tree, (tuple, list)):
        return [pair for i, child in enumerate(tree) for pair in flatten(child, f"{path}[{i}]")]
    return [(path, np.asarray(tree))]


def aval(x: np.ndarray) -> str:
    """`dtype[shape]`, e.g. 'int32[2, 3]'."""
    return f"{x.dtype}[{', '.join(map(str, x.shape))}]"


def show(x: np.ndarray) -> str:
    """An array on one line, summarised past 96 elements."""
    return np.array2string(np.asarray(x), separator=", ", threshold=96, max_line_width=2000).replace("\n", "")
