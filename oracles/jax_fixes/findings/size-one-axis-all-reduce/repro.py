"""A psum over a mesh axis of size 1, followed by a shard_map over another axis, fails to compile.

On a 1 x 2 mesh ('x', 'y'), a shard_map manual over 'x' (size 1) computes psum over 'x' (the identity: one
device per group) and then a shard_map manual over 'y'. JAX lowers a shard_map whose manual axes all have size 1
without a manual computation, so the psum becomes an all-reduce over groups of one device in the automatic part
of the module; beside the nested shard_map's manual computation, XLA's SPMD partitioner refuses it. On a 2 x 2
mesh the same program compiles and runs.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]).reshape(1, 2), ("x", "y"))


def body(b):
    total = lax.psum(b, "x")  # 'x' has size 1: the identity
    return jax.shard_map(lambda c: c * 2.0, in_specs=P(None, "y"), out_specs=P(None, "y"), axis_names={"y"})(total)


f = jax.shard_map(body, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None), axis_names={"x"})
x = jnp.array([[1.0, 2.0]])
correct = np.asarray(x) * 2.0  # psum over one device is its operand
alone = jax.shard_map(lambda b: lax.psum(b, "x") * 2.0, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None),
                      axis_names={"x"})
assert np.array_equal(np.asarray(jax.jit(alone)(x)), correct)  # without the nested shard_map it compiles
try:
    jax_answer = np.asarray(jax.jit(f)(x))
    print("JAX:    ", jax_answer.tolist())
except Exception as error:  # XLA's RET_CHECK, raised as JaxRuntimeError
    jax_answer = None
    print(f"JAX raises {type(error).__name__}:", str(error).splitlines()[0])
print("correct:", correct.tolist())
assert jax_answer is not None and np.array_equal(jax_answer, correct), \
    "a psum over a size-1 axis beside a nested shard_map fails to compile"
