"""A child process for test_compute_bridge.py: the collective matmul step of JAX's shard_map tutorial, plain and
with `ppermute_start(...).done()`, and a matmul of a ppermute's result (which must wait for it), through
`oracles.simulate_jax` on 4 CPU devices, on h100-nvlink's preset (with its roofline) and on a network without
one. Prints one JSON object: per program and network, the simulated end time, device 0's compute spans (name,
start, end) and whether the outputs equal jitted JAX's, each evaluated equation by equation and
(".../compiled") as compiled segments."""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import json

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.lax import parallel
from jax.sharding import PartitionSpec as P

import oracles
import sim

RING = [(k, (k + 1) % 4) for k in range(4)]


def plain(x, w):
    acc = jnp.zeros((x.shape[0], w.shape[1]), x.dtype)
    for _ in range(4):
        acc = acc + x @ w
        x = jax.lax.ppermute(x, "i", RING)
    return acc


def overlapped(x, w):
    acc = jnp.zeros((x.shape[0], w.shape[1]), x.dtype)
    for _ in range(4):
        future = parallel.ppermute_start(x, "i", RING)
        acc = acc + x @ w
        x = future.done()
    return acc


def dependent(x, w):
    return jax.lax.ppermute(x, "i", RING) @ w


def main() -> None:
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("i",))
    x = np.random.default_rng(0).standard_normal((4 * 256, 512)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((512, 512)).astype(np.float32)
    networks = {"preset": sim.Network.preset("h100-nvlink", (4,)), "plain": sim.Network.switch(2e-6, 450e9)}
    out = {}
    for f in (plain, overlapped, dependent):
        g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i")))
        expected = np.asarray(g(x, w))
        for (key, network), compiled in ((n, c) for n in networks.items() for c in (False, True)):
            simulated = oracles.simulate_jax(g, x, w, network=network, compiled=compiled)
            run = simulated.run
            spans = [(c.name, c.start_s, c.end_s) for c in run.trace.computes if c.device == 0]
            out[f"{f.__name__}/{key}" + ("/compiled" if compiled else "")] = {
                "end_s": run.end_time_s, "spans": spans,
                "equal": bool(np.array_equal(np.asarray(simulated.outputs), expected))}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
