"""`vmap`: a collective under a batch dimension, by `jax.lax`'s batching rules, one rule per definition.

A batch axis is a positional axis of the collective's arrays (not a mesh axis): every batch entry runs the
collective on its own, and the rule says how one call on the batched arrays does that. The rules are
JAX's (`jax/_src/lax/parallel.py`, the batchers for an axis that is not one of the collective's axes):

- psum, pmean, pmax, pmin, psum_invariant, pvary, pcast, ppermute, pbroadcast combine equal elements across
  devices: the batch axis stays where it is.
- all_gather, all_gather_invariant: `axis` shifts past a batch axis before it; untiled, the new dimension
  moves a batch axis after `axis` one on.
- psum_scatter (`scatter_dimension`), pscatter (`axis`): the same shift; untiled, the dimension they take
  away moves a batch axis after it one back.
- all_to_all: `split_axis` and `concat_axis` shift past the batch axis (untiled: the batch axis goes first).
- ragged_all_to_all: the batch merges into the ragged dimension (B slices per peer, entry b's offsets moved
  by b times an entry's rows), one call, split again; `axis_index_groups` are refused, as JAX refuses them.
- axis_index has no operand: unbatched.

One departure: for an untiled psum_scatter whose batch axis comes after `scatter_dimension`, JAX 0.10.2
moves the batch axis one on (as for all_gather), past the end of the result, where the dimension it scatters
is removed: the batch axis moves one back here, which is what a per-batch loop gives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import sim
from collectives._all_gather import ALL_GATHER
from collectives._all_to_all import ALL_TO_ALL
from collectives._axis_index import AXIS_INDEX
from collectives._definition import Definition
from collectives._invariant import ALL_GATHER_INVARIANT, PCAST, PSCATTER, PVARY
from collectives._pbroadcast import PBROADCAST
from collectives._ppermute import PPERMUTE
from collectives._pshuffle import PSHUFFLE, PSWAPAXES
from collectives._psum_scatter import PSUM_SCATTER
from collectives._ragged import RAGGED_ALL_TO_ALL
from collectives._reduce import PMAX, PMEAN, PMIN, PSUM, PSUM_INVARIANT
from collectives._registry import REGISTRY

Dim = int | None
Rule = Callable[[Definition, list, list[Dim], dict], tuple[Any, Dim]]


def vmap(function: Callable[..., Any], in_axes: Dim | Sequence[Dim] = 0, out_axes: Dim = 0) -> Callable[..., Any]:
    """`function`, a registered collective, mapped over a batch axis of its arrays by its batching rule.

    `in_axes` gives the batch axis of each array argument (one int for all, or None for an unbatched
    one); the result has its batch axis at `out_axes`. Keyword parameters go to the collective.

    Example on a 2-device mesh {'i': 2}: device d holds x = [[d], [10 + d]] (batch of 2 along axis 0);
    `vmap(all_gather)(x, 'i', tiled=True)` gives [[0, 1], [10, 11]] on both devices: one gather per row.

    Raises:
        InvalidArgumentError: `function` is not a registered collective, the batch axes do not fit the
            arrays or disagree on the batch size, or the rule refuses the call (ragged with groups).
    """
    try:
        definition = REGISTRY.of(function)
    except KeyError:
        raise sim.InvalidArgumentError(f"vmap: function={function!r} must be a registered collective") from None

    def mapped(*args: Any, **params: Any) -> Any:
        count = len(definition.arrays)
        arrays, rest = list(args[:count]), args[count:]
        params.update(zip((p.name for p in definition.params), rest))
        dims = _dims(definition, arrays, in_axes)
        if all(d is None for d in dims):
            raise sim.InvalidArgumentError(f"vmap: in_axes={in_axes!r} must batch at least one array of "
                                           f"{definition.name} {definition.arrays}, as in jax.vmap")
        _size(definition, arrays, dims)
        result, dim = batch(definition, arrays, dims, params)
        return result if out_axes == dim else np.moveaxis(result, dim, out_axes)

    return mapped


def batch(definition: Definition, arrays: list, dims: list[Dim], params: dict) -> tuple[Any, Dim]:
    """The collective on `arrays` batched along `dims`: (result, its batch axis or None)."""
    if all(d is None for d in dims):
        return definition.function(*arrays, **params), None
    return RULES[definition](definition, arrays, dims, params)


def _dims(definition: Definition, arrays: list, in_axes: Dim | Sequence[Dim]) -> list[Dim]:
    dims = list(in_axes) if isinstance(in_axes, (list, tuple)) else [in_axes] * len(arrays)
    if len(dims) != len(arrays):
        raise sim.InvalidArgumentError(f"vmap: in_axes={in_axes!r} must give one axis per array of "
                                       f"{definition.name} {definition.arrays}")
    found = []
    for name, x, d in zip(definition.arrays, arrays, dims):
        ndim = np.ndim(x)
        if d is not None and not -ndim <= d < ndim:
            raise sim.InvalidArgumentError(f"vmap: {definition.name}: in_axes for {name}={d} must be an axis "
                                           f"of its {ndim} dimensions")
        found.append(None if d is None else d % ndim)
    return found


def _size(definition: Definition, arrays: list, dims: list[Dim]) -> int:
    sizes = {np.shape(x)[d] for x, d in zip(arrays, dims) if d is not None}
    if len(sizes) > 1:
        raise sim.InvalidArgumentError(f"vmap: {definition.name}: the batch axes have sizes {sorted(sizes)}; "
                                       f"they must all be equal")
    return sizes.pop() if sizes else 1


def _elementwise(definition: Definition, arrays: list, dims: list[Dim], params: dict) -> tuple[Any, Dim]:
    """Each element is combined across devices with the same element: the batch axis stays where it is."""
    return definition.function(*arrays, **params), dims[0]


def _gather(key: str, removes: bool) -> Rule:
    """all_gather and pscatter (`key` 'axis'), psum_scatter ('scatter_dimension'): the dimension the
    collective works on shifts past the batch axis; untiled, it adds a dimension there (`removes=False`)
    or takes one away (`removes=True`), which moves a batch axis after it."""
    def rule(definition: Definition, arrays: list, dims: list[Dim], params: dict) -> tuple[Any, Dim]:
        (x,), (d,) = arrays, dims
        tiled = params.get("tiled", definition.param("tiled").default)
        rank = np.ndim(x) - 1 + (0 if tiled or removes else 1)
        at = params.get(key, definition.param(key).default) % max(rank, 1)
        if d <= at:
            at += 1
        elif not tiled:
            d += -1 if removes else 1
        return definition.function(x, **{**params, key: at}), d
    return rule


def _all_to_all(definition: Definition, arrays: list, dims: list[Dim], params: dict) -> tuple[Any, Dim]:
    """split_axis and concat_axis shift past the batch axis; untiled, the batch axis goes first so that the
    axes the call removes and inserts never pass it."""
    (x,), (d,) = arrays, dims
    split, concat = params.pop("split_axis"), params.pop("concat_axis")
    rank = np.ndim(x) - 1
    split, concat = split % rank, concat % rank
    if not params.get("tiled", False):
        return definition.function(np.moveaxis(x, d, 0), split_axis=split + 1, concat_axis=concat + 1,
                                   **params), 0
    return definition.function(x, split_axis=split + (d <= split), concat_axis=concat + (d <= concat),
                               **params), d


def _swapaxes(definition: Definition, arrays: list, dims: list[Dim], params: dict) -> tuple[Any, Dim]:
    """JAX's all_to_all rule with split_axis == concat_axis: `axis` shifts past a batch axis before it."""
    (x,), (d,) = arrays, dims
    axis = params.pop("axis")
    return definition.function(x, axis=axis + (d <= axis), **params), d


def _ragged(definition: Definition, arrays: list, dims: list[Dim], params: dict) -> tuple[Any, Dim]:
    """JAX's rule: batch entry b's operand rows and output rows follow entry b-1's in one ragged dimension
    (B slices per peer, offsets moved by b times the rows of an entry), one call, then split again."""
    if params.get("axis_index_groups") is not None:
        raise sim.InvalidArgumentError(
            "vmap: ragged_all_to_all with axis_index_groups has no batching rule (JAX raises NotImplementedError "
            "'Please open a feature request!'); loop over the batch instead")
    size = _size(definition, arrays, dims)
    operand, output = (_front(x, d, size) for x, d in zip(arrays[:2], dims[:2]))
    rows_in, rows_out = operand.shape[1], output.shape[1]
    index = [_front(x, d, size).T for x, d in zip(arrays[2:], dims[2:])]  # [peers, batch]
    shift = np.arange(size, dtype=index[0].dtype)[None, :]
    index[0] = index[0] + shift * rows_in
    index[2] = index[2] + shift * rows_out
    merged = [x.reshape(-1, *x.shape[2:]) for x in (operand, output)] + [x.reshape(-1) for x in index]
    result = definition.function(*merged, **params)
    return result.reshape(size, rows_out, *result.shape[1:]), 0


def _front(x: Any, d: Dim, size: int) -> np.ndarray:
    """`x` with its batch axis first (broadcast to `size` entries when it has none)."""
    return np.stack([x] * size) if d is None else np.moveaxis(x, d, 0)


def _unbatched(definition: Definition, arrays: list, dims: list[Dim], params: dict) -> tuple[Any, Dim]:
    return definition.function(*arrays, **params), None


RULES: dict[Definition, Rule] = {
    PSUM: _elementwise, PMEAN: _elementwise, PMAX: _elementwise, PMIN: _elementwise, PSUM_INVARIANT: _elementwise,
    PVARY: _elementwise, PCAST: _elementwise, PPERMUTE: _elementwise, PBROADCAST: _elementwise,
    ALL_GATHER: _gather("axis", removes=False), ALL_GATHER_INVARIANT: _gather("axis", removes=False),
    PSUM_SCATTER: _gather("scatter_dimension", removes=True), PSCATTER: _gather("axis", removes=True),
    PSHUFFLE: _elementwise, PSWAPAXES: _swapaxes,
    ALL_TO_ALL: _all_to_all, RAGGED_ALL_TO_ALL: _ragged, AXIS_INDEX: _unbatched,
}
