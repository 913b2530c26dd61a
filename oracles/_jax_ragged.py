"""The doc's ragged_all_to_all built from dense JAX collectives, for a backend that cannot run the real op.

XLA:CPU (jax 0.10.x) lowers `jax.lax.ragged_all_to_all` but fails to compile it ("UNIMPLEMENTED ...
ragged-all-to-all"). The worker then runs this decomposition of the documented semantics instead, after
the real op was traced and lowered (so its own checks applied), and reports the path as "decomposition".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh

from oracles._jax_setup import axes


def lacks_ragged(error: Exception) -> bool:
    """Whether `error` is the backend saying it cannot run ragged_all_to_all."""
    return "UNIMPLEMENTED" in str(error) and "ragged-all-to-all" in str(error)


def decomposition(on: Mesh, params: dict[str, Any]) -> Callable[..., jax.Array]:
    """The per-device body computing ragged_all_to_all(**params) on `on` from dense collectives.

    Each sender pads every slice to the operand's row count (no valid slice is longer) and one tiled
    all_to_all moves them; the receiver learns where each slice lands and how many rows it really has
    from all_to_alls of `output_offsets` and `send_sizes`, then writes the slices in the doc's loop order.
    """
    axis_name, groups = params["axis_name"], params.get("axis_index_groups")
    group_size = len(groups[0]) if groups is not None else int(np.prod([on.shape[a] for a in axes(axis_name)]))

    def exchange(x: jax.Array) -> jax.Array:
        return lax.all_to_all(x, axis_name, 0, 0, axis_index_groups=groups, tiled=True)

    def body(operand: jax.Array, output: jax.Array, input_offsets: jax.Array, send_sizes: jax.Array,
             output_offsets: jax.Array, recv_sizes: jax.Array) -> jax.Array:
        _check_decomposable(operand, output, input_offsets, group_size)
        received = exchange(_padded_slices(operand, input_offsets, send_sizes))
        return _place(output, received, exchange(output_offsets), exchange(send_sizes))

    return body


def _check_decomposable(operand: jax.Array, output: jax.Array, input_offsets: jax.Array,
                        group_size: int) -> None:
    """Reject what the real op lowers but the doc gives no meaning to (XLA does not check these)."""
    if operand.ndim < 1 or operand.shape[1:] != output.shape[1:] or operand.dtype != output.dtype:
        raise ValueError(
            f"ragged_all_to_all operand {operand.dtype}{list(operand.shape)} and output "
            f"{output.dtype}{list(output.shape)} must have rank >= 1, the same dtype and the same "
            "trailing dimensions (the real op lowered, but its result is undefined)")
    if input_offsets.shape[0] % group_size:
        raise ValueError(
            f"ragged_all_to_all offsets have length {input_offsets.shape[0]}, which must be divisible "
            f"by the group size {group_size} (the real op lowered, but its result is undefined)")


def _padded_slices(operand: jax.Array, input_offsets: jax.Array, send_sizes: jax.Array) -> jax.Array:
    """Slice i of `operand`, zero-padded to operand rows, at [i]: shape (K, rows, ...)."""
    rows = operand.shape[0]
    j = jnp.arange(rows)
    gathered = jnp.take(operand, jnp.clip(input_offsets[:, None] + j, 0, rows - 1), axis=0)
    keep = (j < send_sizes[:, None]).reshape(*gathered.shape[:2], *(1,) * (operand.ndim - 1))
    return jnp.where(keep, gathered, jnp.zeros_like(gathered))


def _place(output: jax.Array, received: jax.Array, offsets: jax.Array, sizes: jax.Array) -> jax.Array:
    """Write rows [0, sizes[i]) of received[i] at output rows offsets[i]..., later slices on top."""
    rows = received.shape[1]
    local = jnp.arange(output.shape[0])[None, :] - offsets[:, None]
    hit = (local >= 0) & (local < sizes[:, None])
    trailing = (1,) * (output.ndim - 1)
    result = output
    for i in range(received.shape[0]):  # a Python loop keeps the doc's write order on overlaps
        rows_i = jnp.take(received[i], jnp.clip(local[i], 0, rows - 1), axis=0)
        result = jnp.where(hit[i].reshape(-1, *trailing), rows_i, result)
    return result
