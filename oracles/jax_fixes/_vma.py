"""Corrected device-variance types and partial-manual lowerings (findings 13 to 16, 28 and 30 of FINDINGS.md).

- `cond-typed-without-index`: `lax.cond` / `lax.switch` with a varying predicate or index type their
  results from the branches alone; fixed in the user-level functions (as the diff does): the operands are
  made to vary along the index's axes (`core.pvary`) before the cond, and each branch's results inside it.
- `while-typed-without-predicate`: `lax.while_loop` (and `fori_loop`, which calls it) whose predicate
  varies types the results from the carry alone; fixed in the user-level function: the initial carry is
  made to vary along the predicate's axes, so the loop's types say what the trip count does.
- `pure-callback-typed-invariant`: `pure_callback`'s results are typed as `result_shape_dtypes` declare,
  invariant by default, whatever the arguments; fixed in its abstract evaluation: the results vary along
  every axis an argument varies along (a pure function of them).
- `partial-manual-bfloat16-reduction`: the reductions' lowerings build the reducer region's scalar from
  the operand's sharding, so under a partial-manual shard_map the region ends in a sharding constraint
  (an HLO `copy`), which XLA's AllReducePromotion (bfloat16 widened on CPU) cannot clone: the compiler
  aborts. Fixed in the lowerings: the reducer is lowered on avals without a mesh.
- `grouped-extrema-typed-invariant`: under `check_vma=True`, `pmax` and `pmin` with `axis_index_groups` type
  their result invariant along the reduced axes (the abstract evaluation is psum_invariant's, which ignores
  the groups), though each group has its own result; psum and pmean refuse groups there. Fixed in the
  abstract evaluation: with more than one group the result keeps the operand's varying axes.
- `rng-bit-generator-typed-invariant`: `lax.rng_bit_generator` types the new key varying as the key is but the
  bits it makes invariant, though each device's bits are a function of its own key; fixed in the vma rule its
  abstract evaluation reads: the bits vary along every axis the key varies along.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def _vary(value: Any, axes: frozenset) -> Any:
    """`value` (a pytree) varying along `axes` too (`core.pvary` of the axes it misses)."""
    import jax
    from jax._src import core

    def one(x: Any) -> Any:
        missing = tuple(a for a in axes if a not in core.typeof(x).mat.varying)
        return core.pvary(x, missing) if missing else x

    return jax.tree.map(one, value)


def _varying(x: Any) -> frozenset:
    import jax
    from jax._src import config

    mat = getattr(jax.typeof(x), "mat", None) if config._check_vma.value else None
    return frozenset(mat.varying) if mat is not None else frozenset()


def _vary_with(index: Any, branches: list[Callable[..., Any]], operands: tuple) -> tuple[list, tuple]:
    """The branches and operands of a cond or switch whose index varies along some axes: the operands made to
    vary along them outside the cond (so a cotangent of an invariant operand is summed after it), and each
    branch's results too (a constant or a closed-over value returned as it is)."""
    axes = _varying(index)
    if not axes:
        return branches, operands
    return [functools.wraps(b)(lambda *a, _b=b: _vary(_b(*a), axes)) for b in branches], _vary(operands, axes)


def _fix_cond() -> None:
    import jax
    from jax._src.lax import control_flow
    from jax._src.lax.control_flow import conditionals

    cond, switch = conditionals.cond, conditionals.switch

    @functools.wraps(cond)
    def fixed_cond(pred: Any, true_fun: Any, false_fun: Any, *operands: Any, **kwargs: Any) -> Any:
        (true_fun, false_fun), operands = _vary_with(pred, [true_fun, false_fun], operands)
        return cond(pred, true_fun, false_fun, *operands, **kwargs)

    @functools.wraps(switch)
    def fixed_switch(index: Any, branches: Any, *operands: Any, **kwargs: Any) -> Any:
        branches, operands = _vary_with(index, list(branches), operands)
        return switch(index, branches, *operands, **kwargs)

    for module in (conditionals, control_flow, jax.lax):
        module.cond, module.switch = fixed_cond, fixed_switch


def _fix_while() -> None:
    import jax
    from jax._src.lax import control_flow
    from jax._src.lax.control_flow import loops

    while_loop = loops.while_loop

    @functools.wraps(while_loop)
    def fixed_while(cond_fun: Any, body_fun: Any, init_val: Any) -> Any:
        axes = _varying(cond_fun(init_val))  # what the first test reads: the trip count varies with it
        return while_loop(cond_fun, body_fun, _vary(init_val, axes) if axes else init_val)

    for module in (loops, control_flow, jax.lax):
        module.while_loop = fixed_while


def _fix_pure_callback() -> None:
    from jax._src import callback, core
    from jax.sharding import NamedSharding, PartitionSpec

    right = callback.pure_callback_abstract_eval

    def abstract_eval(*avals: Any, **params: Any) -> Any:
        varying = [a for a in avals if getattr(a, "mat", None) is not None and a.mat.varying]
        results = right(*avals, **params)
        if not varying:
            return results
        axes = frozenset().union(*(a.mat.varying for a in varying))
        mesh = varying[0].sharding.mesh  # the shard_map's: the result's type names its manual axes
        return [core.ShapedArray(r.shape, r.dtype, weak_type=r.weak_type,
                                 sharding=NamedSharding(mesh, PartitionSpec(*[None] * len(r.shape))),
                                 manual_axis_type=r.mat.update(varying=r.mat.varying | axes)) for r in results]

    callback.pure_callback_p.def_abstract_eval(abstract_eval)


def _fix_partial_reductions() -> None:
    from jax._src import core
    from jax._src import mesh as mesh_lib
    from jax._src.interpreters import mlir
    from jax._src.lax import parallel

    def meshless(rule: Callable[..., Any]) -> Callable[..., Any]:
        def lowering(ctx: Any, *args: Any, **params: Any) -> Any:
            plain = [core.ShapedArray(a.shape, a.dtype, weak_type=a.weak_type) for a in ctx.avals_in]
            with mesh_lib.use_abstract_mesh(mesh_lib.empty_abstract_mesh):
                return rule(ctx.replace(avals_in=plain), *args, **params)

        return lowering

    for primitive in (parallel.psum_p, parallel.pmax_p, parallel.pmin_p, parallel.reduce_scatter_p,
                      parallel.psum_invariant_p):
        mlir.register_lowering(primitive, meshless(mlir._lowerings[primitive].rule))


def _fix_grouped_extrema() -> None:
    """Finding 28: under check_vma, pmax and pmin over `axis_index_groups` of more than one group keep the
    operand's varying axes (the groups' results differ), as without check_vma nothing is claimed."""
    from jax._src.lax import parallel

    stock = parallel._pmin_pmax_abstract_eval

    def abstract_eval(name: str, aval: Any, *, axes: Any, axis_index_groups: Any) -> Any:
        out, effects = stock(name, aval, axes=axes, axis_index_groups=axis_index_groups)
        if axis_index_groups is not None and len(axis_index_groups) > 1 and parallel.config._check_vma.value:
            out = out.update(manual_axis_type=out.mat.update(varying=aval.mat.varying))
        return out, effects

    parallel._pmin_pmax_abstract_eval = abstract_eval
    parallel.pmax_p.def_effectful_abstract_eval(functools.partial(abstract_eval, "pmax"))
    parallel.pmin_p.def_effectful_abstract_eval(functools.partial(abstract_eval, "pmin"))


def _fix_rng_bit_generator() -> None:
    """Finding 30: the bits `rng_bit_generator` makes vary along every axis its key varies along (a stateless
    generator: each device's bits are a function of its own key), as the new key does."""
    from jax._src.lax import lax, utils

    def vma_rule(key: Any, **params: Any) -> tuple[frozenset, frozenset]:
        return key.mat.varying, key.mat.varying

    # the stock registration binds the rule in a partial: register the abstract evaluation again around it
    lax._rng_bit_generator_vma_rule = vma_rule
    lax.rng_bit_generator_p.def_abstract_eval(functools.partial(
        utils.standard_multi_result_abstract_eval, lax.rng_bit_generator_p, lax._rng_bit_generator_shape_rule,
        lax._rng_bit_generator_dtype_rule, lax._rng_bit_generator_weak_type_rule,
        lax._rng_bit_generator_sharding_rule, vma_rule, None))


FIXES: dict[str, Callable[[], None]] = {
    "cond-typed-without-index": _fix_cond,
    "while-typed-without-predicate": _fix_while,
    "pure-callback-typed-invariant": _fix_pure_callback,
    "partial-manual-bfloat16-reduction": _fix_partial_reductions,
    "grouped-extrema-typed-invariant": _fix_grouped_extrema,
    "rng-bit-generator-typed-invariant": _fix_rng_bit_generator,
}
