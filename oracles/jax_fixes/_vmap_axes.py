"""Corrected batching rules for collectives under jax.vmap (findings 17 and 22 of FINDINGS.md).

- `vmap-axis-typed-as-mesh-axis`: inside a `jax.shard_map`, a collective over an axis that `jax.vmap(...,
  axis_name=...)` names meets the device-variance bookkeeping, which speaks of mesh axes only: `core.pvary`
  asserts that every name it is given is a mesh axis, and `parallel._get_from` asks the operand's type
  about the vmap axis too. Fixed in both (each a module attribute JAX calls): they leave out the names
  that are not the mesh's (the batching rules handle those). Behind them, `_constant_reduction` (a psum
  over the vmap axis of an operand the vmap does not batch) learns `psum_invariant_p`, the primitive a
  typed psum binds: each member gets `size * x`, as for `psum_p`; and psum_invariant's batching rule
  sums a batched operand over its batch dimension itself (the positional reduction it bound instead is
  refused by psum_invariant's type check, which asks for named varying axes).

    import oracles
    oracles.install_jax_fixes(["vmap-axis-typed-as-mesh-axis"])
    body = jax.vmap(lambda v: lax.psum(v, "y"), in_axes=None, axis_size=3, axis_name="y")
    jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P(None, "x")))(jnp.array([1., 2.]))
    # [[3, 6]] * 3; stock JAX: AssertionError in core.pvary

- `vmap-psend-precv`: psend and precv are batched by ppermute's rule, which binds a ppermute in psend's
  place (data where a token belongs) and takes no `out_shape` for precv. Fixed with their own rules: psend
  sends the operand with the batch axis in front (an unbatched one broadcast, so every message has it) and
  returns its token unbatched; precv receives `out_shape` grown by the batch axis in front. Over the vmap
  axis itself the pair would be a permutation of the batch that the token does not carry from psend to
  precv: both refuse it with NotImplementedError, as ppermute's rule refuses what it cannot batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def _mesh_axes_only(axes: tuple) -> tuple:
    """`axes` without the names the current mesh lacks (vmap axes), in the mesh's order; as given off a mesh."""
    from jax._src import core
    from jax._src.mesh import get_abstract_mesh

    mesh = get_abstract_mesh()
    return axes if mesh.empty else core.order_wrt_mesh(mesh, axes)


def _pvary(x: Any, axis_name: Any) -> Any:
    """`core.pvary` that leaves out vmap axes (a device-variance type names mesh axes only)."""
    from jax._src import config, core, tree_util
    from jax._src.mesh import get_abstract_mesh

    axes = (axis_name,) if not isinstance(axis_name, tuple) else axis_name
    if not axis_name:
        return x
    cur_mesh = get_abstract_mesh()
    if not config._check_vma.value and all(a in cur_mesh.manual_axes for a in axes):
        return x
    new_axes = _mesh_axes_only(axes)
    if not new_axes:
        return x
    if config.remove_size_one_mesh_axis_from_type.value and not cur_mesh.empty:
        new_axes = tuple(i for i in new_axes if cur_mesh.shape[i] != 1)
        if not new_axes:
            return x
    return tree_util.tree_map(lambda leaf: core.pvary_p.bind(leaf, axes=new_axes), x)


def vmap_axis_typed_as_mesh_axis() -> None:
    """Finding 17: `pvary` and `_get_from` leave out vmap axes; `_constant_reduction` knows psum_invariant."""
    from jax._src import config, core, shard_map
    from jax._src.interpreters import batching
    from jax._src.lax import lax, parallel

    stock_get_from = getattr(parallel._get_from, "__wrapped__", parallel._get_from)
    stock_constant = getattr(parallel._constant_reduction, "__wrapped__", parallel._constant_reduction)

    def get_from(aval: Any, axes: tuple, name: str) -> str:
        return stock_get_from(aval, _mesh_axes_only(tuple(axes)) or tuple(axes), name)

    def constant_reduction(prim: Any, axis_data: Any, arg: Any, axes: tuple, axis_index_groups: Any) -> tuple:
        if prim is not parallel.psum_invariant_p:
            return stock_constant(prim, axis_data, arg, axes, axis_index_groups)
        if axis_index_groups:
            raise NotImplementedError
        rest = tuple(n for n in axes if n != axis_data.name)
        if rest:
            arg = prim.bind(arg, axes=rest)
        return lax._const(arg, axis_data.size) * arg, None

    def psum_invariant_batcher(axis_data: Any, vals_in: Any, dims_in: Any, axes: tuple) -> tuple:
        (v,), (d,) = vals_in, dims_in
        if d is None or axis_data.name not in axes:
            return parallel._psum_invariant_batching_rule(axis_data, vals_in, dims_in, axes)
        out = lax.reduce_sum(v, (d,))  # the members' sum: every member gets it, unbatched
        rest = tuple(n for n in axes if n != axis_data.name)
        return (parallel.psum_invariant_p.bind(out, axes=rest) if rest else out), None

    def pmin_pmax_abstract_eval(name: str, aval: Any, *, axes: tuple, axis_index_groups: Any) -> tuple:
        positional = tuple(a for a in axes if isinstance(a, int))
        if not positional or not config._check_vma.value:
            return parallel._pmin_pmax_abstract_eval(name, aval, axes=axes, axis_index_groups=axis_index_groups)
        named = tuple(a for a in axes if not isinstance(a, int))  # a vmap axis's reduction binds its position
        if not named:  # over the vmap axis alone: a reduction on the device, its type unchanged
            return aval.update(shape=lax._reduce_op_shape_rule(aval, axes=positional),
                               sharding=lax._reduce_op_sharding_rule(aval, axes=positional)), set()
        out, effects = parallel._psum_invariant_abstract_eval(name, aval, axes=named)
        return out.update(shape=lax._reduce_op_shape_rule(aval, axes=positional),
                          sharding=lax._reduce_op_sharding_rule(aval, axes=positional)), effects

    get_from.__wrapped__ = stock_get_from
    constant_reduction.__wrapped__ = stock_constant
    core.pvary = parallel.pvary = shard_map.pvary = _pvary
    parallel._pcast_funcs[("invarying", "varying")] = _pvary
    parallel._get_from = get_from
    parallel._constant_reduction = constant_reduction
    batching.fancy_primitive_batchers[parallel.psum_invariant_p] = psum_invariant_batcher
    for prim in (parallel.pmax_p, parallel.pmin_p):
        prim.def_effectful_abstract_eval(functools.partial(pmin_pmax_abstract_eval, prim.name))


def _refuse_vmap_axis(axis_data: Any, axis_name: tuple, name: str) -> None:
    if axis_data.name in axis_name:
        raise NotImplementedError(f"jax.lax.{name} over a vmap axis ({axis_data.name!r} in axis_name={axis_name}) "
                                  "is not supported; use ppermute")


def vmap_psend_precv() -> None:
    """Finding 22: psend and precv get batching rules of their own (ppermute's returns data, takes no out_shape)."""
    from jax._src import core
    from jax._src.interpreters import batching
    from jax._src.lax import lax, parallel

    def psend_batcher(axis_data: Any, vals_in: Any, dims_in: Any, *, axis_name: tuple, perm: tuple) -> tuple:
        (v,), (d,) = vals_in, dims_in
        _refuse_vmap_axis(axis_data, axis_name, "psend")
        v = lax.broadcast(v, (axis_data.size,)) if d is None else batching.moveaxis(v, d, 0)
        return parallel.psend_p.bind(v, axis_name=axis_name, perm=perm), None

    def precv_batcher(axis_data: Any, vals_in: Any, dims_in: Any, *, out_shape: Any, axis_name: tuple,
                      perm: tuple) -> tuple:
        (token,), _ = vals_in, dims_in
        _refuse_vmap_axis(axis_data, axis_name, "precv")
        shape = core.ShapedArray((axis_data.size, *out_shape.shape), out_shape.dtype)
        return parallel.precv_p.bind(token, out_shape=shape, axis_name=axis_name, perm=perm), 0

    batching.fancy_primitive_batchers[parallel.psend_p] = psend_batcher
    batching.fancy_primitive_batchers[parallel.precv_p] = precv_batcher


FIXES: dict[str, Callable[[], None]] = {
    "vmap-axis-typed-as-mesh-axis": vmap_axis_typed_as_mesh_axis,
    "vmap-psend-precv": vmap_psend_precv,
}
