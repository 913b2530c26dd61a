"""How values enter and leave a program through the bridge, for its worker (`bridge_programs.py`): numpy
operands canonicalised as JAX takes them in (float64 -> float32, int64 -> int32), and an output JAX lays out
column-major on every device, read from the device buffers byte for byte."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

import oracles


def laid_out() -> dict[str, Any]:
    """An all_to_all whose result JAX lays out column-major on every device (`out_shardings` with a
    `Format`): compare_jax reads each device buffer and compares it byte for byte with meshsim's shard
    encoded column-major; the same check refuses other values."""
    from jax.experimental.layout import Format, Layout
    from jax.sharding import NamedSharding

    from oracles._bridge_compare import device_bytes_equal

    mesh = oracles.cpu_mesh({"i": 4})
    body = jax.shard_map(lambda v: lax.all_to_all(v, "i", 0, 1, tiled=True), mesh=mesh, in_specs=P("i"),
                         out_specs=P("i"))
    f = jax.jit(body, out_shardings=Format(Layout((1, 0)), NamedSharding(mesh, P("i"))))
    x = np.arange(16 * 12, dtype=np.float32).reshape(16, 12)
    report = oracles.compare_jax(f, x)
    out = f(x)
    return {"agrees": report.agrees, "row": str(report.outputs[0]), "layout": report.outputs[0].layout,
            "checked": report.outputs[0].equal_device_bytes,
            "other values refused": not device_bytes_equal(out, np.asarray(out)[:, ::-1])}


def canonical() -> list[tuple[str, str, str, bool]]:
    """numpy float64 and int64 operands, as JAX takes them in (float32 and int32): `simulate_jax`'s outputs
    against jitted JAX's, dtype and bits; (label, JAX's dtype, the bridge's dtype, equal bit for bit)."""
    mesh = oracles.cpu_mesh({"i": 4})
    f = jax.jit(jax.shard_map(lambda x: lax.psum(x, "i") * 3, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
    rows = []
    for label, x in (("float64 linspace", np.linspace(0, 1, 8)), ("int64 arange", np.arange(8))):
        want, got = np.asarray(f(x)), oracles.simulate_jax(f, x).outputs
        rows.append((label, str(want.dtype), str(got.dtype), want.dtype == got.dtype and
                     np.array_equal(want.view(np.uint8), got.view(np.uint8))))
    return rows


def comparison() -> dict[str, Any]:
    """compare_jax runs `f` as JAX runs it, and measures every float: an unjitted `f` (eager JAX, op by op) and
    the same `f` jitted (XLA fuses `psum(v @ w) * 0.3 + v * 1.7`) each agree with the bridge bit for bit; the
    unjitted one against the compiled bridge (`compiled=True`) may not. bfloat16 outputs that differ show
    their difference and are accepted within `atol`. The host's sum or product of a shard_map's sharded
    output is partitioned as XLA partitions it (jitted, and eagerly), bit for bit."""
    import ml_dtypes

    from oracles._bridge_compare import agreement

    mesh = oracles.cpu_mesh({"i": 4})
    f = jax.shard_map(lambda v, w: lax.psum(v @ w, "i") * 0.3 + v * 1.7, mesh=mesh, in_specs=(P("i"), P()),
                      out_specs=P("i"))
    rng = np.random.RandomState(0)
    x, w = rng.randn(8, 8).astype(np.float32), rng.randn(8, 8).astype(np.float32)
    a, b = np.array([1, 2, 3], ml_dtypes.bfloat16), np.array([1, 2, 300], ml_dtypes.bfloat16)
    double = jax.shard_map(lambda v: v * 2, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    big = np.random.RandomState(1).randn(64, 64).astype(np.float32)
    hosts = {"host sum over the sharded axis": lambda v: jnp.sum(double(v), axis=0),
             "host gram": lambda v: double(v).T @ double(v)}
    return {"unjitted": oracles.compare_jax(f, x, w).agrees, "jitted": oracles.compare_jax(jax.jit(f), x, w).agrees,
            "unjitted, compiled": oracles.compare_jax(f, x, w, compiled=True).agrees,
            "bfloat16 diff": agreement("out", a, b, 0.0, 0.0).max_abs_diff,
            "bfloat16 within atol": agreement("out", a, b, 0.0, 1000.0).close} | {
        f"{label}{how}": oracles.compare_jax(g, big).agrees for label, host in hosts.items()
        for how, g in (("", jax.jit(host)), (", unjitted", host))}
