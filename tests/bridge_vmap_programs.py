"""Reductions over a vmap axis inside a shard_map body, for the bridge's worker (`bridge_programs.py`): JAX
turns `psum(u, ('v', 'x'))` under `jax.vmap(..., axis_name='v')` into `psum[axes=(0, 'x')]`, a reduction over a
positional axis and a mesh axis, which the bridge reduces on the device and then across the mesh
(`oracles._bridge_positional`). Stock JAX traces these with `check_vma=False`."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

import oracles


def _cases(mesh: Any) -> list[tuple[str, Any, tuple]]:
    rng = np.random.default_rng(17)
    x = rng.standard_normal((8, 3, 5)).astype(np.float32)
    ints = rng.integers(-50, 50, (8, 3, 5)).astype(np.int32)

    def mapped(reduce: Any, axes: Any, in_axes: int = 1, out_specs: Any = None) -> Any:
        body = lambda v: jax.vmap(lambda u: reduce(u, axes), axis_name="v", in_axes=in_axes)(v)
        return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P(None, "x") if out_specs is None
                             else out_specs, check_vma=False)

    found = []
    for name, reduce in (("psum", lax.psum), ("pmax", lax.pmax), ("pmin", lax.pmin), ("pmean", lax.pmean)):
        found.append((f"{name} over the vmap axis", jax.jit(mapped(reduce, "v")), (x,)))
        found.append((f"{name} over the vmap axis and 'x'", jax.jit(mapped(reduce, ("v", "x"), out_specs=P())), (x,)))
    found.append(("psum over the vmap axis of int32", jax.jit(mapped(lax.psum, "v")), (ints,)))
    found.append(("psum over the vmap axis at 0", jax.jit(mapped(lax.psum, "v", in_axes=0, out_specs=P("x"))), (x,)))
    return found


def _gradients(mesh: Any) -> tuple[Any, Any, tuple]:
    """The gradient of a loss through psum over ('v', 'x'), and of the same loss written without vmap (the
    local sum, then psum over 'x'): JAX and the bridge each give both the same bits."""
    x = np.random.default_rng(18).standard_normal((8, 3, 5)).astype(np.float32)
    summed = lambda v: jax.vmap(lambda u: lax.psum(u, ("v", "x")), axis_name="v", in_axes=1)(v)
    by_hand = lambda v: jnp.broadcast_to(lax.psum(v.sum(1), "x")[None], (3, 1, 5))
    losses = [lambda v, body=body: jnp.sum(jnp.sin(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P(),
                                                                 check_vma=False)(v * v)))
              for body in (summed, by_hand)]
    return jax.jit(jax.grad(losses[0])), jax.jit(jax.grad(losses[1])), (x,)


def vmap_axes() -> list[tuple[str, bool, str]]:
    """(label, whether the bridge equals jitted JAX bit for bit, the report) for each program; for the
    gradient, whether it equals the bridge's gradient of the same loss written without vmap, bit for bit, as
    JAX's two gradients are equal (both differ from jitted JAX where XLA fuses across the collective, as
    the plain-JAX reproducer of `bridge_reach.fusion` shows)."""
    mesh = oracles.cpu_mesh({"x": 8})
    rows = []
    for label, f, args in _cases(mesh):
        report = oracles.compare_jax(f, *args)
        rows.append((label, report.agrees, str(report)[:400]))
    vmapped, by_hand, args = _gradients(mesh)
    same = lambda a, b: np.asarray(a).tobytes() == np.asarray(b).tobytes()
    jax_same = same(vmapped(*args), by_hand(*args))
    bridge_same = same(oracles.simulate_jax(vmapped, *args).outputs, oracles.simulate_jax(by_hand, *args).outputs)
    rows.append(("grad through psum over ('v', 'x') == grad written without vmap", jax_same and bridge_same,
                 f"jax's two gradients equal: {jax_same}; the bridge's: {bridge_same}"))
    return rows
