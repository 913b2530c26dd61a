"""Mixture-of-experts layers through the bridge: a dense one (all_to_all) and a ragged one (ragged_all_to_all)
with their gradients, against real JAX (batches of `bridge_programs.py`, run in its worker process with 8 CPU
devices)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

import oracles


def _moe(mesh: Any, capacity: int) -> Callable[..., Any]:
    """A mixture-of-experts layer: each token goes to its top expert (one per device) through all_to_all,
    the expert's weights act on it there, and a second all_to_all brings it back to be combined."""
    n = mesh.shape["e"]

    def layer(tokens: Any, router: Any, experts: Any) -> Any:
        choice = jnp.argmax(tokens @ router, axis=-1)                        # [T]
        onehot = jax.nn.one_hot(choice, n, dtype=tokens.dtype)               # [T, E]
        slot = (jnp.cumsum(onehot, axis=0) - 1.0) * onehot                   # each token's place in its expert's queue
        dispatch = onehot[:, :, None] * jax.nn.one_hot(slot.sum(-1), capacity, dtype=tokens.dtype)[:, None, :]
        sent = jnp.einsum("tec,td->ecd", dispatch, tokens)                   # [E, C, d], row e for expert e
        arrived = lax.all_to_all(sent, "e", 0, 0, tiled=True)                # [E, C, d], row s from device s
        done = jnp.tanh(arrived @ experts[0])
        back = lax.all_to_all(done, "e", 0, 0, tiled=True)
        out = jnp.einsum("tec,ecd->td", dispatch, back)
        return lax.psum(jnp.sum(out * out), "e")

    return jax.shard_map(layer, mesh=mesh, in_specs=(P("e"), P(), P("e")), out_specs=P())


def moe() -> list[tuple[str, bool, str]]:
    """The MoE layer's loss and its gradient in all three inputs, compared with real JAX.

    The loss is compared bit for bit; the gradient within float32 rounding, as XLA fuses its chains of
    local products and tanh (one rounding fewer here and there) where the bridge runs them one by one."""
    rng = np.random.default_rng(7)
    mesh = oracles.cpu_mesh({"e": 4})
    d, tokens_per_device = 4, 8
    args = (rng.standard_normal((4 * tokens_per_device, d)).astype(np.float32),
            rng.standard_normal((d, 4)).astype(np.float32), rng.standard_normal((4, d, d)).astype(np.float32))
    layer = _moe(mesh, capacity=tokens_per_device)
    rows = []
    for label, f, rtol in (("loss", jax.jit(layer), 0.0), ("grad", jax.jit(jax.grad(layer, argnums=(0, 1, 2))),
                                                          1e-5)):
        report = oracles.compare_jax(f, *args, rtol=rtol, atol=rtol)
        rows.append((label, report.agrees, str(report)))
    return rows


def _ragged_moe(mesh: Any) -> Callable[..., Any]:
    """The same MoE layer with ragged_all_to_all: tokens sorted by expert, each peer sent exactly its rows
    (offsets and sizes exchanged with all_gather), processed, sent back with the offsets swapped."""
    n = mesh.shape["e"]

    def layer(tokens: Any, router: Any, experts: Any) -> Any:
        me = lax.axis_index("e")
        choice = jnp.argmax(tokens @ router, axis=-1)
        onehot = jax.nn.one_hot(choice, n, dtype=jnp.int32)
        sizes = onehot.sum(0)                                                # rows for each expert
        starts = jnp.cumsum(sizes) - sizes
        # each token's row once sorted by expert (JAX 0.10.2 types argsort's result invariant: not used)
        order = starts[choice] + jnp.take_along_axis(jnp.cumsum(onehot, 0) - 1, choice[:, None], 1)[:, 0]
        counts = lax.all_gather(sizes, "e")                                  # counts[s, r]: s sends r
        places = (jnp.cumsum(counts, axis=0) - counts).astype(jnp.int32)     # where s's rows land in r
        firsts = lax.all_gather(starts, "e")
        # JAX types ragged_all_to_all's result as its `output` (test_bridge.py pins it): the buffers vary
        buffer = lax.pcast(jnp.zeros((tokens.shape[0] * n, tokens.shape[1]), tokens.dtype), "e", to="varying")
        grouped = jnp.zeros_like(tokens).at[order].set(tokens)              # tokens sorted by expert
        arrived = lax.ragged_all_to_all(grouped, buffer, starts, sizes, places[me], counts[:, me],
                                        axis_name="e")
        done = jnp.tanh(arrived @ experts[0])
        back = lax.ragged_all_to_all(done, jnp.zeros_like(tokens), places[:, me], counts[:, me], firsts[:, me],
                                     sizes, axis_name="e")
        out = back[order]
        return lax.psum(jnp.sum(out * out), "e")

    return jax.shard_map(layer, mesh=mesh, in_specs=(P("e"), P(), P("e")), out_specs=P())


def moe_ragged() -> dict[str, Any]:
    """The ragged MoE layer and its gradient through the bridge, against the dense layer run by real JAX
    (the same function of the inputs, within float32 rounding); and against JAX's own ragged_all_to_all,
    run on CPU through `oracles.install_cpu_ragged_all_to_all`."""
    rng = np.random.default_rng(7)
    mesh = oracles.cpu_mesh({"e": 4})
    args = (rng.standard_normal((32, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32),
            rng.standard_normal((4, 4, 4)).astype(np.float32))
    dense, ragged = _moe(mesh, capacity=8), _ragged_moe(mesh)
    found: dict[str, Any] = {}
    for label, wrap in (("loss", lambda f: f), ("grad", lambda f: jax.grad(f, argnums=(0, 1, 2)))):
        expected = [np.asarray(x) for x in jax.tree.leaves(jax.jit(wrap(dense))(*args))]
        simulated = oracles.simulate_jax(jax.jit(wrap(ragged)), *args)
        got = jax.tree.leaves(simulated.outputs)
        found[label] = all(np.allclose(e, g, rtol=1e-5, atol=1e-5) for e, g in zip(expected, got))
        found[f"{label} messages"] = len(simulated.run.trace.messages)
    oracles.install_cpu_ragged_all_to_all()
    found["jax"] = oracles.compare_jax(jax.jit(jax.grad(ragged, argnums=(0, 1, 2))), *args, rtol=1e-5,
                                       atol=1e-5).agrees
    return found
