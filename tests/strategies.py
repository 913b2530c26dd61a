"""Generated collective cases for the tests, hand-made cases, and the assertion of agreement.

The generator lives in the package, beside `meshsim campaign`, which runs the same cases on Dask:
`scenarios.campaign._cases` draws a `Case` of any registered collective (`cases(op)`; its docstring lists what it
covers) and `scenarios.campaign._answers` runs one through the simulator, the spec and real JAX and compares the
answers. This module re-exports both and adds what only the tests use: hand-specified ragged and dense
cases, the docs' ragged example, `features` (what a case covers) and `check_agreement`, which counts the
cases checked per collective (the test summary reports it) and fails with every byte-level difference.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from collectives._ragged_strategy import sender_tables
from oracles._compare import flatten as _flatten
from scenarios.campaign import (
    DTYPES,
    INDEX_DTYPES,
    MAX_DEVICES,
    Case,
    Fill,
    Filler,
    axis_names,
    cases,
    collective_axes,
    device_groups,
    differences,
    disagreements,
    dtypes,
    fills,
    index_groups,
    meshes,
    run_jax,
    run_simulator,
    run_spec,
    small_dims,
)

__all__ = ["DOCS_RAGGED", "DOCUMENTED", "DTYPES", "INDEX_DTYPES", "MAX_DEVICES", "Case", "Fill", "Filler",
           "axis_names", "cases", "check_agreement", "collective_axes", "dense_case", "device_groups",
           "differences", "disagreements", "dtypes", "features", "fills", "index_groups", "meshes",
           "ragged_case", "run_jax", "run_simulator", "run_spec", "small_dims"]

# The collectives of the JAX docs have their own generated tests, beside the docs' examples, in
# test_differential.py; every other registered collective is generated in test_reductions*.py.
DOCUMENTED = ("all_gather", "all_to_all", "ragged_all_to_all")

# How many cases were checked in this process, by (op, "jax" or "spec"): the test summary reports it.
CHECKED: collections.Counter[tuple[str, str]] = collections.Counter()


# ---------------------------------------------------------------------------------------------- ragged


def _ragged(mesh_shape: dict[str, int], params: dict[str, Any], tables: list[list[list[int]]],
            rows: int, out_rows: int, trailing: tuple[int, ...], dtype: np.dtype, index_dtype: np.dtype,
            fill: Fill) -> Case:
    """Assemble a ragged case from its index tables (input_offsets, send_sizes, output_offsets, recv_sizes)."""
    n = len(tables[0])
    operands = tuple(fill.array((rows, *trailing), dtype, salt=d) for d in range(n))
    outputs = tuple(fill.array((out_rows, *trailing), dtype, salt=MAX_DEVICES + d) for d in range(n))
    index = [tuple(np.array(v, index_dtype) for v in table) for table in tables]
    return Case("ragged_all_to_all", dict(mesh_shape), (operands, outputs, *index), params)


def ragged_case(mesh_shape: dict[str, int], axis_name: Any, recv_sizes: Sequence[Sequence[int]], *,
                axis_index_groups: list[list[int]] | None = None, trailing: tuple[int, ...] = (),
                dtype: Any = "int32", index_dtype: Any = "int32") -> Case:
    """A hand-specified ragged case: `recv_sizes[d]` for every device d, the rest laid out deterministically.

    Each device receives its slices in reverse order after one padding row, one padding row between
    slices, and the device with the most rows has its last slice end at the last output row. Each device
    sends its slices packed in order from row 0; the operand has one padding row at its end.
    """
    recv_sizes = [list(sizes) for sizes in recv_sizes]
    recv_offsets, out_rows = [], []
    for sizes in recv_sizes:
        offsets, cursor = [0] * len(sizes), 1
        for i in reversed(range(len(sizes))):
            offsets[i], cursor = cursor, cursor + sizes[i] + 1
        recv_offsets.append(offsets)
        out_rows.append(cursor - 1)
    send_sizes, output_offsets = sender_tables(device_groups(mesh_shape, axis_name, axis_index_groups), recv_sizes,
                                               recv_offsets)
    input_offsets = [[int(v) for v in np.cumsum([0, *sizes[:-1]])] for sizes in send_sizes]
    params = {"axis_name": axis_name, "axis_index_groups": axis_index_groups}
    return _ragged(mesh_shape, params, [input_offsets, send_sizes, output_offsets, recv_sizes],
                   max(sum(sizes) for sizes in send_sizes) + 1, max(out_rows), tuple(trailing), np.dtype(dtype),
                   np.dtype(index_dtype), Fill("iota", 0))


def dense_case(op: str, mesh_shape: dict[str, int], shape: Sequence[int], dtype: Any = "int32",
               **params: Any) -> Case:
    """A hand-specified all_gather or all_to_all case with readable per-device values."""
    n = int(np.prod(list(mesh_shape.values())))
    xs = tuple(Fill("iota", 0).array(tuple(shape), np.dtype(dtype), salt=d) for d in range(n))
    defaults = {"axis_index_groups": None, "tiled": False}
    return Case(op, dict(mesh_shape), (xs,), {**defaults, **params})


# The ragged_all_to_all docs' example, literal numbers: the results are [1, 3, 0, 0] and [2, 2, 4, 0].
DOCS_RAGGED = Case(
    "ragged_all_to_all", {"x": 2},
    tuple(tuple(np.array(v) for v in per_device) for per_device in (
        ([1, 2, 2], [3, 4, 0]), ([0, 0, 0, 0], [0, 0, 0, 0]), ([0, 1], [0, 1]), ([1, 2], [1, 1]),
        ([0, 0], [1, 2]), ([1, 1], [2, 1]))),
    {"axis_name": "x", "axis_index_groups": None},
)


# ---------------------------------------------------------------------------------------------- features


def features(case: Case) -> set[str]:
    """The properties of `case` the suite must cover, as short labels (also Hypothesis events)."""
    p = case.params
    found = {case.op, f"{len(case.mesh_shape)}-D mesh"}
    if isinstance(p["axis_name"], tuple):
        found.add("tuple axis_name")
        if len(p["axis_name"]) > 1 and list(p["axis_name"]) != [n for n in case.mesh_shape if n in p["axis_name"]]:
            found.add("tuple axis_name against mesh order")
    if p.get("axis_index_groups") is not None:
        found.add("axis_index_groups")
    leaves = [leaf for _, leaf in _flatten(case.args[0][0])]
    if len(leaves) > 1 or not isinstance(case.args[0][0], np.ndarray):
        found.add("pytree")
    if case.op != "ragged_all_to_all":
        found.add("tiled" if p.get("tiled", False) else "untiled")
        if any(p.get(a, 0) < 0 for a in ("axis", "split_axis", "concat_axis")):
            found.add("negative axis")
    found |= {f"rank {x.ndim}" for x in leaves} | {f"dtype {x.dtype}" for x in leaves}
    if any(0 in x.shape for x in leaves):
        found.add("zero-size dimension")
    if case.op == "ragged_all_to_all":
        found |= _ragged_features(case)
    return found


def _ragged_features(case: Case) -> set[str]:
    operands, outputs, input_offsets, send_sizes, output_offsets, recv_sizes = case.args
    found = set()
    if any((s == 0).any() for s in send_sizes):
        found.add("zero-size ragged slice")
    rows = outputs[0].shape[0]
    for offsets, sizes in zip(output_offsets, send_sizes):
        if any(o + s == rows and s for o, s in zip(offsets, sizes)):
            found.add("slice ends at last output row")
    for d, (offsets, sizes) in enumerate(zip(input_offsets, send_sizes)):
        if any(o + s == operands[d].shape[0] and s for o, s in zip(offsets, sizes)):
            found.add("slice ends at last operand row")
    written = sum(int(s.sum()) for s in recv_sizes)
    if written < sum(o.shape[0] for o in outputs):
        found.add("output rows left as padding")
    return found


# ---------------------------------------------------------------------------------------------- agreement


def check_agreement(case: Case, oracle: Any = None, *, simulator: Callable[[Case], list[Any]] = run_simulator,
                    reference: Callable[[Case], list[Any]] = run_spec) -> None:
    """Assert simulator == spec (== real JAX when `oracle` is given), bit for bit, on every device.

    Raises:
        AssertionError: listing every difference, each naming the device, the leaf and the elements.
    """
    found = disagreements(case, oracle, simulator=simulator, reference=reference)
    CHECKED[case.op, "jax" if oracle is not None else "spec"] += 1
    if found:
        raise AssertionError(f"{len(found)} difference(s) on\n{case!r}\n  " + "\n  ".join(found))
