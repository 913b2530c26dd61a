"""The batching rules of `jax.lax`'s collectives (`jax/_src/lax/parallel.py`, the batchers for an axis that is
not one of the collective's axes), one per `Definition.batch`; `collectives._batching` applies them.

Each rule takes (definition, arrays, dims, params), the batch axis of each array in `dims` (None for an
unbatched one, at least one batched), and returns (result, its batch axis or None).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

import sim

if TYPE_CHECKING:
    from collectives._definition import Definition

Dim = int | None
Rule = Callable[["Definition", list, list[Dim], dict], tuple[Any, Dim]]


def batch_size(definition: Definition, arrays: list, dims: list[Dim]) -> int:
    """The batch size the batched arrays agree on (1 when none is batched)."""
    sizes = {np.shape(x)[d] for x, d in zip(arrays, dims) if d is not None}
    if len(sizes) > 1:
        raise sim.InvalidArgumentError(f"vmap: {definition.name}: the batch axes have sizes {sorted(sizes)}; "
                                       f"they must all be equal")
    return sizes.pop() if sizes else 1


def elementwise(definition: Definition, arrays: list, dims: list[Dim], params: dict) -> tuple[Any, Dim]:
    """Each element is combined across devices with the same element: the batch axis stays where it is."""
    return definition.function(*arrays, **params), dims[0]


def gather(key: str, removes: bool) -> Rule:
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


def all_to_all(definition: Definition, arrays: list, dims: list[Dim], params: dict) -> tuple[Any, Dim]:
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


def ragged(definition: Definition, arrays: list, dims: list[Dim], params: dict) -> tuple[Any, Dim]:
    """JAX's rule: batch entry b's operand rows and output rows follow entry b-1's in one ragged dimension
    (B slices per peer, offsets moved by b times the rows of an entry), one call, then split again."""
    if params.get("axis_index_groups") is not None:
        raise sim.InvalidArgumentError(
            "vmap: ragged_all_to_all with axis_index_groups has no batching rule (JAX raises NotImplementedError "
            "'Please open a feature request!'); loop over the batch instead")
    size = batch_size(definition, arrays, dims)
    operand, output = (_front(x, d, size) for x, d in zip(arrays[:2], dims[:2]))
    rows_in, rows_out = operand.shape[1], output.shape[1]
    index = [_front(x, d, size).T for x, d in zip(arrays[2:], dims[2:])]  # [peers, batch]
    shift = np.arange(size, dtype=index[0].dtype)[None, :]
    index[0] = index[0] + shift * rows_in
    index[2] = index[2] + shift * rows_out
    # the batch and the rows merged by their sizes, not -1: trailing dimensions may be empty
    merged = [x.reshape(x.shape[0] * x.shape[1], *x.shape[2:]) for x in (operand, output)]
    merged += [x.reshape(-1) for x in index]
    result = definition.function(*merged, **params)
    return result.reshape(size, rows_out, *result.shape[1:]), 0


def _front(x: Any, d: Dim, size: int) -> np.ndarray:
    """`x` with its batch axis first (broadcast to `size` entries when it has none)."""
    return np.stack([x] * size) if d is None else np.moveaxis(x, d, 0)


def unbatched(definition: Definition, arrays: list, dims: list[Dim], params: dict) -> tuple[Any, Dim]:
    return definition.function(*arrays, **params), None
