"""jax.vmap of ragged_all_to_all with rows of zero elements (JAX 0.10.2).

Operand and output rows of shape (0,) are legal (an operand float32[4, 0] per device); nothing is moved, so
the batch of outputs comes back unchanged, as the per-batch loop of the same program gives. JAX's batching
rule merges and splits the batch with `reshape(-1, ...)` / `reshape(size, -1, ...)`, and -1 next to a zero
dimension divides by zero.
"""

# ruff: noqa: E402  (XLA_FLAGS must be set before jax is imported)

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import oracles

# XLA:CPU cannot compile ragged_all_to_all; this registers a CPU lowering (not needed on GPU/TPU, where the
# same code runs as it is). JAX's batching rule, the subject here, is untouched.
oracles.install_cpu_lowerings()

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
index = [jnp.array(v, jnp.int32) for v in ([0, 1, 0, 1], [1, 1, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1])]


def ragged(op, out, *idx):
    return lax.ragged_all_to_all(op, out, *idx, axis_name="x")


one = jax.jit(jax.shard_map(ragged, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
batched = jax.jit(jax.shard_map(jax.vmap(ragged), mesh=mesh, in_specs=P(None, "x"), out_specs=P(None, "x")))
operands, outputs = jnp.zeros((2, 4, 0)), jnp.ones((2, 4, 0))
indices = [jnp.stack([i, i]) for i in index]

want = np.stack([np.asarray(one(operands[b], outputs[b], *index)) for b in range(2)])
try:
    got = np.asarray(batched(operands, outputs, *indices))
except ZeroDivisionError as error:
    got = f"ZeroDivisionError: {error}"
print("JAX's vmap:        ", got if isinstance(got, str) else f"{got.dtype}{list(got.shape)}")
print("correct (the loop):", f"{want.dtype}{list(want.shape)}")
assert not isinstance(got, str) and got.shape == want.shape, f"jax.vmap is not the per-batch loop: {got}"
