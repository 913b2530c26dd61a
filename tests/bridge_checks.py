"""Comparisons the bridge's worker batches share: bytes (`same_bits`), units in the last place
(`ulps_apart`), what two simulations of one program simulated (`run_differences`), and seeded inputs
(`rng`). Importing it starts no JAX (a worker sets its device count first)."""

from __future__ import annotations

from typing import Any

import numpy as np

import collectives


def rng(seed: int, *shape: int) -> np.ndarray:
    """Standard normal float32 values of `shape` from a generator seeded `seed`."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def ulps_apart(wanted: Any, found: Any) -> int:
    """The largest distance in units in the last place between two float arrays of one dtype (0 otherwise)."""
    wanted, found = np.asarray(wanted), np.asarray(found)
    if wanted.dtype != found.dtype or wanted.shape != found.shape or wanted.dtype.kind != "f" or not wanted.size:
        return 0
    width = {2: np.int16, 4: np.int32, 8: np.int64}[wanted.dtype.itemsize]
    a, b = wanted.view(width).astype(np.int64), found.view(width).astype(np.int64)
    a = np.where(a < 0, np.iinfo(width).min - a, a)
    b = np.where(b < 0, np.iinfo(width).min - b, b)
    return int(np.max(np.abs(a - b)))


def same_bits(wanted: list, found: list) -> bool:
    """Whether two lists of arrays hold the same dtypes, shapes and bytes."""
    wanted, found = [np.asarray(x) for x in wanted], [np.asarray(x) for x in found]
    return len(wanted) == len(found) and all(a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
                                             for a, b in zip(wanted, found))


def run_differences(a: Any, b: Any) -> list[str]:
    """Where two simulations of one program differ in what was simulated: the number of runs, every column of
    each run's trace, its end time, the collective equations each device's program records (op, parameters
    and the types of their operands and results), and the outputs' dtypes and shapes. Values are left out:
    compiled segments round as XLA does, equation-by-equation evaluation as JAX's eager mode does."""
    import jax

    found = [] if len(a.runs) == len(b.runs) else [f"{len(a.runs)} runs against {len(b.runs)}"]
    for k, (x, y) in enumerate(zip(a.runs, b.runs)):
        cx, cy = x.trace.columns(), y.trace.columns()
        found += [f"run {k}: trace column {name}" for name in cx if not _same_column(cx[name], cy[name])]
        if x.end_time_s != y.end_time_s:
            found.append(f"run {k}: ends at {x.end_time_s} against {y.end_time_s}")
        found += [f"run {k}: device {d}'s collectives" for d, (p, q) in enumerate(zip(x.programs, y.programs))
                  if _collectives(p) != _collectives(q)]
    shapes = [[(np.asarray(v).dtype, np.shape(v)) for v in jax.tree.leaves(s.outputs)] for s in (a, b)]
    return found + ([f"outputs {shapes[0]} against {shapes[1]}"] if shapes[0] != shapes[1] else [])


def _same_column(x: np.ndarray, y: np.ndarray) -> bool:
    if x.dtype != object and y.dtype != object:
        return x.shape == y.shape and x.dtype == y.dtype and bool(np.array_equal(x, y, equal_nan=True))
    return list(x) == list(y)


def _collectives(program: Any) -> list:
    """A device program's collective equations that move data, each with its parameters and its operands' and
    results' types (`pvary` moves none: a compiled segment records a nested jit as one equation, pvary inside)."""
    named = {definition.name for definition in collectives.REGISTRY.values()} - {"pvary"}
    kind = lambda v: (str(v.dtype), v.shape, sorted(v.vma)) if hasattr(v, "vma") else "const"
    return [(e.op, repr(e.params), [kind(v) for v in e.inputs], [kind(v) for v in e.outputs])
            for e in program.equations if e.op in named]
