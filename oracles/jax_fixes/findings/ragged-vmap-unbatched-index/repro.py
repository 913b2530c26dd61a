"""jax.vmap of ragged_all_to_all with the offsets and sizes shared by the batch (JAX 0.10.2).

The usual MoE batching: vmap over operand and output, the index arrays unbatched
(in_axes=(0, 0, None, None, None, None)). Two devices, each sending operand row j to device j at the row of
the sender: the correct answer is the per-batch loop of the same program. JAX's batching rule asserts that
each index array is batched (`assert x.ndim == 2`) before its own branch that broadcasts an unbatched one.
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
batched = jax.jit(jax.shard_map(jax.vmap(ragged, in_axes=(0, 0, None, None, None, None)), mesh=mesh,
                                in_specs=(P(None, "x"), P(None, "x"), *[P("x")] * 4), out_specs=P(None, "x")))
operands, outputs = jnp.arange(12.0).reshape(3, 4), jnp.zeros((3, 4))

want = np.stack([np.asarray(one(operands[b], outputs[b], *index)) for b in range(3)])
try:
    got = np.asarray(batched(operands, outputs, *index))
except AssertionError:
    got = "AssertionError (bdim_at_second: assert x.ndim == 2)"
print("JAX's vmap:        ", got if isinstance(got, str) else got.tolist())
print("correct (the loop):", want.tolist())
assert not isinstance(got, str) and np.array_equal(got, want), f"jax.vmap is not the per-batch loop: {got}"
