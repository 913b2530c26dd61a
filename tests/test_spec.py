"""The executable spec (oracles.spec) against the literal examples of the JAX docs. No JAX needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from oracles import spec

REPO = Path(__file__).resolve().parents[1]


def assert_all_equal(got: list[np.ndarray], want: list[list]) -> None:
    assert len(got) == len(want)
    for d, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g, np.array(w), err_msg=f"device {d}")


# --- groups -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis_name, axis_index_groups, want", [
    ("x", None, [[0, 2], [1, 3]]),
    ("y", None, [[0, 1], [2, 3]]),
    (("x", "y"), None, [[0, 1, 2, 3]]),
    (("y", "x"), None, [[0, 2, 1, 3]]),
    (("y", "x"), [[3, 0], [1, 2]], [[3, 0], [2, 1]]),
], ids=["x", "y", "xy", "yx", "yx-groups"])
def test_groups_on_2x2_mesh(axis_name, axis_index_groups, want):
    """A tuple axis is row-major in the tuple's order; group members follow the order they are listed in."""
    assert spec.groups({"x": 2, "y": 2}, axis_name, axis_index_groups) == want


def test_groups_subdivide_every_instance_of_the_axis():
    """axis_index_groups on one axis of a 2-D mesh apply to each row of the other axis separately."""
    assert spec.groups({"x": 2, "y": 4}, "y", [[0, 3], [1, 2]]) == [[0, 3], [1, 2], [4, 7], [5, 6]]


def test_groups_on_3d_mesh_with_tuple_axis():
    """('z', 'x') on a 2x2x2 mesh: one group per y, z most major, devices id = 4x + 2y + z."""
    assert spec.groups({"x": 2, "y": 2, "z": 2}, ("z", "x")) == [[0, 4, 1, 5], [2, 6, 3, 7]]


# --- all_gather -----------------------------------------------------------------------------------------


def test_all_gather_docs_example():
    """Docs: x = np.arange(4) over 4 devices; every device gets [0 1 2 3]."""
    xs = list(np.arange(4))
    assert_all_equal(spec.all_gather(xs, {"i": 4}, "i"), [[0, 1, 2, 3]] * 4)


def test_all_gather_docs_axis_index_groups_example():
    """Docs: rows of arange(16).reshape(4, 4), groups [[0, 2], [3, 1]]: members gather in listed order."""
    xs = list(np.arange(16).reshape(4, 4))
    even = [[0, 1, 2, 3], [8, 9, 10, 11]]
    odd = [[12, 13, 14, 15], [4, 5, 6, 7]]
    got = spec.all_gather(xs, {"i": 4}, "i", axis_index_groups=[[0, 2], [3, 1]])
    assert_all_equal(got, [even, odd, even, odd])


def test_all_gather_tuple_axis_gathers_in_tuple_order():
    """all_gather over ('y', 'x') on {'x': 2, 'y': 2} gathers devices 0, 2, 1, 3 (checked in real JAX)."""
    got = spec.all_gather(list(np.arange(4)), {"x": 2, "y": 2}, ("y", "x"))
    assert_all_equal(got, [[0, 2, 1, 3]] * 4)


@pytest.mark.parametrize("axis, tiled, want_shape", [
    (0, False, (4, 2, 3)), (1, False, (2, 4, 3)), (2, False, (2, 3, 4)), (-1, False, (2, 3, 4)),
    (0, True, (8, 3)), (1, True, (2, 12)), (-1, True, (2, 12)),
])
def test_all_gather_shape_rule(axis, tiled, want_shape):
    """Docs: untiled adds a dimension of the axis size at `axis`; tiled multiplies dimension `axis`."""
    xs = [np.zeros((2, 3))] * 4
    assert spec.all_gather(xs, {"i": 4}, "i", axis=axis, tiled=tiled)[0].shape == want_shape


# --- all_to_all -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("split_axis, concat_axis", [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (0, 2)])
def test_all_to_all_untiled_shape_rule(split_axis, concat_axis):
    """Docs: untiled result shape is np.insert(np.delete(x.shape, split_axis), concat_axis, axis_size)."""
    shape = [4, 4, 4]
    xs = [np.zeros(shape)] * 4
    got = spec.all_to_all(xs, {"i": 4}, "i", split_axis, concat_axis)[0].shape
    assert got == tuple(np.insert(np.delete(shape, split_axis), concat_axis, 4))


@pytest.mark.parametrize("split_axis, concat_axis, want_shape", [
    (0, 0, (8, 4)), (0, 1, (2, 16)), (1, 0, (32, 1)), (1, 1, (8, 4)),
])
def test_all_to_all_tiled_shape_rule(split_axis, concat_axis, want_shape):
    """Docs: tiled divides split_axis by the axis size and multiplies concat_axis by it."""
    xs = [np.zeros((8, 4))] * 4
    assert spec.all_to_all(xs, {"i": 4}, "i", split_axis, concat_axis, tiled=True)[0].shape == want_shape


def test_all_to_all_untiled_transposes_device_and_split_axis():
    """Docs: the mapped axis is materialized and split_axis mapped: out[d][j] = xs[j][d]."""
    xs = [np.array([10 * d + j for j in range(4)]) for d in range(4)]
    want = [[10 * j + d for j in range(4)] for d in range(4)]
    assert_all_equal(spec.all_to_all(xs, {"i": 4}, "i", 0, 0), want)


def test_all_to_all_with_axis_index_groups():
    """Groups [[0, 2], [3, 1]]: group index j receives chunk j from members in listed order (real JAX agrees)."""
    xs = [np.array([10 * d, 10 * d + 1]) for d in range(4)]
    got = spec.all_to_all(xs, {"i": 4}, "i", 0, 0, axis_index_groups=[[0, 2], [3, 1]])
    assert_all_equal(got, [[0, 20], [31, 11], [1, 21], [30, 10]])


@pytest.mark.parametrize("split_axis, concat_axis", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_all_to_all_tiled_is_undone_by_swapping_axes(split_axis, concat_axis):
    """A tiled all_to_all followed by the one with split and concat swapped gives the inputs back."""
    rng = np.random.default_rng(0)
    xs = [rng.integers(0, 100, (4, 8)) for _ in range(4)]
    there = spec.all_to_all(xs, {"i": 4}, "i", split_axis, concat_axis, tiled=True)
    back = spec.all_to_all(there, {"i": 4}, "i", concat_axis, split_axis, tiled=True)
    assert_all_equal(back, [x.tolist() for x in xs])


# --- ragged_all_to_all ----------------------------------------------------------------------------------

DOCS_RAGGED = dict(
    operands=[np.array([1, 2, 2]), np.array([3, 4, 0])],
    outputs=[np.array([0, 0, 0, 0]), np.array([0, 0, 0, 0])],
    input_offsets=[np.array([0, 1]), np.array([0, 1])],
    send_sizes=[np.array([1, 2]), np.array([1, 1])],
    output_offsets=[np.array([0, 0]), np.array([1, 2])],
    recv_sizes=[np.array([1, 1]), np.array([2, 1])],
)


def test_ragged_all_to_all_docs_example():
    """Docs: on an axis of size 2 the results are [1, 3, 0, 0] and [2, 2, 4, 0]."""
    got = spec.ragged_all_to_all(**DOCS_RAGGED, mesh_shape={"i": 2}, axis_name="i")
    assert_all_equal(got, [[1, 3, 0, 0], [2, 2, 4, 0]])


def test_ragged_all_to_all_leaves_output_argument_untouched():
    """The result is a new array: the caller's `output` keeps its value."""
    spec.ragged_all_to_all(**DOCS_RAGGED, mesh_shape={"i": 2}, axis_name="i")
    assert_all_equal(DOCS_RAGGED["outputs"], [[0, 0, 0, 0]] * 2)


def test_ragged_all_to_all_docs_example_inside_groups():
    """The docs' example run by the two groups [[0, 2], [3, 1]] of a 4-device axis gives it in each group."""
    args = {name: [v[0], v[1], v[1], v[0]] for name, v in DOCS_RAGGED.items()}
    args["operands"] = [np.array([1, 2, 2]), np.array([13, 14, 10]), np.array([3, 4, 0]), np.array([11, 12, 12])]
    got = spec.ragged_all_to_all(**args, mesh_shape={"i": 4}, axis_name="i", axis_index_groups=[[0, 2], [3, 1]])
    assert_all_equal(got, [[1, 3, 0, 0], [12, 12, 14, 0], [2, 2, 4, 0], [11, 13, 0, 0]])


def test_ragged_all_to_all_with_full_equal_slices_is_tiled_all_to_all():
    """Sending chunk k of every operand to member k, packed in sender order, is the tiled all_to_all."""
    rng = np.random.default_rng(1)
    n, rows = 4, 3
    xs = [rng.integers(0, 100, (n * rows, 2)) for _ in range(n)]
    input_offsets = [np.arange(n) * rows] * n
    output_offsets = [np.full(n, sender * rows) for sender in range(n)]
    sizes = [np.full(n, rows)] * n
    got = spec.ragged_all_to_all(xs, [np.zeros_like(x) for x in xs], input_offsets, sizes, output_offsets,
                                 sizes, {"i": n}, axis_name="i")
    want = spec.all_to_all(xs, {"i": n}, "i", 0, 0, tiled=True)
    assert_all_equal(got, [w.tolist() for w in want])


# --- the package surface --------------------------------------------------------------------------------


def test_importing_oracles_does_not_import_jax():
    """Only the worker process imports jax: `import oracles` (and the spec) leave it unloaded."""
    code = "import sys, oracles; from oracles import spec, shared_oracle; assert 'jax' not in sys.modules"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True)
