"""jax.grad of an untiled all_to_all with split_axis != concat_axis fails to trace.

The transpose rule of all_to_all_p calls the user-level lax.all_to_all, which for tiled=False inserts the
size-1 axis again into a cotangent that already has the primitive's shape.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("i",))
f = jax.shard_map(lambda u: lax.all_to_all(u, "i", 0, 1, tiled=False), mesh=mesh, in_specs=P("i"),
                  out_specs=P("i"))
x = np.arange(48, dtype=np.float32).reshape(16, 3)
weights = np.arange(f(x).size, dtype=np.float32).reshape(f(x).shape)

# all_to_all only moves elements: the gradient of sum(weights * f(x)) is the weights moved back, found
# here by matching each input element to the output position that holds it
out = np.asarray(f(x))
correct = np.zeros_like(x)
for position in np.ndindex(out.shape):
    correct[np.unravel_index(int(out[position]), x.shape)] = weights[position]
try:
    jax_answer = np.asarray(jax.grad(lambda v: (f(v) * weights).sum())(x))
    print("JAX:    ", jax_answer.ravel().tolist())
except ValueError as error:
    jax_answer = None
    print("JAX raises ValueError:", str(error).splitlines()[0])
print("correct:", correct.ravel().tolist())
assert jax_answer is not None and np.array_equal(jax_answer, correct), "jax.grad of an untiled all_to_all is wrong"
