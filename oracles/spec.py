"""The executable spec: each collective transcribed from its JAX doc into plain numpy.

Written to be read, not to be fast. Every function takes per-device data as a list indexed by device id
on a mesh given as a dict of axis name -> size (devices row-major over the axes, as `jax.sharding.Mesh`),
and returns the per-device results as a new list. Inputs are assumed valid: the simulator validates them.

Each function is registered for its collective's definition (`SPECS`, keyed by `collectives.Definition`);
the transcription itself never calls the simulator.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Sequence

import numpy as np

import collectives
from collectives import Definition
from oracles._spec_arithmetic import WIDER, flushed, fold, narrowed

AxisName = Hashable | tuple[Hashable, ...]
Spec = Callable[..., list[np.ndarray]]

SPECS: dict[Definition, Spec] = {}


def specifies(function: Callable[..., object]) -> Callable[[Spec], Spec]:
    """Register the decorated spec as the executable spec of the collective whose public function is `function`."""
    def register(spec: Spec) -> Spec:
        SPECS[collectives.REGISTRY.of(function)] = spec
        return spec
    return register


def of(definition: Definition) -> Spec:
    """The executable spec of `definition`'s collective."""
    return SPECS[definition]


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


@specifies(collectives.all_gather)
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


@specifies(collectives.all_to_all)
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


@specifies(collectives.ragged_all_to_all)
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


# ---------------------------------------------------------------------------------------------- reductions
# (XLA:CPU's arithmetic, which the folds below follow, is stated in `oracles._spec_arithmetic`.)


def _all_reduce(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName,
                axis_index_groups: Sequence[Sequence[int]] | None, reduction: str) -> list[np.ndarray]:
    xs = [np.asarray(x).astype(np.int32) if np.asarray(x).dtype == bool and reduction == "sum" else np.asarray(x)
          for x in xs]
    if len(xs) == 1:  # compiled away, but bfloat16's conversions to float32 and back stay (NaNs canonical)
        return [narrowed(xs[0].astype(WIDER[xs[0].dtype.name]), xs[0].dtype) if xs[0].dtype.name in WIDER
                else xs[0].copy()]
    out: list[np.ndarray] = [np.empty(0)] * len(xs)
    for group in groups(mesh_shape, axis_name, axis_index_groups):
        total = fold(xs, group, reduction)
        for d in group:
            out[d] = total.copy()
    return out


@specifies(collectives.psum)
def psum(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName, *,
         axis_index_groups: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
    """Every member gets 0 + x[g0] + x[g1] + ... (group order); bool is summed as int32.

    >>> psum([np.array([d, 10 * d]) for d in range(4)], {'i': 4}, 'i')[2]
    array([ 6, 60])
    """
    return _all_reduce(xs, mesh_shape, axis_name, axis_index_groups, "sum")


@specifies(collectives.pmax)
def pmax(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName, *,
         axis_index_groups: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
    """Every member gets the group's elementwise max, folded from -inf by `acc = x if acc < x else acc`."""
    return _all_reduce(xs, mesh_shape, axis_name, axis_index_groups, "max")


@specifies(collectives.pmin)
def pmin(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName, *,
         axis_index_groups: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
    """Every member gets the group's elementwise min, folded from +inf by `acc = x if x < acc else acc`."""
    return _all_reduce(xs, mesh_shape, axis_name, axis_index_groups, "min")


@specifies(collectives.pmean)
def pmean(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName, *,
          axis_index_groups: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
    """psum times the reciprocal of the group size rounded to the result dtype (float32 for integers of up
    to 32 bits and bool, float64 for 64-bit integers), which is what XLA makes of JAX's `psum / n`.

    >>> pmean([np.array([1, 2], np.int32), np.array([2, 2], np.int32)], {'i': 2}, 'i')[0]
    array([1.5, 2. ], dtype=float32)
    """
    sums = psum(xs, mesh_shape, axis_name, axis_index_groups=axis_index_groups)
    n = len(xs) // len(groups(mesh_shape, axis_name, axis_index_groups))
    out = []
    for total in sums:
        dtype = total.dtype if total.dtype.kind in "fc" or total.dtype.name in WIDER \
            else np.dtype("float64" if total.itemsize == 8 else "float32")
        value = total.astype(dtype)
        if len(xs) == 1:
            out.append(value)
        elif dtype.name in WIDER:
            out.append(_narrow_mean(value, n))
        elif dtype.kind == "c":
            out.append(value / dtype.type(n))
        elif dtype == np.float16:
            with np.errstate(all="ignore"):
                out.append((value.astype(np.float32) * np.float32(np.float16(1) / np.float16(n))).astype(np.float16))
        else:
            with np.errstate(all="ignore"):
                out.append(flushed(flushed(value) * (dtype.type(1) / dtype.type(n))))
    return out


def _narrow_mean(total: np.ndarray, n: int) -> np.ndarray:
    """pmean of a promoted dtype: the rounded sum widened, times the wide reciprocal, flushed, rounded back."""
    wide = WIDER[total.dtype.name]
    with np.errstate(all="ignore"):
        return narrowed(flushed(total.astype(wide) * (wide(1) / wide(n))), total.dtype)


@specifies(collectives.psum_scatter)
def psum_scatter(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName, *,
                 scatter_dimension: int = 0, axis_index_groups: Sequence[Sequence[int]] | None = None,
                 tiled: bool = False) -> list[np.ndarray]:
    """Member j of each group gets chunk j (along `scatter_dimension`) of the group's fold from 0.

    >>> psum_scatter([np.array([1, 2]), np.array([10, 20])], {'i': 2}, 'i')
    [array(11), array(22)]
    """
    out: list[np.ndarray] = [np.empty(0)] * len(xs)
    for group in groups(mesh_shape, axis_name, axis_index_groups):
        total = fold(xs, group, "sum")
        for j, d in enumerate(group):
            out[d] = np.array(np.split(total, len(group), scatter_dimension)[j] if tiled
                              else np.take(total, j, scatter_dimension))
    return out


@specifies(collectives.ppermute)
def ppermute(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName,
             perm: Sequence[tuple[int, int]]) -> list[np.ndarray]:
    """Group index `dst` gets the array of group index `src` for each pair; the others get zeros.

    >>> ppermute([np.array([d + 1]) for d in range(4)], {'i': 4}, 'i', [(0, 2)])
    [array([0]), array([0]), array([1]), array([0])]
    """
    out = [np.full_like(x, 0) for x in xs]  # the value zero (float8_e8m0fnu has none: it rounds to NaN)
    for group in groups(mesh_shape, axis_name):
        for src, dst in perm:
            out[group[dst % len(group)]] = np.array(xs[group[src % len(group)]], copy=True)
    return out


@specifies(collectives.psend)
def psend(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName,
          perm: Sequence[tuple[int, int]]) -> list[np.ndarray]:
    """What a psend's precv of the same perm receives (JAX's docs: an analog of the Send HLO; "for each index
    of the axis that does not correspond to a destination index in perm, the corresponding values in the
    result are filled with zeros"): group index `dst` gets the x of group index `src`, as `ppermute`."""
    return ppermute(xs, mesh_shape, axis_name, perm)


@specifies(collectives.precv)
def precv(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName,
          perm: Sequence[tuple[int, int]], out_shape: object = None) -> list[np.ndarray]:
    """JAX's docs: an analog of the Recv HLO, "returns array(s) with the same shape as out_shape", zeros where
    no pair's destination is; `xs` are what the partner psend sends (a token carries no data)."""
    return ppermute(xs, mesh_shape, axis_name, perm)


@specifies(collectives.axis_index)
def axis_index(mesh_shape: dict[Hashable, int], axis_name: AxisName) -> list[np.ndarray]:
    """Each device's position in its group along `axis_name`, as an int32 scalar.

    >>> [int(i) for i in axis_index({'x': 2, 'y': 2}, ('y', 'x'))]
    [0, 2, 1, 3]
    """
    out: list[np.ndarray] = [np.empty(0)] * int(np.prod(list(mesh_shape.values())))
    for group in groups(mesh_shape, axis_name):
        for i, d in enumerate(group):
            out[d] = np.array(i, np.int32)
    return out


@specifies(collectives.axis_size)
def axis_size(mesh_shape: dict[Hashable, int], axis_name: AxisName) -> list[np.ndarray]:
    """JAX's docs: "the size of the mapped axis `axis_name`", an integer; for a tuple of names the product of
    their sizes, the same on every device. A shard_map returns it as the docs' `Array(8, dtype=int32)`.

    >>> [int(n) for n in axis_size({'x': 2, 'y': 4}, ('x', 'y'))]
    [8, 8, 8, 8, 8, 8, 8, 8]
    """
    names = axis_name if isinstance(axis_name, (tuple, list)) else (axis_name,)
    size = int(np.prod([mesh_shape[name] for name in names]))
    return [np.array(size, np.int32) for _ in range(int(np.prod(list(mesh_shape.values()))))]


@specifies(collectives.psum_invariant)
def psum_invariant(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName) -> list[np.ndarray]:
    """JAX's psum_invariant (the design note's psum2): psum's value."""
    return psum(xs, mesh_shape, axis_name)


@specifies(collectives.pvary)
def pvary(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName) -> list[np.ndarray]:
    """JAX's pvary (the design note's pbroadcast): every device keeps its value."""
    return [np.array(x, copy=True) for x in xs]


@specifies(collectives.pbroadcast)
def pbroadcast(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName,
               source: int) -> list[np.ndarray]:
    """Every member gets "x being copied from the source index slice of axis_name" (JAX's docs; their
    equivalent, psum(where(axis_index == source, x, 0)), is this copy for every value but -0.0 and bool)."""
    out: list[np.ndarray] = [np.empty(0)] * len(xs)
    for group in groups(mesh_shape, axis_name):
        for d in group:
            out[d] = np.array(xs[group[source]], copy=True)
    return out


@specifies(collectives.pshuffle)
def pshuffle(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName,
             perm: Sequence[int]) -> list[np.ndarray]:
    """JAX's docs: "the result at index i is x at index perm[i]" along the axis."""
    out: list[np.ndarray] = [np.empty(0)] * len(xs)
    for group in groups(mesh_shape, axis_name):
        for i, d in enumerate(group):
            out[d] = np.array(xs[group[perm[i]]], copy=True)
    return out


@specifies(collectives.pswapaxes)
def pswapaxes(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName, axis: int, *,
              axis_index_groups: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
    """JAX's docs: the mapped axis and `axis` swap; member j gets index j along `axis` of every member's x,
    stacked in member order along `axis`."""
    out: list[np.ndarray] = [np.empty(0)] * len(xs)
    for group in groups(mesh_shape, axis_name, axis_index_groups):
        for j, d in enumerate(group):
            out[d] = np.stack([np.take(np.asarray(xs[k]), j, axis=axis) for k in group], axis=axis)
    return out


@specifies(collectives.pcast)
def pcast(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName, *,
          to: str) -> list[np.ndarray]:
    """JAX's pcast to 'varying' is pvary: every device keeps its value."""
    return pvary(xs, mesh_shape, axis_name)


@specifies(collectives.all_gather_invariant)
def all_gather_invariant(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName, *,
                         axis: int = 0, tiled: bool = False) -> list[np.ndarray]:
    """all_gather's value (without groups)."""
    return all_gather(xs, mesh_shape, axis_name, axis=axis, tiled=tiled)


@specifies(collectives.pscatter)
def pscatter(xs: Sequence[np.ndarray], mesh_shape: dict[Hashable, int], axis_name: AxisName, *,
             axis: int = 0, tiled: bool = False) -> list[np.ndarray]:
    """Group index i keeps index i (untiled) or block i (tiled) of its value along `axis`.

    >>> pscatter([np.array([[1, 2], [3, 4]])] * 2, {'i': 2}, 'i', axis=1, tiled=True)[1]
    array([[2],
           [4]])
    """
    out: list[np.ndarray] = [np.empty(0)] * len(xs)
    for group in groups(mesh_shape, axis_name):
        for i, d in enumerate(group):
            x = np.asarray(xs[d])
            out[d] = np.array(np.split(x, len(group), axis)[i] if tiled else np.take(x, i, axis))
    return out
