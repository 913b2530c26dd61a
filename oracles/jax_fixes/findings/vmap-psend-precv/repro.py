"""jax.vmap of a program that sends with psend and receives with precv fails to trace.

psend and precv are batched by ppermute's rule: for precv it is called with `out_shape`, which it does not
take (and for psend it binds a ppermute, whose result is data where psend's is a token).
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))


def pair(b):
    token = lax.psend(b, "x", [(0, 1), (1, 0)])
    return lax.precv(token, jax.ShapeDtypeStruct(b.shape, b.dtype), "x", [(0, 1), (1, 0)])


f = jax.shard_map(pair, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
x = jnp.ones((3, 4))
# types only: XLA:CPU has no Send or Recv. Each batch element's program traced alone, the results stacked:
per_batch = [jax.eval_shape(f, x[b]) for b in range(3)]
correct = jax.ShapeDtypeStruct((len(per_batch), *per_batch[0].shape), per_batch[0].dtype)  # f32[3, 4]
try:
    jax_answer = jax.eval_shape(jax.vmap(f), x)
    print("JAX:    ", jax_answer.shape, jax_answer.dtype)
except TypeError as error:
    jax_answer = None
    print("JAX raises TypeError:", error)
print("correct:", correct.shape, correct.dtype)
assert jax_answer is not None and (jax_answer.shape, jax_answer.dtype) == (correct.shape, correct.dtype), (
    "vmap of psend and precv fails to trace")
