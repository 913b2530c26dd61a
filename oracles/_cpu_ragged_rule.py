"""The CPU lowering of JAX's `ragged_all_to_all`: the docs' SEND and RECEIVE loops as dense all_to_alls.

XLA:CPU cannot compile the op, so this rule lowers it to what XLA:CPU runs. A dense collective needs a
static size; `decomposition` picks one of two forms at lowering, by size (S the index arrays' length, M
the output's rows):

- **One shot** (`one_shot`), when S x M rows and their row numbers take at most `ONE_SHOT_BYTES` per
  device: every slot sends its slice already placed at its rows of the receiver's output, M rows a slot
  with zeros around the slice, in one tiled `all_to_all`, and each receiver takes every output row from
  the last slot of the docs' RECEIVE loop that writes it. No loop, so a small exchange compiles in about
  a third of the time the rounds take.
- **Rounds** (`rounds`), otherwise: about M rows per device move instead of S x M. The slices travel in
  rounds of a fixed `chunk` = ceil(M / S) rows per slot: in round r every slot sends the next `chunk` rows
  of its slice (the rows its receiver writes inside its output, zeros past its size), one tiled
  `all_to_all` of the (S * chunk, ...) buffer moves them, and each receiver copies them in place to
  `output_offsets + r * chunk` (the last window moved back to end at the output's end), segment by
  segment: the slices cut the output into segments, each written by the slot the docs' RECEIVE loop
  writes there last. An `all_to_all` of `output_offsets` tells every receiver where its slices land, and
  one of each receiver's round count makes every device of the group run as many rounds as the busiest
  one needs (a `while_loop`). A balanced exchange (no slice over `chunk` rows) takes one round and moves
  about M rows per device; a slice of n rows takes ceil(n / chunk) rounds, at most S, and every round
  moves S * chunk rows.

Inputs the docs leave undefined, row by row, the same in both forms: a row read from outside `operand`
arrives as zeros; a row written outside `output` is dropped; a negative size writes nothing; offsets and
sizes past a quarter of the working index type's largest value (int32, or int64 for 64-bit indices)
saturate there; where writes overlap, the later slot of the docs' RECEIVE loop wins, row by row; a
receiver writes `recv_sizes[i]` rows of slot i, taking zeros past the `send_sizes` its sender sent.
Inputs XLA's verifier rejects (index arrays of different dtypes, operand and output of different dtypes
or trailing shapes) are handed to JAX's own lowering of the op, so the user sees XLA's own error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core.primitives import ragged_all_to_all_p
from jax.interpreters import mlir

Rule = Callable[..., Sequence[Any]]

ONE_SHOT_BYTES = 1 << 20  # per device: the largest S x M rows, with their row numbers, sent in one all_to_all


def decomposition(operand: jax.Array, output: jax.Array, input_offsets: jax.Array, send_sizes: jax.Array,
                  output_offsets: jax.Array, recv_sizes: jax.Array, *, axis_name: tuple[Any, ...],
                  axis_index_groups: Sequence[Sequence[int]] | None) -> jax.Array:
    """`ragged_all_to_all(...)` of one device, in one shot or in rounds (see the module's docstring).

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

    row_bytes = int(np.prod(output.shape[1:], dtype=np.int64)) * output.dtype.itemsize + work.itemsize
    if slots * output.shape[0] * row_bytes <= ONE_SHOT_BYTES:
        return one_shot(operand, output, io, ss, oo, rs, exchange)
    return rounds(operand, output, io, ss, oo, rs, exchange, group_size)


def rounds(operand: jax.Array, output: jax.Array, io: jax.Array, ss: jax.Array, oo: jax.Array, rs: jax.Array,
           exchange: Callable[[jax.Array], jax.Array], group_size: int) -> jax.Array:
    """`ragged_all_to_all` of one device in rounds of one tiled all_to_all each (index arrays in the
    working dtype)."""
    slots, work = io.shape[0], io.dtype
    rows, chunk = output.shape[0], max(1, -(-output.shape[0] // slots))
    send = _Sender(_padded(operand, chunk), io, ss, oo, chunk, operand.shape[0], rows)
    receive = _Receiver.make(exchange(oo), rs, chunk, rows)
    # every device of the group runs as many rounds as the busiest receiver needs
    count = jnp.max(exchange(jnp.broadcast_to(receive.rounds(), (group_size,))))

    def one_round(r: jax.Array, carry: jax.Array) -> jax.Array:
        return receive.write(r, exchange(send.buffer(r)), carry)

    # round 0 runs before the loop, so the carry starts with the variance every round's result has
    first = one_round(jnp.zeros((), work), output)
    return lax.while_loop(lambda c: c[0] < count, lambda c: (c[0] + 1, one_round(*c)),
                          (jnp.ones((), work), first))[1]


def one_shot(operand: jax.Array, output: jax.Array, io: jax.Array, ss: jax.Array, oo: jax.Array, rs: jax.Array,
             exchange: Callable[[jax.Array], jax.Array]) -> jax.Array:
    """`ragged_all_to_all` of one device in one all_to_all of S x M rows (index arrays in the working dtype).

    Slot s sends, as row i of its M rows, its slice's row i - oo[s] (operand row io[s] + i - oo[s]), zeros
    where that is past its size or outside the operand; the receiver writes output row i from the last
    slot whose `recv_sizes` rows at its exchanged offset cover i.
    """
    slots, rows, operand_rows = io.shape[0], output.shape[0], operand.shape[0]
    i = lax.iota(io.dtype, rows)[None, :]
    k = i - oo[:, None]  # (S, M): the row of slot s's slice that lands on output row i
    source = io[:, None] + k
    sent = (k >= 0) & (k < ss[:, None]) & (source >= 0) & (source < operand_rows)
    if operand_rows:
        picked = jnp.take(operand, jnp.clip(source, 0, operand_rows - 1).reshape(-1), axis=0, mode="clip")
    else:
        picked = jnp.zeros((slots * rows, *operand.shape[1:]), operand.dtype)
    received = exchange(lax.select(_rows_mask(sent.reshape(-1), picked), picked, jnp.zeros_like(picked)))
    k = i - exchange(oo)[:, None]
    writes = (k >= 0) & (k < rs[:, None])
    last = jnp.max(jnp.where(writes, lax.iota(io.dtype, slots)[:, None], -1), axis=0)  # the RECEIVE loop's last
    new = jnp.take(received, jnp.maximum(last, 0) * rows + i[0], axis=0, mode="clip")
    return lax.select(_rows_mask(last >= 0, new), new, output)


def _padded(x: jax.Array, chunk: int) -> jax.Array:
    """`x` between `chunk` zero rows before and after, so a window of `chunk` rows starting anywhere a
    slice can reach is read without the clamping dynamic slices do."""
    zeros = jnp.zeros((chunk, *x.shape[1:]), x.dtype)
    return jnp.concatenate([zeros, x, zeros])


def _window(start: jax.Array, r: jax.Array, chunk: int, rows: int) -> jax.Array:
    """The first output row of round r's window of the slot whose rows in the output start at `start`:
    `start + r*chunk`, moved back to end at the output's end (so it never clamps; the rows it brings
    again are the same rows of the same slot)."""
    return jnp.minimum(start + r * chunk, rows - chunk)


def _rows_mask(mask: jax.Array, like: jax.Array) -> jax.Array:
    """A per-row mask broadcast over `like`'s trailing dimensions."""
    return jnp.broadcast_to(mask.reshape(-1, *(1,) * (like.ndim - 1)), like.shape)


class _Sender(NamedTuple):
    """A sender's rounds: slot s sends, in round r, the rows of its slice its receiver's window of that
    round covers (`_window`), zeros past the slice's size or outside the operand."""

    source: jax.Array  # the operand between `chunk` zero rows before and after
    offsets: jax.Array
    sizes: jax.Array
    output_offsets: jax.Array
    chunk: int
    operand_rows: int
    rows: int

    def buffer(self, r: jax.Array) -> jax.Array:
        """Round r's (slots * chunk, ...) buffer, slot-major, so peer p's slots form its tile."""
        c = lax.iota(self.offsets.dtype, self.chunk)

        def slot(s: jax.Array, buffer: jax.Array) -> jax.Array:
            oo = self.output_offsets[s]
            k = _window(jnp.clip(oo, 0, self.rows), r, self.chunk, self.rows) - oo
            start = self.offsets[s] + k
            # outside [-chunk, operand_rows] the window clamps, but then none of its rows is sent
            window = lax.dynamic_slice_in_dim(self.source, start + self.chunk, self.chunk)
            row = start + c
            sent = (k + c >= 0) & (k + c < self.sizes[s]) & (row >= 0) & (row < self.operand_rows)
            window = lax.select(_rows_mask(sent, window), window, jnp.zeros_like(window))
            return lax.dynamic_update_slice_in_dim(buffer, window, s * self.chunk, 0)

        empty = jnp.zeros((self.offsets.shape[0] * self.chunk, *self.source.shape[1:]), self.source.dtype)
        return lax.fori_loop(0, self.offsets.shape[0], slot,
                             _varying(empty, self.source, self.offsets, self.sizes, self.output_offsets, r))


class _Receiver(NamedTuple):
    """A receiver's rounds. Its slices' rows inside the output cut it into segments, each written by one
    slot: the last one the docs' RECEIVE loop writes there. Segment q covers output rows [low[q], high[q])
    from slot `slot[q]`, whose output rows start at `start[slot[q]]`; round r brings that slot's rows
    start + r*chunk + c (c < chunk). The first `count` segments are the written ones."""

    start: jax.Array
    low: jax.Array
    high: jax.Array
    slot: jax.Array
    count: jax.Array
    chunk: int
    rows: int

    @classmethod
    def make(cls, offsets: jax.Array, sizes: jax.Array, chunk: int, rows: int) -> _Receiver:
        """The receiver of slices at `offsets` (as exchanged) of `sizes` rows into `rows` output rows."""
        start = jnp.clip(offsets, 0, rows)
        end = jnp.maximum(jnp.clip(offsets + sizes, 0, rows), start)
        bounds = jnp.sort(jnp.concatenate([start, end]))
        low, high = bounds[:-1], bounds[1:]
        # every slice covers a segment whole or not at all; the last slot that covers it writes it
        covers = (start[None, :] <= low[:, None]) & (low[:, None] < end[None, :])
        slot = jnp.max(jnp.where(covers, lax.iota(start.dtype, start.shape[0])[None, :], -1), axis=1)
        written = (slot >= 0) & (low < high)
        order = jnp.argsort(~written, stable=True)
        return cls(start, low[order], high[order], slot[order], jnp.sum(written, dtype=start.dtype), chunk, rows)

    def rounds(self) -> jax.Array:
        """The rounds this receiver needs: until its written segments' last rows have come."""
        last = self.high - self.start[jnp.maximum(self.slot, 0)]
        live = lax.iota(self.count.dtype, self.low.shape[0]) < self.count
        return jnp.max(jnp.where(live, (last + self.chunk - 1) // self.chunk, 0))

    def write(self, r: jax.Array, received: jax.Array, carry: jax.Array) -> jax.Array:
        """`carry` (the output so far) with round r's `received` rows written in place."""
        c = lax.iota(self.start.dtype, self.chunk)

        def segment(q: jax.Array, carry: jax.Array) -> jax.Array:
            at = _window(self.start[self.slot[q]], r, self.chunk, self.rows)
            window = lax.dynamic_slice_in_dim(carry, at, self.chunk)
            new = lax.dynamic_slice_in_dim(received, self.slot[q] * self.chunk, self.chunk)
            inside = (at + c >= self.low[q]) & (at + c < self.high[q])
            return lax.dynamic_update_slice_in_dim(carry, lax.select(_rows_mask(inside, window), new, window), at, 0)

        like = (received, self.start, self.low, self.high, self.slot, self.count, r)
        return lax.fori_loop(0, self.count, segment, _varying(carry, *like))


def _varying(x: jax.Array, *like: jax.Array) -> jax.Array:
    """`x`, typed as varying over whatever mesh axes `like` vary over (a loop's carry keeps the variance it
    starts with under check_vma, and its body mixes in theirs)."""
    return lax.select(sum(y.reshape(-1)[0] * 0 for y in like if y.size) == 0, x, x)


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
