"""jax.vmap of lax.pbroadcast over the vmap's own axis raises TypeError.

Every member of the axis should get the source member's value; the batching rule hands `take` a Python list
of indices, which a jax array refuses.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
broadcast = jax.vmap(lambda v: lax.pbroadcast(v, "y", 1), axis_name="y")  # members of 'y' get member 1's row
f = jax.jit(jax.shard_map(broadcast, mesh=mesh, in_specs=P(None, "x"), out_specs=P(None, "x"), check_vma=False))
x = jnp.arange(6.0).reshape(3, 2)  # 'y' of size 3 along axis 0, 'x' along axis 1

correct = np.stack([np.asarray(x)[1] for _member in range(3)])  # each member of 'y' holds the source's row
try:
    jax_answer = np.asarray(f(x))
    print("JAX:    ", jax_answer.tolist())
except TypeError as error:
    jax_answer = None
    print("JAX raises TypeError:", error)
print("correct:", correct.tolist())
assert jax_answer is not None and np.array_equal(jax_answer, correct), "vmap of pbroadcast over its axis is wrong"
