"""Corrected rules outside ragged_all_to_all (findings 4, 6, 7, 10, 11 and 12 of FINDINGS.md).

Each installer imports jax and puts a corrected rule where JAX looks it up: a primitive's abstract evaluation
(`def_abstract_eval`, `def_effectful_abstract_eval`), its transpose (`ad.primitive_transposes`), its batcher
(`batching.fancy_primitive_batchers`) or, where the fault is in the user-level function, the function
that binds the primitive. Each wraps JAX's own (stock) function, never the one installed before it, so
installing twice changes nothing. For example, finding 6:

    import oracles
    oracles.install_jax_fixes(["untiled-all-to-all-transpose"])
    f = jax.shard_map(lambda u: lax.all_to_all(u, "i", 0, 1, tiled=False), mesh=mesh,
                      in_specs=P("i"), out_specs=P("i"))
    jax.grad(lambda v: f(v).sum())(np.ones((16, 3), np.float32))   # ones((16, 3)); stock JAX: ValueError
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _names(axis_name: Any) -> tuple:
    """`axis_name` as a tuple of names (pbroadcast keeps the name as the user gave it)."""
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def argsort_typed_invariant() -> None:
    """Finding 4: every result of `sort_p` varies along every axis any operand varies along.

    `jnp.argsort(x)` sorts `(x, iota)`: the iota, invariant, is permuted by the keys, so with varying keys
    the indices differ between devices. Stock JAX types each result as its own operand.
    """
    from jax._src.lax import lax

    def abstract_eval(*avals: Any, dimension: int, is_stable: bool, num_keys: int) -> tuple:
        out = lax._sort_abstract_eval(*avals, dimension=dimension, is_stable=is_stable, num_keys=num_keys)
        varying = frozenset().union(*(a.mat.varying for a in avals))
        return tuple(a.update(manual_axis_type=a.mat.update(varying=varying)) for a in out)

    lax.sort_p.def_abstract_eval(abstract_eval)


def untiled_all_to_all_transpose() -> None:
    """Finding 6: all_to_all_p transposes to all_to_all_p with the axes swapped, bound directly.

    The cotangent has the primitive's shape (an untiled call's size-1 axis already inserted); the stock rule
    calls the user-level `all_to_all`, which for `tiled=False` inserts that axis a second time.
    """
    from jax._src.interpreters import ad
    from jax._src.lax import parallel

    def transpose(cts: Any, x: Any, *, axis_name: Any, split_axis: int, concat_axis: int,
                  axis_index_groups: Any, tiled: bool) -> tuple:
        del x
        cts = parallel.insert_collective_pvary(axis_name, cts)
        return (parallel.all_to_all_p.bind(cts, axis_name=axis_name, split_axis=concat_axis,
                                           concat_axis=split_axis, axis_index_groups=axis_index_groups,
                                           tiled=tiled),)

    ad.deflinear2(parallel.all_to_all_p, transpose)


def untiled_psum_scatter_vmap_axis() -> None:
    """Finding 7: vmap of an untiled psum_scatter puts a batch axis after `scatter_dimension` at `d - 1`.

    The untiled scatter removes `scatter_dimension`, so a batch axis after it moves one place left; the
    stock batcher moves it right (`d += 1`) and indexes past the result's rank.
    """
    from jax._src.interpreters import batching
    from jax._src.lax import parallel

    stock = parallel._reduce_scatter_collective

    def batcher(axis_data: Any, vals_in: Any, dims_in: Any, **params: Any) -> tuple:
        (x,), (d,) = vals_in, dims_in
        if d is None or axis_data.name in _names(params["axis_name"]):
            return stock(axis_data, vals_in, dims_in, **params)
        if d <= params["scatter_dimension"]:
            params = {**params, "scatter_dimension": params["scatter_dimension"] + 1}
        elif not params["tiled"]:  # the untiled result loses `scatter_dimension`, before the batch axis
            d -= 1
        return parallel.reduce_scatter_p.bind(x, **params), d

    batching.fancy_primitive_batchers[parallel.reduce_scatter_p] = batcher


def unchecked_all_gather_invariant_transpose() -> None:
    """Finding 10: untyped (`check_vma=False`), all_gather_invariant transposes as all_gather: psum_scatter.

    Typed, its result is invariant, so the cotangent is one value on every device and each device's slice of
    it is the answer (stock); untyped, each device may hold its own cotangent, and they must be summed.
    """
    from jax._src import config
    from jax._src.interpreters import ad
    from jax._src.lax import parallel

    def transpose(cts: Any, x: Any, *, all_gather_dimension: int, axis_name: Any, axis_size: int,
                  tiled: bool) -> tuple:
        if config._check_vma.value:
            return parallel._all_gather_invariant_transpose_rule(
                cts, x, all_gather_dimension=all_gather_dimension, axis_name=axis_name, axis_size=axis_size,
                tiled=tiled)
        return (parallel.reduce_scatter_p.bind(cts, scatter_dimension=all_gather_dimension, axis_name=axis_name,
                                               axis_index_groups=None, axis_size=axis_size, tiled=tiled),)

    ad.deflinear2(parallel.all_gather_invariant_p, transpose)


def _pbroadcast_transpose(t: Any, x: Any, *, source: int, axis_name: Any) -> list:
    """The source's cotangent is every member's summed (once, if the result is typed invariant); others' 0.

    With the result typed varying (stock) or untyped, member m holds its own cotangent t_m and the source
    gets psum(t); typed invariant (finding 12's fix), t is the one cotangent of the one value, and the
    source gets t itself.
    """
    from jax._src import config, core
    from jax._src.lax import lax, parallel

    del x
    names = _names(axis_name)
    if config._check_vma.value and not set(names) & core.typeof(t).mat.varying:
        back = core.pvary(t, names)
    else:
        back = parallel.insert_collective_pvary(names, parallel.psum(t, names))
    is_source = parallel.axis_index(names) == source
    return [lax.select(lax.broadcast_in_dim(is_source, back.shape, ()), back, lax.full_like(back, 0))]


def pbroadcast_transpose_non_scalar() -> None:
    """Finding 11: pbroadcast's transpose selects between the summed cotangent and zeros, any shape.

    The stock rule fills `full_like(t, psum(t))`, which takes only a scalar fill value.
    """
    from jax._src.interpreters import ad
    from jax._src.lax import parallel

    ad.deflinear2(parallel.pbroadcast_p, _pbroadcast_transpose)


def pbroadcast_typed_varying() -> None:
    """Finding 12: pbroadcast's result is invariant along its axis; an invariant operand is promoted first.

    Every member ends with the source's value (the docs' equivalent is a psum), so the result varies along
    what the operand varies along but the axis. Like ppermute, `lax.pbroadcast` now inserts a pvary for an
    operand invariant along the axis. The transpose follows the type (`_pbroadcast_transpose`).
    """
    from jax._src import tree_util
    from jax._src.interpreters import ad
    from jax._src.lax import parallel

    def abstract_eval(x: Any, *, axis_name: Any, source: int) -> Any:
        names = _names(axis_name)
        parallel._check_axis_names(names, "pbroadcast")
        varying = parallel.collective_vma_rule("pbroadcast", names, x)
        parallel.check_unreduced_args([x], names, "pbroadcast")
        return x.update(manual_axis_type=x.mat.update(varying=varying - frozenset(names)))

    def bind_all(x: Any, axis_name: Any, source: int, is_async: bool = False) -> Any:
        prim = parallel.pbroadcast_start_p if is_async else parallel.pbroadcast_p

        def bind(leaf: Any) -> Any:
            leaf = parallel.insert_collective_pvary(_names(axis_name), leaf)
            return prim.bind(leaf, axis_name=axis_name, source=source)

        return tree_util.tree_map(bind, x)

    parallel.pbroadcast_p.def_abstract_eval(abstract_eval)
    parallel._pbroadcast_is_async = bind_all
    ad.deflinear2(parallel.pbroadcast_p, _pbroadcast_transpose)


def precv_typed_invariant() -> None:
    """Entry 12's related slip: precv's result varies along its axis (each device receives its own value).

    Stock JAX types it as `out_shape` is given, invariant, so `out_specs=P()` passes for a value that
    differs between devices.
    """
    from jax._src import config
    from jax._src.lax import parallel
    from jax._src.mesh import get_abstract_mesh

    def abstract_eval(token: Any, *, out_shape: Any, axis_name: Any, **params: Any) -> tuple:
        aval, effects = parallel._precv_abstract_eval(token, out_shape=out_shape, axis_name=axis_name, **params)
        if config._check_vma.value:
            aval = aval.update(sharding=aval.sharding.update(mesh=get_abstract_mesh()),
                               manual_axis_type=aval.mat.update(varying=frozenset(_names(axis_name))))
        return aval, effects

    parallel.precv_p.def_effectful_abstract_eval(abstract_eval)


FIXES: dict[str, Callable[[], None]] = {
    "argsort-typed-invariant": argsort_typed_invariant,
    "untiled-all-to-all-transpose": untiled_all_to_all_transpose,
    "untiled-psum-scatter-vmap-axis": untiled_psum_scatter_vmap_axis,
    "unchecked-all-gather-invariant-transpose": unchecked_all_gather_invariant_transpose,
    "pbroadcast-transpose-non-scalar": pbroadcast_transpose_non_scalar,
    "pbroadcast-typed-varying": pbroadcast_typed_varying,
    "precv-typed-invariant": precv_typed_invariant,
}
