"""jax.vmap of lax.all_to_all over the vmap axis of an unbatched operand gives the wrong shape and values.

Every member of the vmap holds the same operand x, so member i should receive chunk i of each member's x. The
batching rule broadcasts the unbatched operand with `lax.broadcast(x, (axis_size, *x.shape))`, which prepends
all of those sizes: the operand gains x.ndim + 1 axes instead of one.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

x = jnp.array([1.0, 2.0])


def exchange(v):
    return lax.all_to_all(v, "y", 0, 0, tiled=True)


# the same call with 'y' a mesh axis: both devices hold x, device i receives chunk i of each
mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("y",))
on_mesh = jax.jit(jax.shard_map(exchange, mesh=mesh, in_specs=P(), out_specs=P("y")))
correct = np.asarray(on_mesh(x)).reshape(2, 2)
batched = np.asarray(jax.vmap(exchange, axis_name="y")(jnp.stack([x, x])))  # x batched as [x, x]
assert np.array_equal(correct, batched)

jax_answer = np.asarray(jax.vmap(exchange, in_axes=None, axis_size=2, axis_name="y")(x))
print("JAX:    ", jax_answer.shape, jax_answer.tolist())
print("correct:", correct.shape, correct.tolist())
assert jax_answer.shape == correct.shape and np.array_equal(jax_answer, correct), \
    "all_to_all of an unbatched operand over a vmap axis is wrong"
