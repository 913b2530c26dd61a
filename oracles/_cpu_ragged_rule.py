"""The CPU lowering of JAX's `ragged_all_to_all`: the docs' SEND and RECEIVE loops built from one dense all_to_all.

XLA:CPU cannot compile the op, so this rule lowers it to what XLA:CPU runs. Each sender lays its slices
out for every peer as that peer's output would hold them (`output_offsets` already says where they land),
in an (M, ...) buffer per peer, M the output's rows; one tiled `all_to_all` moves the G buffers (G the
group size), an `all_to_all` of `output_offsets` tells every receiver where its slices land, and each
output row takes the row of the buffer of the sender that last wrote it, in the docs' slot order.

Bytes: a dense collective needs a static size, and one peer may send a whole output's worth, so every
device sends G * M rows where the op itself would send only its slices' rows.

Inputs the docs leave undefined, row by row: a row read from outside `operand` arrives as zeros; a row
written outside `output` is dropped; a negative size writes nothing; offsets and sizes past a quarter of
the working index type's largest value (int32, or int64 for 64-bit indices) saturate there; where writes
overlap, the later slot of the docs' RECEIVE loop wins (a sender's own slices to one peer in its SEND
order); a receiver writes `recv_sizes[i]` rows, taking zeros past the `send_sizes` its sender sent.
Inputs XLA's verifier rejects (index arrays of different dtypes, operand and output of different dtypes
or trailing shapes) are handed to JAX's own lowering of the op, so the user sees XLA's own error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core.primitives import ragged_all_to_all_p
from jax.interpreters import mlir

Rule = Callable[..., Sequence[Any]]


def decomposition(operand: jax.Array, output: jax.Array, input_offsets: jax.Array, send_sizes: jax.Array,
                  output_offsets: jax.Array, recv_sizes: jax.Array, *, axis_name: tuple[Any, ...],
                  axis_index_groups: Sequence[Sequence[int]] | None) -> jax.Array:
    """`ragged_all_to_all(...)` of one device, computed with all_to_all, gathers and selects.

    Raises:
        ValueError: the index arrays' length is not a multiple of the group size.
    """
    group_size = len(axis_index_groups[0]) if axis_index_groups else lax.axis_size(axis_name)
    slots = input_offsets.shape[0]
    if slots % group_size:
        raise ValueError(f"ragged_all_to_all: len(input_offsets)={slots} must be a multiple of the group size "
                         f"{group_size} (axis_name={axis_name}, axis_index_groups={axis_index_groups})")
    if output.shape[0] == 0:  # nothing can be written (and JAX drops the variance of empty loop carries)
        return output
    work = _work_dtype(input_offsets.dtype, operand.shape[0], output.shape[0])
    io, ss, oo, rs = (_as_work(x, work) for x in (input_offsets, send_sizes, output_offsets, recv_sizes))

    def exchange(x: jax.Array) -> jax.Array:
        return lax.all_to_all(x, axis_name, 0, 0, axis_index_groups=axis_index_groups, tiled=True)

    rows = output.shape[0]
    per_peer = _sent_rows(io, ss, oo, group_size, operand.shape[0], rows)
    # one extra zero row stands for every row no slice sends or that lies outside the operand
    source = jnp.concatenate([operand, jnp.zeros((1, *operand.shape[1:]), operand.dtype)])
    received = exchange(source.at[per_peer.reshape(-1)].get(mode="promise_in_bounds"))
    sender = _writer(exchange(oo), rs, group_size, rows)
    m = lax.iota(work, rows)
    picked = received.at[jnp.maximum(sender, 0) * rows + m].get(mode="promise_in_bounds")
    written = (sender >= 0).reshape(rows, *(1,) * (output.ndim - 1))
    return lax.select(jnp.broadcast_to(written, output.shape), picked, output)


def _sent_rows(io: jax.Array, ss: jax.Array, oo: jax.Array, group_size: int, operand_rows: int,
               rows: int) -> jax.Array:
    """For every peer p and row m of p's output, the operand row this device writes there (later slices
    win), or `operand_rows` (the zero row) where it writes none or would read outside the operand."""
    per = io.shape[0] // group_size
    io, ss, oo = (x.reshape(group_size, per) for x in (io, ss, oo))
    m = lax.iota(io.dtype, rows)[None, :]

    def slot(s: int, found: jax.Array) -> jax.Array:
        local = m - lax.dynamic_index_in_dim(oo, s, 1)
        hit = (local >= 0) & (local < lax.dynamic_index_in_dim(ss, s, 1))
        return jnp.where(hit, lax.dynamic_index_in_dim(io, s, 1) + local, found)

    start = _unset((group_size, rows), io, ss, oo)
    found = lax.fori_loop(0, per, slot, start) if per > 1 else slot(0, start)
    return jnp.where((found >= 0) & (found < operand_rows), found, operand_rows)


def _writer(offsets: jax.Array, sizes: jax.Array, group_size: int, rows: int) -> jax.Array:
    """For every output row, the group index of the sender whose slice the docs' RECEIVE loop writes there
    last, or -1 where none does."""
    per = offsets.shape[0] // group_size
    m = lax.iota(offsets.dtype, rows)

    def slot(i: jax.Array, found: jax.Array) -> jax.Array:
        local = m - offsets[i]
        return jnp.where((local >= 0) & (local < sizes[i]), (i // per).astype(found.dtype), found)

    return lax.fori_loop(0, offsets.shape[0], slot, _unset((rows,), offsets, sizes))


def _unset(shape: tuple[int, ...], *like: jax.Array) -> jax.Array:
    """A loop's start value: -1 everywhere, varying over whatever mesh axes `like` vary over (under
    check_vma a loop's carry keeps the variance it starts with, and its body mixes in theirs)."""
    return jnp.full(shape, -1, like[0].dtype) + sum(x.reshape(-1)[0] * 0 for x in like)


def _work_dtype(index: np.dtype, operand_rows: int, rows: int) -> np.dtype:
    """int32 where it holds every row number and the index values, else int64."""
    wide = np.dtype(index).itemsize == 8 or np.dtype(index) == np.uint32 or max(operand_rows, rows) >= 2**30
    return np.dtype(np.int64 if wide and jax.config.jax_enable_x64 else np.int32)


def _as_work(x: jax.Array, work: np.dtype) -> jax.Array:
    """`x` in the working dtype, saturated at a quarter of its range (not wrapped), so an offset out of range
    stays out of range and offset plus row never overflows."""
    limit = 2 ** (8 * work.itemsize - 3)
    info = np.iinfo(x.dtype)
    low, high = np.array(max(-limit, info.min), x.dtype), np.array(min(limit, info.max), x.dtype)
    return lax.clamp(low, x, high).astype(work)


def lowering(default: Rule | None) -> Rule:
    """The CPU lowering rule: the decomposition, or `default` (JAX's own rule) for what XLA's verifier rejects."""
    lowered = mlir.lower_fun(decomposition, multiple_results=False)

    def rule(ctx: Any, *args: Any, axis_name: tuple[Any, ...], axis_index_groups: Any) -> Sequence[Any]:
        operand, output, *index = ctx.avals_in
        same = (len({x.dtype for x in index}) == 1 and operand.dtype == output.dtype
                and operand.ndim >= 1 and operand.shape[1:] == output.shape[1:])
        if not same and default is not None:
            return default(ctx, *args, axis_name=axis_name, axis_index_groups=axis_index_groups)
        return lowered(ctx, *args, axis_name=axis_name, axis_index_groups=axis_index_groups)

    return rule


PRIMITIVE = ragged_all_to_all_p
