"""Every example in the three reference docs, with the docs' literal numbers, through the simulator."""

from __future__ import annotations

import numpy as np
import pytest

import collectives
import sim
from sim import P


def test_ragged_all_to_all_docs_example():
    """The ragged_all_to_all docs' 2-device example gives [1, 3, 0, 0] and [2, 2, 4, 0]."""
    f = sim.shard_map(lambda *a: collectives.ragged_all_to_all(*a, axis_name="x"), mesh=sim.Mesh({"x": 2}),
                      in_specs=(P("x"),) * 6, out_specs=P("x"))
    out = f(np.array([1, 2, 2, 3, 4, 0]), np.zeros(8, int), np.array([0, 1, 0, 1]), np.array([1, 2, 1, 1]),
            np.array([0, 0, 1, 2]), np.array([1, 1, 2, 1]))
    assert out.reshape(2, 4).tolist() == [[1, 3, 0, 0], [2, 2, 4, 0]]


def test_ragged_data_representation_example():
    """The docs' ragged triple (offsets [0, 1, 4], sizes [1, 3, 4]) names slices of 1, 3 and 4 rows of data."""
    data = np.arange(24).reshape(8, 3)
    offsets, sizes = np.array([0, 1, 4]), np.array([1, 3, 4])
    # one device sending its three components to itself, rearranged in reverse order in the output
    def body(d):
        return collectives.ragged_all_to_all(d, np.zeros_like(d), offsets, sizes, np.array([7, 4, 0]), sizes,
                                             axis_name="x")
    out = sim.shard_map(body, mesh=sim.Mesh({"x": 1}), in_specs=P(), out_specs=P("x"))(data)
    assert out[7:8].tolist() == data[0:1].tolist()
    assert out[4:7].tolist() == data[1:4].tolist()
    assert out[0:4].tolist() == data[4:8].tolist()


def test_all_gather_docs_example():
    """all_gather of np.arange(4) over 4 devices gives [0, 1, 2, 3] on every device."""
    f = sim.shard_map(lambda x: collectives.all_gather(x[0], "i")[None], mesh=sim.Mesh({"i": 4}),
                      in_specs=P("i"), out_specs=P("i"))
    assert f(np.arange(4)).tolist() == [[0, 1, 2, 3]] * 4


def test_all_gather_docs_groups_example():
    """all_gather with axis_index_groups=[[0, 2], [3, 1]] gives the docs' printed 4x2x4 result."""
    f = sim.shard_map(lambda x: collectives.all_gather(x[0], "i", axis_index_groups=[[0, 2], [3, 1]])[None],
                      mesh=sim.Mesh({"i": 4}), in_specs=P("i"), out_specs=P("i"))
    expected = [[[0, 1, 2, 3], [8, 9, 10, 11]], [[12, 13, 14, 15], [4, 5, 6, 7]],
                [[0, 1, 2, 3], [8, 9, 10, 11]], [[12, 13, 14, 15], [4, 5, 6, 7]]]
    assert f(np.arange(16).reshape(4, 4)).tolist() == expected


@pytest.mark.parametrize("split_axis, concat_axis", [(0, 0), (0, 2), (2, 0), (1, 1), (2, 2)])
def test_all_to_all_docs_shape_rules(split_axis, concat_axis):
    """Result shapes follow the docs: untiled np.insert(np.delete(shape, split), concat, size); tiled
    divides split_axis and multiplies concat_axis by the axis size."""
    size = 4
    local = [3, 4, 8]
    local[split_axis] = size
    x = np.zeros([size * local[0]] + local[1:])
    mesh = sim.Mesh({"i": size})
    untiled = sim.shard_map(lambda v: collectives.all_to_all(v, "i", split_axis, concat_axis)[None],
                            mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    tiled = sim.shard_map(lambda v: collectives.all_to_all(v, "i", split_axis, concat_axis, tiled=True)[None],
                          mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    assert untiled(x).shape[1:] == tuple(np.insert(np.delete(local, split_axis), concat_axis, size))
    expected = list(local)
    expected[split_axis] //= size
    expected[concat_axis] *= size
    assert tiled(x).shape[1:] == tuple(expected)


def test_all_gather_docs_shape_rules():
    """Untiled adds a dimension of the axis size at `axis`; tiled multiplies dimension `axis`."""
    mesh = sim.Mesh({"i": 2})
    x = np.zeros((2 * 3, 5))
    for axis in (0, 1, 2, -1):
        assert collectives_shape(mesh, x, axis, False) == tuple(np.insert([3, 5], axis % 3, 2))
    for axis in (0, 1, -1):
        expected = [3, 5]
        expected[axis] *= 2
        assert collectives_shape(mesh, x, axis, True) == tuple(expected)


def collectives_shape(mesh, x, axis, tiled):
    shapes = {}

    def body(v):
        out = collectives.all_gather(v, "i", axis=axis, tiled=tiled)
        shapes[sim.current().device] = out.shape
        return v

    sim.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)
    assert len(set(shapes.values())) == 1
    return shapes[0]
