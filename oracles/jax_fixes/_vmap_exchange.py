"""Corrected batching of all_to_all over a vmap axis, and zero-size results typed as XLA lays them out
(findings 21 and 23 of FINDINGS.md).

- `vmap-axis-all-to-all-unbatched`: `lax.all_to_all` (and `lax.pswapaxes`, which binds it) over the vmap
  axis of an operand the vmap does not batch: the stock batcher broadcasts the operand with
  `lax.broadcast(x, (axis_size, *x.shape))`, which prepends every size it is given, so the operand gains
  `x.ndim + 1` axes where it needs one. Fixed in the batcher (`batching.fancy_primitive_batchers`): the
  operand gains one leading axis of the vmap's size, then the stock rule runs as for a batched operand.

    import oracles
    oracles.install_jax_fixes(["vmap-axis-all-to-all-unbatched"])
    jax.vmap(lambda v: lax.all_to_all(v, "y", 0, 0, tiled=True), in_axes=None, axis_size=2,
             axis_name="y")(jnp.array([1., 2.]))        # [[1, 1], [2, 2]]; stock JAX: shape (2, 2, 2)
- `eager-shard-map-zero-size`: XLA's SPMD partitioner leaves a zero-size result whole on every device
  (replicated, each buffer of the global shape) whatever output sharding was asked for, and
  `pxla._maybe_get_and_check_out_shardings` skips its check for zero-size results and types the result with
  the sharding asked for: the buffers do not fit their shards and the array cannot be read. An eager
  shard_map meets it because it assembles its results with `jit(..., out_shardings=NamedSharding(mesh,
  out_spec))` (`shard_map._match_spec`); so does any jit with an out_sharding for a zero-size result. Fixed in
  that function (JAX calls it through the module attribute): a zero-size result whose XLA layout gives
  other shard shapes than the sharding asked for is typed as XLA laid it out.

    oracles.install_jax_fixes(["eager-shard-map-zero-size"])
    f = jax.shard_map(lambda v: v, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    np.asarray(f(jnp.zeros((2, 0))))                    # shape (2, 0); stock JAX: ValueError
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


_STOCK: dict[str, Callable[..., Any]] = {}


def eager_shard_map_zero_size() -> None:
    """Finding 23: a zero-size result takes the sharding XLA gave its buffers where the one asked for differs.

    The buffers of a zero-size result hold no element, so no value changes: only the shape of each shard,
    which must be the shape of its buffer for the array to be read.
    """
    from jax._src import core, dtypes
    from jax._src.interpreters import mlir, pxla
    from jax._src.sharding_impls import NamedSharding, UnspecifiedValue

    stock = _STOCK.setdefault("out_shardings", pxla._maybe_get_and_check_out_shardings)

    def checked(xla_executable: Any, out_shardings: Any, device_list: Any, global_out_avals: Any,
                num_ordered_effects: int) -> list:
        chosen = list(stock(xla_executable, out_shardings, device_list, global_out_avals, num_ordered_effects))
        laid_out = pxla.get_out_shardings_from_executable(xla_executable, device_list, len(global_out_avals),
                                                          num_ordered_effects)
        for i, (xla_s, asked, aval) in enumerate(zip(laid_out or (), out_shardings, global_out_avals)):
            if (aval is core.abstract_token or isinstance(asked, UnspecifiedValue)
                    or mlir.contains_unconstrained(asked) or dtypes.issubdtype(aval.dtype, dtypes.extended)
                    or aval.size != 0 or xla_s.shard_shape(aval.shape) == asked.shard_shape(aval.shape)):
                continue
            try:
                chosen[i] = pxla._gspmd_to_named_sharding(xla_s, aval, asked) if isinstance(
                    asked, NamedSharding) else xla_s
            except Exception:  # a mesh the layout cannot be named on: XLA's own sharding
                chosen[i] = xla_s
        return chosen

    pxla._maybe_get_and_check_out_shardings = checked


FIXES: dict[str, Callable[[], None]] = {
    "vmap-axis-all-to-all-unbatched": vmap_axis_all_to_all_unbatched,
    "eager-shard-map-zero-size": eager_shard_map_zero_size,
}
