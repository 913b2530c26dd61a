"""The bridge's bad inputs and the errors they raise, JAX's own failing rules pinned, and a deliberately
wrong bridge (`bridge_programs.py` runs them as batches in its worker process with 8 CPU devices)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

import oracles


def error(call: Callable[[], Any]) -> tuple[str, str]:
    """What `call` raised: (class name, message); ("no error", "") if it returned."""
    try:
        call()
    except Exception as raised:
        return type(raised).__name__, str(raised)
    return "no error", ""


def _beside(f: Callable[..., Any], x: np.ndarray) -> str:
    """JAX's own answer, and the bridge's answer with its first diagnostic beside it, or a note that they differ."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        simulated = oracles.simulate_jax(f, x)
    want = np.asarray(f(x))
    if not np.array_equal(want, simulated.outputs) or not simulated.diagnostics:
        return f"JAX {want}, bridge {simulated.outputs}, diagnostics {simulated.diagnostics}"
    first = simulated.diagnostics[0]
    return f"{want} {first.kind} {first.primitive} {first.message}"


def _kinds(report: Any) -> str:
    """Whether compare_jax agrees, and the kinds of the diagnostics beside the simulation."""
    return f"{report.agrees} {[d.kind for d in report.simulated.diagnostics]}"


def errors() -> dict[str, tuple[str, str]]:
    """Each bad input to the bridge and the error it raises: (class name, message)."""
    from jax.sharding import AbstractMesh

    x = np.arange(8.0, dtype=np.float32)
    mesh = oracles.cpu_mesh({"i": 4})
    big = jax.shard_map(lambda v: lax.psum(v, "i"), mesh=AbstractMesh((16,), ("i",)), in_specs=P("i"),
                        out_specs=P())
    ragged = jax.shard_map(
        lambda v, o, a, b, c, e: lax.ragged_all_to_all(v, o, a, b, c, e, axis_name="i"), mesh=mesh,
        in_specs=(P("i"),) * 6, out_specs=P("i"))
    sizes = np.ones(16, np.int32)
    argsorted = jax.shard_map(jnp.argsort, mesh=oracles.cpu_mesh({"i": 2}), in_specs=P("i"), out_specs=P())
    grouped = jax.jit(jax.shard_map(lambda v: lax.pmax(v, "i", axis_index_groups=[[0, 1], [2, 3]]), mesh=mesh,
                                    in_specs=P("i"), out_specs=P()))
    scaled = jax.jit(lambda v, k: jax.shard_map(lambda b: lax.psum(b * k, "i"), mesh=mesh, in_specs=P("i"),
                                                out_specs=P())(v), static_argnums=1)
    ca = jax.jit(jax.shard_map(lambda v: lax.ppermute(v, ("c", "a"), [(k, (k + 1) % 8) for k in range(8)]),
                               mesh=oracles.cpu_mesh({"a": 2, "c": 4}), in_specs=P(("a", "c")),
                               out_specs=P(("a", "c"))))
    ca_grad = jax.jit(jax.grad(lambda v: jnp.sum(ca(v) * jnp.arange(8.0))))
    offsets = np.tile(np.arange(4, dtype=np.int32), 4)  # device s sends row r to device r ...
    places = np.repeat(np.arange(4, dtype=np.int32), 4)  # ... which keeps it in its row s
    return {
        "no shard_map": error(lambda: oracles.simulate_jax(jax.jit(lambda v: v * 2), x)),
        "collective outside shard_map": error(lambda: oracles.simulate_jax(lambda v: lax.psum(v, "i"), x)),
        "unsupported primitive": error(lambda: oracles.simulate_jax(jax.shard_map(
            lambda v: lax.psum(jax.new_ref(v)[...], "i"), mesh=mesh, in_specs=P("i"), out_specs=P()), x)),
        "cpu_mesh too large": error(lambda: oracles.cpu_mesh({"i": 16})),
        "a shape without values": error(lambda: oracles.simulate_jax(jax.jit(jax.shard_map(
            lambda v: lax.psum(v, "i"), mesh=mesh, in_specs=P("i"), out_specs=P())),
            jax.ShapeDtypeStruct((8,), np.float32))),
        "compare on a mesh too large": error(lambda: oracles.compare_jax(big, np.arange(32.0, dtype=np.float32))),
        "simulate on a mesh too large": ("no error", str(oracles.simulate_jax(big, np.arange(32.0,
                                                                              dtype=np.float32)).outputs)),
        "static argument": ("no error", " ".join(str(oracles.compare_jax(scaled, x, k).agrees) + str(
            oracles.simulate_jax(scaled, x, k).outputs) for k in (3, 4))),
        "ragged without the lowering": error(lambda: oracles.compare_jax(
            ragged, np.arange(16.0, dtype=np.float32), np.zeros(16, np.float32), offsets, sizes, places, sizes)),
        # JAX's own rules that fail today (the generated programs avoid them): pinned so a fix is noticed
        "jax: grad of an untiled all_to_all": error(lambda: jax.grad(lambda v: jax.shard_map(
            lambda u: lax.all_to_all(u, "i", 0, 1, tiled=False), mesh=mesh, in_specs=P("i"),
            out_specs=P("i"))(v).sum())(np.ones((16, 3), np.float32))),
        "jax: vmap of an untiled psum_scatter": error(lambda: jax.make_jaxpr(jax.vmap(jax.shard_map(
            lambda u: lax.psum_scatter(u, "i", scatter_dimension=1, tiled=False), mesh=mesh, in_specs=P("i"),
            out_specs=P("i")), in_axes=2))(np.ones((8, 4, 3), np.float32))),
        "jax: argsort of a varying array typed invariant": error(lambda: oracles.simulate_jax(
            argsorted, np.array([3, 1, 2, 0, 1, 2], np.float32), strict=True)),
        "jax: grouped pmax's replicated output": ("no error", _beside(grouped, x)),
        "jax: argsort's replicated output": ("no error", _beside(argsorted, np.array([3, 1, 2, 0, 1, 2], np.float32))),
        "jax: ppermute over ('c', 'a') numbered in the mesh's order": ("no error", _beside(ca, x)),
        "jax: its gradient": ("no error", _kinds(oracles.compare_jax(ca_grad, x))),
        "jax: ppermute numbering under strict": error(lambda: oracles.simulate_jax(ca, x, strict=True)),
        "jax: ragged_all_to_all typed as its output": error(lambda: oracles.simulate_jax(jax.shard_map(
            lambda v, a, b, c, e: lax.ragged_all_to_all(v, jnp.zeros(4, np.float32), a, b, c, e, axis_name="i"),
            mesh=mesh, in_specs=(P("i"),) * 5, out_specs=P()), np.arange(16.0, dtype=np.float32), offsets,
            sizes, places, sizes, strict=True)),
        "ragged simulated": ("no error", str(oracles.simulate_jax(
            ragged, np.arange(16.0, dtype=np.float32), np.zeros(16, np.float32), offsets, sizes, places,
            sizes).outputs.tolist())),
    }


def mutation() -> tuple[bool, str]:
    """compare_jax of a psum program with the bridge's psum_invariant run as meshsim's pmax instead."""
    from collectives import REGISTRY
    from oracles import _bridge_device

    real = _bridge_device._definition
    _bridge_device._definition = lambda name: REGISTRY["pmax"] if name == "psum_invariant" else real(name)
    try:
        f = jax.shard_map(lambda v: lax.psum(v, "i"), mesh=oracles.cpu_mesh({"i": 4}), in_specs=P("i"),
                          out_specs=P())
        report = oracles.compare_jax(f, np.arange(8.0, dtype=np.float32))
    finally:
        _bridge_device._definition = real
    return report.agrees, str(report)
