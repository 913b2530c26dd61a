"""The result of an eager shard_map (outside jax.jit) with a zero-size output cannot be read.

The eager shard_map assembles its result with `jit(..., out_shardings=NamedSharding(mesh, out_spec))`. XLA leaves
a zero-size result whole on every device (each buffer of the global shape) whatever sharding was asked for, and
`_maybe_get_and_check_out_shardings` skips its check for zero-size results and types the result with the
sharding asked for: each (2, 0) buffer is taken for a (1, 0) shard, and reading the array fails. A jit with that
out_sharding and a zero-size result does the same.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
f = jax.shard_map(lambda v: v, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
x = jnp.zeros((2, 0))

correct = np.asarray(jax.jit(f)(x))  # the same program under jit: the identity, shape (2, 0)
assert correct.shape == (2, 0)
copy = jax.jit(lambda v: v, out_shardings=NamedSharding(mesh, P("x")))(x)
print("jit with out_shardings=P('x'): shards", [s.data.shape for s in copy.addressable_shards])

result = f(x)
print("eager shard_map: shards", [s.data.shape for s in result.addressable_shards], "of", result.sharding.spec)
try:
    jax_answer = np.asarray(result)
    print("JAX:    ", jax_answer.shape)
except ValueError as error:
    jax_answer = None
    print("JAX raises ValueError:", error)
print("correct:", correct.shape)
assert jax_answer is not None and jax_answer.shape == correct.shape, \
    "an eager shard_map's zero-size result cannot be read"
