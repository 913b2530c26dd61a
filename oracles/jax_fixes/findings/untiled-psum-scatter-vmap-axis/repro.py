"""jax.vmap of an untiled psum_scatter with the batch axis after scatter_dimension raises IndexError.

The untiled scatter removes scatter_dimension, so a batch axis after it moves one place left; the batching
rule moves it one place right and indexes past the result's rank.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("i",))
f = jax.shard_map(lambda u: lax.psum_scatter(u, "i", scatter_dimension=1, tiled=False), mesh=mesh,
                  in_specs=P("i"), out_specs=P("i"))
x = np.arange(96, dtype=np.float32).reshape(8, 4, 3)  # batch axis 2, after scatter_dimension 1

correct = np.stack([np.asarray(f(x[:, :, b])) for b in range(3)])  # the same program once per batch element
try:
    jax_answer = np.asarray(jax.vmap(f, in_axes=2)(x))
    print("JAX:    ", jax_answer.tolist())
except IndexError as error:
    jax_answer = None
    print("JAX raises IndexError:", error)
print("correct:", correct.tolist())
assert jax_answer is not None and np.array_equal(jax_answer, correct), "vmap of an untiled psum_scatter is wrong"
