"""`explore`: run a program under seeded arrival orders and report every result that changes.

The program runs once in the default order and once under each `Perturbation(seed)` (message flights
stretched, simultaneous events shuffled; see `sim.engine._perturb`). Every run lets two ragged slices land on the
same rows, written in arrival order (the last arrival wins), where a normal run refuses the call: that
race is the undefined behaviour whose outcome depends on the order. Outputs are compared byte for byte,
per device block; orders that give the same result are reported together.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from sim._errors import InvalidArgumentError, InvalidTypeError
from sim.engine._perturb import Perturbation
from sim.memory._abstract import AbstractValueError, is_abstract
from sim.program._blocks import block_index
from sim.program._tree import leaves

if TYPE_CHECKING:
    from sim.program._shard_map import Run, ShardMapped

_SHOWN_ROWS = 4  # differing rows whose values a report keeps, per output and device


@dataclass(frozen=True)
class RowsDiffer:
    """Rows of one output's block that differ between two orders, on the devices holding that block.

    `rows` are [start, stop) ranges along the block's leading axis (a scalar block is row 0); `first` and
    `second` are the values of the first few differing rows under each order.
    """

    output: str
    devices: tuple[int, ...]
    rows: tuple[tuple[int, int], ...]
    first: list
    second: list

    def __str__(self) -> str:
        rows = ", ".join(f"[{start}, {stop})" for start, stop in self.rows)
        devices = f"device {self.devices[0]}" if len(self.devices) == 1 else f"devices {list(self.devices)}"
        return f"{self.output} on {devices}, rows {rows}: {self.first} vs {self.second}"


@dataclass(frozen=True)
class OrderDifference:
    """Two orders whose results differ: the default order or a seed (`first`), and a seed (`second`).

    `same_as_second` lists the other seeds that gave the second order's result; `error` is the second
    order's failure when it failed (then `rows` is empty).
    """

    first: int | None
    second: int
    rows: tuple[RowsDiffer, ...]
    same_as_second: tuple[int, ...] = ()
    error: str | None = None

    def __str__(self) -> str:
        first = "the default order" if self.first is None else f"seed {self.first}"
        also = f" (also seeds {list(self.same_as_second)})" if self.same_as_second else ""
        head = f"{first} and seed {self.second}{also} differ"
        if self.error is not None:
            return f"{head}: seed {self.second} failed: {self.error}"
        return head + ":\n" + "\n".join(f"    {rows}" for rows in self.rows)


@dataclass(frozen=True)
class OrderReport:
    """What `explore` found: the seeds it ran, and each distinct result other than the default order's.

    `run` is the default order's run (its outputs are what the program gives when nothing is perturbed,
    with overlapping ragged slices written last arrival wins).
    """

    seeds: tuple[int, ...]
    differences: tuple[OrderDifference, ...]
    run: Run = field(compare=False, repr=False)

    @property
    def independent(self) -> bool:
        """Whether every order gave the default order's result, byte for byte."""
        return not self.differences

    def __str__(self) -> str:
        orders = f"{len(self.seeds) + 1} orders (the default and seeds {self.seeds[0]}..{self.seeds[-1]})"
        if self.independent:
            return f"order-independent over {orders}"
        lines = [f"order-dependent: {len(self.differences)} other result(s) over {orders}"]
        return "\n".join(lines + [f"  {difference}" for difference in self.differences])

    def to_dict(self) -> dict:
        """The report as JSON-ready values."""
        return {"seeds": list(self.seeds), "independent": self.independent, "differences": [
            {"first": d.first, "second": d.second, "same_as_second": list(d.same_as_second), "error": d.error,
             "rows": [{"output": r.output, "devices": list(r.devices), "rows": [list(x) for x in r.rows],
                       "first": r.first, "second": r.second} for r in d.rows]}
            for d in self.differences]}


def check_orders(orders: Any, seed: Any, allow_zero: bool = False) -> None:
    """`orders` must be a positive integer (or 0 when `allow_zero`: no exploration), `seed` one >= 0."""
    for name, value, least in (("orders", orders, 0 if allow_zero else 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise InvalidTypeError(f"{name}={value!r} must be an integer")
        if value < least:
            raise InvalidArgumentError(f"{name}={value} must be >= {least}")


def explore(f: ShardMapped, *args: Any, orders: int = 5, seed: int = 0, spread: float = 1.0,
            stacked: bool = False) -> OrderReport:
    """Run `f(*args)` in the default order and under `Perturbation(s, spread)` for s in `seed` ...
    `seed + orders - 1`; report every result that differs from the default order's.

    With `stacked`, each device's block of an output is its result with a leading axis of length 1 (a
    collective mapped the way `scenarios` maps one): rows are counted within that result.

    Raises:
        InvalidArgumentError, InvalidTypeError: bad `orders`, `seed` or `spread`.
        AbstractValueError: an argument is abstract: there are no values to compare.
        whatever the default-order run raises (a program that fails unperturbed is not explored); a
            perturbed run's failure is reported as a difference instead.
    """
    check_orders(orders, seed)
    abstract = next((k for k, leaf in enumerate(leaves(args)) if is_abstract(leaf)), None)
    if abstract is not None:
        raise AbstractValueError(f"args: leaf {abstract} is abstract (a shape and dtype, no values); exploring "
                                 f"arrival orders compares each order's results byte for byte: explore with real "
                                 f"bytes at a small shape")
    seeds = tuple(range(seed, seed + orders))
    perturbations = [Perturbation(s, spread) for s in seeds]
    base = f.run_with(args, last_arrival_wins=True)
    expected = _snapshot(f, base)
    expected_key = _key(expected)
    found: dict[Any, tuple[OrderDifference, list[int]]] = {}  # each other result: its difference, later seeds
    for perturbation in perturbations:
        try:
            outcome: Any = _snapshot(f, f.run_with(args, perturbation=perturbation, last_arrival_wins=True))
        except Exception as error:  # the order made the program fail: that is what the report is for
            outcome = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        key = outcome if isinstance(outcome, str) else _key(outcome)
        if key == expected_key:
            continue
        if key in found:
            found[key][1].append(perturbation.seed)
        elif isinstance(outcome, str):
            found[key] = (OrderDifference(None, perturbation.seed, (), error=outcome), [])
        else:
            rows = _differences(f, expected, outcome, stacked)
            found[key] = (OrderDifference(None, perturbation.seed, rows), [])
    differences = tuple(replace(d, same_as_second=tuple(more)) for d, more in found.values())
    return OrderReport(seeds, differences, base)


def _snapshot(f: ShardMapped, run: Run) -> list[tuple[str, Any, np.ndarray]]:
    """Each output leaf of `run` with its path and spec, copied (a later run must not write into it)."""
    return [(path, spec, np.array(leaf)) for path, spec, leaf in f.output_leaves(run.outputs)]


def _key(snapshot: list[tuple[str, Any, np.ndarray]]) -> tuple:
    """The bytes of a run's outputs, to tell results apart bit for bit."""
    return tuple((path, leaf.dtype.str, leaf.shape, leaf.tobytes()) for path, _, leaf in snapshot)


def _differences(f: ShardMapped, first: list, second: list, stacked: bool) -> tuple[RowsDiffer, ...]:
    """Per output, the devices whose blocks differ and the rows that do (devices with the same rows of the
    same block, as replicas have, are listed together)."""
    found: list[RowsDiffer] = []
    for (path, spec, a), (_, _, b) in zip(first, second):
        if a.shape != b.shape or a.dtype != b.dtype:
            found.append(RowsDiffer(path, tuple(f.mesh.devices), ((0, max(1, len(a) if a.ndim else 1)),),
                                    [f"{a.dtype}{list(a.shape)}"], [f"{b.dtype}{list(b.shape)}"]))
            continue
        by_block: dict[tuple, list[int]] = {}
        for device in f.mesh.devices:
            index = block_index(f.mesh, device, spec, a.shape, path)
            by_block.setdefault(tuple((s.start, s.stop) for s in index), []).append(device)
        for block, devices in by_block.items():
            index = tuple(slice(start, stop) for start, stop in block)
            mine, theirs = (a[index][0], b[index][0]) if stacked else (a[index], b[index])
            rows = _rows_differing(mine, theirs)
            if rows:
                found.append(RowsDiffer(path, tuple(devices), _ranges(rows), *_values(mine, theirs, rows)))
    return tuple(found)


def _rows_differing(a: np.ndarray, b: np.ndarray) -> list[int]:
    """Indices along the leading axis (row 0 of a scalar) where `a` and `b` differ in any byte."""
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    if a.size == 0:
        return []
    bytes_a = np.ascontiguousarray(a).reshape(len(a), -1).view(np.uint8)
    bytes_b = np.ascontiguousarray(b).reshape(len(b), -1).view(np.uint8)
    return np.flatnonzero((bytes_a != bytes_b).any(axis=1)).tolist()


def _ranges(rows: list[int]) -> tuple[tuple[int, int], ...]:
    """Sorted indices as maximal [start, stop) runs."""
    runs: list[list[int]] = []
    for row in rows:
        if runs and runs[-1][1] == row:
            runs[-1][1] = row + 1
        else:
            runs.append([row, row + 1])
    return tuple((start, stop) for start, stop in runs)


def _values(a: np.ndarray, b: np.ndarray, rows: list[int]) -> tuple[list, list]:
    """The first few differing rows under each order, as lists."""
    shown = rows[:_SHOWN_ROWS]
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    return a[shown].tolist(), b[shown].tolist()
