"""Shard_maps nested in others: corrected residual specs (finding 24 of FINDINGS.md), reductions over
axes of size 1 (finding 25) and the types of an unchecked shard_map nested in a checked one (finding 26).

- `nested-shard-map-grad-residuals`: reverse mode of a shard_map nested inside another, under
  `check_vma=True`, splits the inner body into a forward and a backward shard_map whose residuals get specs
  from `ShapedArray.nospec`: under `check_vma` it names every axis the residual varies along, the axes the
  enclosing shard_map made manual included, where it should name only the inner shard_map's own (its
  `all_names`, which the `check_vma=False` path uses). A residual that varies along an outer axis then gets a
  spec over an axis already manual: lowering fails ("operates on axis 'y' which is already bound by a
  parent sdy.manual_computation", or a local shape divided by that axis's size a second time). Fixed in
  `nospec`: the varying axes it names are those among `all_names`.

    import oracles
    oracles.install_jax_fixes(["nested-shard-map-grad-residuals"])
    jax.grad(lambda b: jnp.sum(nested(b, w)))(b)    # w (the body multiplies b by w); stock JAX: ValueError

- `size-one-axis-all-reduce`: a shard_map whose manual axes all have size 1 lowers without a manual
  computation (`_shard_map_lowering_shardy`), so a psum, pmax, pmin or pmean over those axes becomes an
  all-reduce over groups of one device in the automatic part of the module; once the module also holds a
  manual computation (a shard_map nested in the body), XLA's SPMD partitioner refuses it ("RET_CHECK failure
  ... Cross-partition allreduce must be in (partial) manual partitioning mode"). Fixed in the lowering: a
  reduction whose every group is one device is its operand, and no all-reduce is emitted.

    oracles.install_jax_fixes(["size-one-axis-all-reduce"])
    jax.jit(f)(x)    # f: on a 1 x 2 mesh, psum over 'x' then a shard_map over 'y'; stock JAX: JaxRuntimeError

- `unchecked-nested-shard-map-typed-invariant`: a `check_vma=False` shard_map nested in a `check_vma=True` one
  keeps the enclosing axes its operands vary along in its body's input types (`_shard_shaped_array`), while
  its unchecked equations drop them, and types its results varying only along what its body's outputs still
  carry (`_unshard_shaped_array`): nothing. The enclosing checked body then takes a result that depends on
  its axes as invariant (out_specs=P() passes and returns one device's value), and reverse mode fails on
  the cotangents' types. Fixed: the nested shard_map's operands are promoted to vary along every manual axis
  of the enclosing one, its body's inputs carry no varying axes, and its results vary along those axes.

    oracles.install_jax_fixes(["unchecked-nested-shard-map-typed-invariant"])
    jax.grad(lambda v: jnp.sum(f(v) * v))(x)   # f: unchecked nested in checked; stock JAX: ValueError
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def nested_shard_map_grad_residuals() -> None:
    """Finding 24: a residual's spec names only the shard_map's own manual axes."""
    from jax._src import core
    from jax.sharding import PartitionSpec as P

    def nospec(self: Any, mesh: Any, check_vma: bool, all_names: Any) -> Any:
        sh_names = (core.order_wrt_mesh(mesh, self.mat.varying & frozenset(all_names))
                    if check_vma else all_names)
        u_names = self.mat.unreduced if check_vma else frozenset()
        r_names = self.mat.reduced if check_vma else frozenset()
        return P(sh_names, unreduced=u_names, reduced=r_names) if sh_names else P(unreduced=u_names,
                                                                                 reduced=r_names)

    core.ShapedArray.nospec = nospec


def size_one_axis_all_reduce() -> None:
    """Finding 25: a reduction over groups of one device lowers to its operand (psum, pmax, pmin, their
    asynchronous and invariant forms, which all lower through `_allreduce_lowering`)."""
    from functools import partial

    from jax._src.interpreters import mlir
    from jax._src.lax import lax, parallel

    stock = parallel._allreduce_lowering

    def lowering(prim: Any, pos_fn: Any, ctx: Any, arg: Any, *, axes: Any, axis_index_groups: Any) -> Any:
        named = [axis for axis in axes if not isinstance(axis, int)]
        if named and all(len(group) == 1 for group in parallel._replica_groups(
                ctx.module_context.axis_context, named, axis_index_groups)):
            axes = tuple(axis for axis in axes if isinstance(axis, int))  # the positional axes alone, if any
        return stock(prim, pos_fn, ctx, arg, axes=axes, axis_index_groups=axis_index_groups)

    parallel._allreduce_lowering = lowering  # psum_invariant's rule reads it by name
    for primitive, combine, reduce in ((parallel.psum_p, lax.add_p, lax.reduce_sum),
                                       (parallel.pmax_p, lax.max_p, lax.reduce_max),
                                       (parallel.pmin_p, lax.min_p, lax.reduce_min)):
        mlir.register_lowering(primitive, partial(lowering, combine, reduce))
    mlir.register_lowering(parallel.psum_start_p,
                           parallel._start_lowering(partial(lowering, lax.add_p, lax.reduce_sum)))


def unchecked_nested_shard_map_typed_invariant() -> None:
    """Finding 26: a check_vma=False shard_map nested in a checked one takes operands varying along every
    manual axis of the enclosing one, types its body untyped (no varying axes), and returns results varying
    along those axes (the diff edits the call site; installed, `shard_map_p.bind` promotes the operands)."""
    from jax._src import config, core, shard_map
    from jax._src.lax import parallel
    from jax._src.mesh import get_abstract_mesh

    shard, unshard, bind = shard_map._shard_shaped_array, shard_map._unshard_shaped_array, shard_map.shard_map_p.bind

    def enclosing() -> frozenset:
        """The manual axes of a checked shard_map being traced around this one (empty: none)."""
        return frozenset(get_abstract_mesh().manual_axes) if config._check_vma.value else frozenset()

    def shard_aval(mesh: Any, manual_axes: Any, check_vma: bool, spec: Any, aval: Any) -> Any:
        out = shard(mesh, manual_axes, check_vma, spec, aval)
        if check_vma or not out.mat.varying:
            return out
        return out.update(manual_axis_type=core.ManualAxisType(varying=frozenset(), unreduced=out.mat.unreduced,
                                                                reduced=out.mat.reduced))

    def unshard_aval(mesh: Any, check_vma: bool, spec: Any, aval: Any) -> Any:
        out = unshard(mesh, check_vma, spec, aval)
        return out if check_vma or not enclosing() else out.update(
            manual_axis_type=core.ManualAxisType(varying=enclosing()))

    def promoted(*args: Any, **params: Any) -> Any:
        axes = frozenset() if params.get("check_vma", True) else enclosing()
        if axes:
            args = tuple(parallel.pcast(a, tuple(sorted(axes - core.typeof(a).mat.varying)), to="varying")
                         if axes - core.typeof(a).mat.varying else a for a in args)
        return bind(*args, **params)

    core.shard_aval_handlers[core.ShapedArray] = shard_aval
    core.unshard_aval_handlers[core.ShapedArray] = unshard_aval
    shard_map.shard_map_p.bind = promoted


FIXES: dict[str, Callable[[], None]] = {
    "nested-shard-map-grad-residuals": nested_shard_map_grad_residuals,
    "size-one-axis-all-reduce": size_one_axis_all_reduce,
    "unchecked-nested-shard-map-typed-invariant": unchecked_nested_shard_map_typed_invariant,
}
