"""Corrected batching of all_to_all over a vmap axis (finding 21 of FINDINGS.md).

- `vmap-axis-all-to-all-unbatched`: `lax.all_to_all` (and `lax.pswapaxes`, which binds it) over the vmap
  axis of an operand the vmap does not batch: the stock batcher broadcasts the operand with
  `lax.broadcast(x, (axis_size, *x.shape))`, which prepends every size it is given, so the operand gains
  `x.ndim + 1` axes where it needs one. Fixed in the batcher (`batching.fancy_primitive_batchers`): the
  operand gains one leading axis of the vmap's size, then the stock rule runs as for a batched operand.

    import oracles
    oracles.install_jax_fixes(["vmap-axis-all-to-all-unbatched"])
    jax.vmap(lambda v: lax.all_to_all(v, "y", 0, 0, tiled=True), in_axes=None, axis_size=2,
             axis_name="y")(jnp.array([1., 2.]))        # [[1, 1], [2, 2]]; stock JAX: shape (2, 2, 2)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _names(axis_name: Any) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def vmap_axis_all_to_all_unbatched() -> None:
    """Finding 21: an unbatched operand of all_to_all over the vmap axis is broadcast along one new axis.

    Every member of the vmap holds the same operand, so the exchange is the batched one of `axis_size`
    copies stacked at 0; the stock rule's broadcast makes that stack with `x.ndim` extra axes.
    """
    from jax._src.interpreters import batching
    from jax._src.lax import lax, parallel

    stock = parallel._all_to_all_batched_collective

    def batcher(axis_data: Any, vals_in: Any, dims_in: Any, **params: Any) -> tuple:
        (x,), (d,) = vals_in, dims_in
        if d is None and axis_data.name in _names(params["axis_name"]) and params["axis_index_groups"] is None:
            return stock(axis_data, (lax.broadcast(x, (axis_data.size,)),), (0,), **params)
        return stock(axis_data, vals_in, dims_in, **params)

    batching.fancy_primitive_batchers[parallel.all_to_all_p] = batcher


FIXES: dict[str, Callable[[], None]] = {
    "vmap-axis-all-to-all-unbatched": vmap_axis_all_to_all_unbatched,
}
