"""`vmap`: a collective under a batch dimension, by `jax.lax`'s batching rules, one rule per definition
(`Definition.batch`, the rules themselves in `collectives._batch_rules`).

A batch axis is a positional axis of the collective's arrays (not a mesh axis): every batch entry runs the
collective on its own, and the rule says how one call on the batched arrays does that. The rules are
JAX's (`jax/_src/lax/parallel.py`, the batchers for an axis that is not one of the collective's axes):

- psum, pmean, pmax, pmin, psum_invariant, pvary, pcast, ppermute, pshuffle, pbroadcast combine equal
  elements across devices: the batch axis stays where it is.
- all_gather, all_gather_invariant: `axis` shifts past a batch axis before it; untiled, the new dimension
  moves a batch axis after `axis` one on.
- psum_scatter (`scatter_dimension`), pscatter (`axis`): the same shift; untiled, the dimension they take
  away moves a batch axis after it one back.
- all_to_all: `split_axis` and `concat_axis` shift past the batch axis (untiled: the batch axis goes first);
  pswapaxes (all_to_all with both at `axis`): `axis` shifts past a batch axis before it.
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
from collectives._batch_rules import Dim, batch_size
from collectives._definition import Definition
from collectives._registry import REGISTRY


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
        batch_size(definition, arrays, dims)
        result, dim = batch(definition, arrays, dims, params)
        return result if out_axes == dim else np.moveaxis(result, dim, out_axes)

    return mapped


def batch(definition: Definition, arrays: list, dims: list[Dim], params: dict) -> tuple[Any, Dim]:
    """The collective on `arrays` batched along `dims`: (result, its batch axis or None)."""
    if all(d is None for d in dims):
        return definition.function(*arrays, **params), None
    return definition.batch(definition, arrays, dims, params)


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
