"""jax.vmap of lax.ppermute over the vmap's own axis with a partial perm raises AssertionError.

The docs allow perms that are not full permutations (a member no pair writes to gets zeros); the batching
rule asserts one pair per member.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=3"

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

perm = [(0, 2), (2, 1)]  # member 0 sends to 2, member 2 to 1; nobody sends to member 0
x = jnp.arange(6.0).reshape(3, 2)

mesh = jax.sharding.Mesh(np.array(jax.devices()[:3]), ("y",))
on_mesh = jax.jit(jax.shard_map(lambda b: lax.ppermute(b, "y", perm), mesh=mesh, in_specs=P("y"), out_specs=P("y")))
correct = np.asarray(on_mesh(x))  # the same call with 'y' a mesh axis: [[0, 0], [4, 5], [0, 1]]
try:
    jax_answer = np.asarray(jax.vmap(lambda v: lax.ppermute(v, "y", perm), axis_name="y")(x))
    print("JAX:    ", jax_answer.tolist())
except AssertionError as error:
    jax_answer = None
    print("JAX raises AssertionError:", error)
print("correct:", correct.tolist())
assert jax_answer is not None and np.array_equal(jax_answer, correct), "vmap of a partial ppermute is wrong"
