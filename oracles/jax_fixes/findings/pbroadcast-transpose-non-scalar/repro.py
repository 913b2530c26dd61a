"""jax.grad of lax.pbroadcast of a non-scalar array fails to trace.

The transpose rule fills `lax.full_like(t, psum(t))`, which takes only a scalar fill value.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import oracles

# XLA:CPU has no CollectiveBroadcast: this registers one for CPU only; on GPU/TPU the same code runs without it
oracles.install_cpu_lowerings(["pbroadcast"])

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("i",))
f = jax.shard_map(lambda v: lax.pbroadcast(v, "i", 2), mesh=mesh, in_specs=P("i"), out_specs=P("i"))
x = np.arange(16, dtype=np.float32).reshape(8, 2)
weights = 1 + np.arange(16, dtype=np.float32).reshape(8, 2)

# every device's block of f(x) is device 2's block of x: the source's cotangent is the sum of every
# device's weights, the other devices' zero
correct = np.zeros_like(x)
correct[4:6] = weights.reshape(4, 2, 2).sum(axis=0)
try:
    jax_answer = np.asarray(jax.grad(lambda v: (f(v) * weights).sum())(x))
    print("JAX:    ", jax_answer.ravel().tolist())
except TypeError as error:
    jax_answer = None
    print("JAX raises TypeError:", error)
print("correct:", correct.ravel().tolist())
assert jax_answer is not None and np.array_equal(jax_answer, correct), "jax.grad of a non-scalar pbroadcast is wrong"
