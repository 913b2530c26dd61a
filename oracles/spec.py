"""The executable spec: each collective transcribed from its JAX doc into plain numpy.

Written to be read, not to be fast. Every function takes per-device data as a list indexed by device id
on a mesh given as a dict of axis name -> size (devices row-major over the axes, as `jax.sharding.Mesh`),
and returns the per-device results as a new list. Inputs are assumed valid: the simulator validates them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence

import numpy as np

AxisName = Hashable | tuple[Hashable, ...]


def groups(mesh_shape: dict[Hashable, int], axis_name: AxisName,
           axis_index_groups: Sequence[Sequence[int]] | None = None) -> list[list[int]]:
    """Return the device ids of every group a collective over `axis_name` runs on, in group-index order.

    A tuple `axis_name` is one axis whose linear index is row-major in the tuple's order (first name most
    major); `axis_index_groups` then picks and orders axis indices within each such axis.

    >>> groups({'x': 2, 'y': 2}, ('y', 'x'))
    [[0, 2, 1, 3]]
    >>> groups({'i': 4}, 'i', [[0, 2], [3, 1]])
    [[0, 2], [3, 1]]
    """
    names = list(mesh_shape)
    axes = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    ids = np.arange(int(np.prod(list(mesh_shape.values())))).reshape(tuple(mesh_shape.values()))
    ids = np.moveaxis(ids, [names.index(a) for a in axes], list(range(ids.ndim - len(axes), ids.ndim)))
    along_axis = ids.reshape(-1, int(np.prod([mesh_shape[a] for a in axes])))
    if axis_index_groups is None:
        return along_axis.tolist()
    return [row[list(g)].tolist() for row in along_axis for g in axis_index_groups]


def all_gather(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName, *,
               axis_index_groups: Sequence[Sequence[int]] | None = None, axis: int = 0,
               tiled: bool = False) -> list[np.ndarray]:
    """Every member gets its group's chunks in group order, stacked at `axis` (concatenated if `tiled`).

    >>> all_gather([np.array(d) for d in range(4)], {'i': 4}, 'i')[1]
    array([0, 1, 2, 3])
    """
    out: list[np.ndarray] = [np.empty(0)] * len(xs)
    for group in groups(mesh_shape, axis_name, axis_index_groups):
        chunks = [np.asarray(xs[d]) for d in group]
        gathered = np.concatenate(chunks, axis) if tiled else np.stack(chunks, axis)
        for d in group:
            out[d] = gathered.copy()
    return out


def all_to_all(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName,
               split_axis: int, concat_axis: int, *,
               axis_index_groups: Sequence[Sequence[int]] | None = None,
               tiled: bool = False) -> list[np.ndarray]:
    """Member j receives chunk j of every member's `split_axis`, in group order along `concat_axis`.

    Untiled, chunk j is index j of `split_axis` (which is removed) and the chunks are stacked into a new
    `concat_axis`: shape `np.insert(np.delete(x.shape, split_axis), concat_axis, group_size)`. Tiled,
    `split_axis` is cut into group_size equal chunks that are concatenated along `concat_axis`.

    >>> all_to_all([np.array([10 * d, 10 * d + 1]) for d in range(2)], {'i': 2}, 'i', 0, 0)[1]
    array([ 1, 11])
    """
    out: list[np.ndarray] = [np.empty(0)] * len(xs)
    for group in groups(mesh_shape, axis_name, axis_index_groups):
        for j, d in enumerate(group):
            if tiled:
                chunks = [np.split(np.asarray(xs[s]), len(group), split_axis)[j] for s in group]
                out[d] = np.concatenate(chunks, concat_axis)
            else:
                chunks = [np.take(np.asarray(xs[s]), j, split_axis) for s in group]
                out[d] = np.stack(chunks, concat_axis)
    return out


def ragged_all_to_all(operands: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                      input_offsets: Sequence[np.ndarray], send_sizes: Sequence[np.ndarray],
                      output_offsets: Sequence[np.ndarray], recv_sizes: Sequence[np.ndarray],
                      mesh_shape: dict[Hashable, int], *, axis_name: AxisName,
                      axis_index_groups: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
    """The doc's SEND and RECEIVE loops, run by every member of every group; `outputs` are not modified.

    Messages between a sender and a receiver arrive in the order they were sent (one FIFO per pair),
    which is what pairs the receiver's i-th RECEIVE from a sender with that sender's matching SEND.
    See tests/test_spec.py for the doc's two-device example ([1, 3, 0, 0] and [2, 2, 4, 0]).
    """
    output_offsets_ = all_to_all(output_offsets, mesh_shape, axis_name, 0, 0,
                                 axis_index_groups=axis_index_groups, tiled=True)
    results = [np.array(output, copy=True) for output in outputs]
    for group in groups(mesh_shape, axis_name, axis_index_groups):
        N = len(input_offsets[group[0]])
        slices_per_device = N // len(group)
        channel = {(src, dst): deque() for src in range(len(group)) for dst in range(len(group))}
        for src_idx, d in enumerate(group):  # SEND
            for i in range(N):
                start, size = int(input_offsets[d][i]), int(send_sizes[d][i])
                channel[src_idx, i // slices_per_device].append(operands[d][start:start + size])
        for dst_idx, d in enumerate(group):  # RECEIVE
            for i in range(N):
                start, size = int(output_offsets_[d][i]), int(recv_sizes[d][i])
                results[d][start:start + size] = channel[i // slices_per_device, dst_idx].popleft()
    return results
