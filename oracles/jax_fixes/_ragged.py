"""Corrected rules of `ragged_all_to_all` (findings 1, 2, 3, 5, 8 and 9 of FINDINGS.md).

Three findings are faults of one transpose rule (1, 2, 8) and two of one batching rule (3, 9), so each
rule is installed once, as JAX 0.10.2's own with the corrections of the findings installed so far switched
on (`_ON`): installing any subset gives JAX's rule with exactly those changes, as the `fix.diff` of each
does to `jax/_src/lax/parallel.py`. Finding 5 replaces the abstract evaluation and the user-level function.

    import oracles
    oracles.install_jax_fixes(["ragged-transpose-shared-start"])
    # jax.vjp of a ragged_all_to_all whose empty slice starts on a written row: output's cotangent is zero
    # on the rows the op overwrote, e.g. [0, 0, 1, 1] for operand [1, 2, 3, 4], output zeros(4), slices
    # (in 0, size 2, out 0) and (in 2, size 0, out 0), ct ones(4) (stock JAX: [1, 1, 1, 1])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

GROUPS = "ragged-transpose-ignores-groups"
SHARED_START = "ragged-transpose-shared-start"
OVERLAPPING_READS = "ragged-transpose-overlapping-reads"
EMPTY_ROWS = "ragged-vmap-empty-rows"
UNBATCHED_INDEX = "ragged-vmap-unbatched-index"
TYPED_FROM_OUTPUT = "ragged-typed-from-output"

_ON: set[str] = set()  # the corrections the installed rules apply


# ---------------------------------------------------------------------------------------------- transpose


def _transpose(t: Any, operand: Any, output: Any, input_offsets: Any, send_sizes: Any, output_offsets: Any,
               recv_sizes: Any, *, axis_name: tuple, axis_index_groups: Any) -> list:
    """JAX 0.10.2's `_ragged_all_to_all_transpose` with the corrections in `_ON`."""
    from jax._src.interpreters import ad
    from jax._src.lax import parallel

    if type(t) is ad.Zero:
        operand_t = ad.Zero(operand.aval) if ad.is_undefined_primal(operand) else None
        output_t = ad.Zero(output.aval) if ad.is_undefined_primal(output) else None
        return [operand_t, output_t] + [None] * 4
    groups = axis_index_groups if GROUPS in _ON else None

    def exchange(x: Any) -> Any:
        return parallel.all_to_all(x, axis_name, 0, 0, tiled=True, axis_index_groups=groups)

    output_offsets_ = exchange(output_offsets)
    params = {"axis_name": axis_name, "axis_index_groups": axis_index_groups}
    if OVERLAPPING_READS in _ON:
        operand_t = _added_back(t, operand, input_offsets, send_sizes, output_offsets_, recv_sizes, exchange,
                                params)
    else:
        zero = ad.zeros_like_aval(operand.aval)
        operand_t = parallel.ragged_all_to_all_p.bind(t, zero, output_offsets_, recv_sizes, exchange(input_offsets),
                                                      send_sizes, **params)
    return [operand_t, _output_ct(t, output_offsets_, recv_sizes)] + [None] * 4


def _added_back(t: Any, operand: Any, input_offsets: Any, send_sizes: Any, output_offsets_: Any, recv_sizes: Any,
                exchange: Callable[[Any], Any], params: dict) -> Any:
    """The operand's cotangent: each returned slice into its own block of a staging buffer (slot s at rows
    s * n + input_offsets[s], n operand rows), then the blocks added, so rows read by two slices get both."""
    from jax._src.interpreters import ad
    from jax._src.lax import lax, parallel

    n, slots, rest = operand.aval.shape[0], input_offsets.shape[0], operand.aval.shape[1:]
    staging = ad.zeros_like_aval(operand.aval.update(shape=(slots * n, *rest)))
    blocks = lax.iota(input_offsets.dtype, slots) * n
    staged = parallel.ragged_all_to_all_p.bind(t, staging, output_offsets_, recv_sizes,
                                               exchange(input_offsets + blocks), send_sizes, **params)
    return lax.reduce_sum(staged.reshape(slots, n, *rest), (0,))


def _output_ct(t: Any, output_offsets_: Any, recv_sizes: Any) -> Any:
    """`output`'s cotangent: t where no slice was written, zero where one was."""
    from jax._src.lax import control_flow, lax

    starts = lax.full(t.shape[0], 0, dtype="int32").at[output_offsets_]
    marked = starts.add(1) if SHARED_START in _ON else starts.set(1)
    mask = control_flow.cumsum(marked.at[output_offsets_ + recv_sizes].add(-1))
    mask = lax.expand_dims(mask, (*range(1, t.ndim),))
    mask = lax.broadcast_in_dim(mask, shape=t.shape, broadcast_dimensions=tuple(range(t.ndim)))
    return lax.select(mask, lax._zeros(t), t)


# ---------------------------------------------------------------------------------------------- batching


def _batched(axis_data: Any, vals_in: Any, dims_in: Any, axis_name: tuple, axis_index_groups: Any) -> Any:
    """JAX 0.10.2's `_ragged_all_to_all_batched_collective` with the corrections in `_ON`."""
    from functools import partial

    from jax._src.interpreters import batching
    from jax._src.lax import lax, parallel

    if all(bdim is None for bdim in dims_in) and axis_data.name not in axis_name:
        out = parallel.ragged_all_to_all_p.bind(*vals_in, axis_name=axis_name, axis_index_groups=axis_index_groups)
        return out, None
    if axis_data.name in axis_name:
        raise NotImplementedError("Please open a feature request!")
    if axis_index_groups:
        raise NotImplementedError("Please open a feature request!")
    size = axis_data.size

    def bdim_at_second(x: Any, d: int | None) -> Any:
        if d is None and UNBATCHED_INDEX in _ON:
            return batching.broadcast(x, size, 1, None)
        assert x.ndim == 2
        return batching.broadcast(x, size, 1, None) if d is None else x if d == 1 else x.T

    # -1 in a reshape divides by the other dimensions' product, which is 0 for rows of zero elements
    def merge(x: Any) -> Any:
        return x.reshape(x.shape[0] * x.shape[1] if EMPTY_ROWS in _ON else -1, *x.shape[2:])

    def split(x: Any) -> Any:
        return x.reshape(size, x.shape[0] // size if EMPTY_ROWS in _ON else -1, *x.shape[1:])

    operand, output = map(partial(batching.bdim_at_front, size=size), vals_in[:2], dims_in[:2])
    n, m = operand.shape[1], output.shape[1]
    input_offsets, send_sizes, output_offsets, recv_sizes = map(bdim_at_second, vals_in[2:], dims_in[2:])
    input_offsets += lax.iota(input_offsets.dtype, size)[None, :] * n
    output_offsets += lax.iota(output_offsets.dtype, size)[None, :] * m
    vals_in = operand, output, input_offsets, send_sizes, output_offsets, recv_sizes
    return split(parallel.ragged_all_to_all(*map(merge, vals_in), axis_name=axis_name)), 0


# ---------------------------------------------------------------------------------------------- typing


def _abstract_eval(operand: Any, output: Any, *index: Any, axis_name: tuple, axis_index_groups: Any) -> Any:
    """JAX 0.10.2's checks and shape, typed varying along the axis and every axis any argument varies along
    (the result holds rows received from other devices, read from `operand` at offsets in `index`)."""
    from jax._src import config

    out_aval, effects = _STOCK["abstract_eval"](operand, output, *index, axis_name=axis_name,
                                                axis_index_groups=axis_index_groups)
    if not config._check_vma.value:
        return out_aval, effects
    vma = frozenset().union(*(a.mat.varying for a in (operand, output, *index))) | frozenset(axis_name)
    return out_aval.update(manual_axis_type=out_aval.mat.update(varying=vma)), effects


def ragged_all_to_all(operand: Any, output: Any, input_offsets: Any, send_sizes: Any, output_offsets: Any,
                      recv_sizes: Any, axis_name: Any, axis_index_groups: Any = None) -> Any:
    """`jax.lax.ragged_all_to_all` with `operand` and `output` made varying along the axis and along every
    axis any argument varies along (as `core.auto_insert_reshard` does for other primitives), so the
    cotangents the transpose returns for them have their types."""
    from jax._src import config, core
    from jax._src.lax import parallel

    names = axis_name if isinstance(axis_name, (tuple, list)) else (axis_name,)
    args = [operand, output, input_offsets, send_sizes, output_offsets, recv_sizes]
    if config._check_vma.value and config.auto_pcast.value:
        vma = frozenset().union(*(core.typeof(a).mat.varying for a in args)) | frozenset(names)
        for k in (0, 1):
            missing = tuple(name for name in vma if name not in core.typeof(args[k]).mat.varying)
            args[k] = core.pvary(args[k], missing) if missing else args[k]
    groups = parallel._canonicalize_axis_index_groups(axis_index_groups)
    return parallel.ragged_all_to_all_p.bind(*args, axis_name=tuple(names), axis_index_groups=groups)


_STOCK: dict[str, Callable[..., Any]] = {}


# ---------------------------------------------------------------------------------------------- installing


def _rule(name: str, install: Callable[[], None]) -> Callable[[], None]:
    """The installer of finding `name`: switch its correction on and install the rule that reads it."""
    def installer() -> None:
        _ON.add(name)
        install()
    return installer


def _install_transpose() -> None:
    from jax._src.interpreters import ad
    from jax._src.lax import parallel

    ad.primitive_transposes[parallel.ragged_all_to_all_p] = _transpose


def _install_batching() -> None:
    from jax._src.interpreters import batching
    from jax._src.lax import parallel

    batching.fancy_primitive_batchers[parallel.ragged_all_to_all_p] = _batched


def _install_typing() -> None:
    import jax
    from jax._src.lax import parallel

    _STOCK.setdefault("abstract_eval", parallel._ragged_all_to_all_effectful_abstract_eval)
    parallel.ragged_all_to_all_p.def_effectful_abstract_eval(_abstract_eval)
    parallel.ragged_all_to_all = ragged_all_to_all
    jax.lax.ragged_all_to_all = ragged_all_to_all


FIXES: dict[str, Callable[[], None]] = {
    GROUPS: _rule(GROUPS, _install_transpose),
    SHARED_START: _rule(SHARED_START, _install_transpose),
    OVERLAPPING_READS: _rule(OVERLAPPING_READS, _install_transpose),
    EMPTY_ROWS: _rule(EMPTY_ROWS, _install_batching),
    UNBATCHED_INDEX: _rule(UNBATCHED_INDEX, _install_batching),
    TYPED_FROM_OUTPUT: _rule(TYPED_FROM_OUTPUT, _install_typing),
}

__all__ = ["FIXES", "ragged_all_to_all"]
