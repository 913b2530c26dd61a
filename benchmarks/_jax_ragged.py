"""JAX's ragged_all_to_all for the worker: the real op where the backend runs it, else a decomposition.

XLA:CPU (jax 0.10.x) lowers `jax.lax.ragged_all_to_all` but cannot execute it ("UNIMPLEMENTED ...
ragged-all-to-all"). The worker then times the same result built from real JAX operations, one device's
part being:

1. a gather cutting each of the operand's slices, padded to the longest slice of the workload (a static
   size, as a real MoE kernel pads to a capacity): `(DEVICES, longest, columns)`;
2. one tiled `jax.lax.all_to_all` of the padded slices, and one of `output_offsets`, so each receiver
   learns where every sender's slice lands;
3. a gather and a select placing each received row at its output row; other rows keep `output`.

Imported by the worker only, after the device count is set.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from _workload import AXIS_NAME
from jax import lax
from jax.sharding import PartitionSpec as P

ARGUMENTS = 6  # operand, output, input_offsets, send_sizes, output_offsets, recv_sizes


def compiled_ragged(mesh: Any, placed: tuple, longest: int) -> tuple[Any, float, str]:
    """The compiled exchange for `placed` (the six global arguments), its compile seconds and its path:
    "real" when the backend runs the op, else "decomposition" (slices padded to `longest` rows)."""
    try:
        return (*_compiled(mesh, placed, lambda *a: lax.ragged_all_to_all(*a, axis_name=AXIS_NAME)), "real")
    except jax.errors.JaxRuntimeError as error:
        if "UNIMPLEMENTED" not in str(error):
            raise
    return (*_compiled(mesh, placed, _decomposition(longest)), "decomposition")


def _compiled(mesh: Any, placed: tuple, body: Callable[..., Any]) -> tuple[Any, float]:
    mapped = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(AXIS_NAME),) * ARGUMENTS, out_specs=P(AXIS_NAME)))
    start = time.perf_counter()
    executable = mapped.lower(*placed).compile()
    return executable, time.perf_counter() - start


def _decomposition(longest: int) -> Callable[..., Any]:
    """One device's ragged_all_to_all from a gather, two tiled all_to_alls and a gather-select."""
    def body(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes):
        rows, columns = operand.shape
        window = jnp.clip(input_offsets[:, None] + jnp.arange(longest), 0, rows - 1)
        received = lax.all_to_all(jnp.take(operand, window, axis=0), AXIS_NAME, 0, 0, tiled=True)
        offsets = lax.all_to_all(output_offsets, AXIS_NAME, 0, 0, tiled=True)
        local = jnp.arange(output.shape[0])[None, :] - offsets[:, None]  # (senders, output rows)
        hit = (local >= 0) & (local < recv_sizes[:, None])
        sender = jnp.argmax(hit, axis=0)
        row = jnp.clip(jnp.take_along_axis(local, sender[None], axis=0)[0], 0, longest - 1)
        rows_in = jnp.take(received.reshape(-1, columns), sender * longest + row, axis=0)
        return jnp.where(hit.any(axis=0)[:, None], rows_in, output)

    return body
