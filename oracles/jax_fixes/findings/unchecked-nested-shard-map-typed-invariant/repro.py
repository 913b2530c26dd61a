"""A check_vma=False shard_map nested in a check_vma=True one types its results invariant along the enclosing axes.

On a 2 x 2 mesh ('x', 'y'), a shard_map manual over 'x' (check_vma=True) calls a shard_map manual over 'y' with
check_vma=False whose body doubles its block. The nested shard_map's result depends on 'x' (it is the doubled
block of each 'x' device), but JAX types it invariant along 'x'. So out_specs=P() of the enclosing shard_map
passes JAX's check and returns device 0's block alone (a silent wrong answer under check_vma=True), and
jax.grad of the program fails: the nested body's cotangents lose the 'x' the primal types carry.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
inner = jax.shard_map(lambda c: c * 2.0, in_specs=P(None, "y"), out_specs=P(None, "y"), axis_names={"y"},
                      check_vma=False)
x = jnp.arange(16.0).reshape(4, 4)

claim = jax.shard_map(inner, mesh=mesh, in_specs=P("x"), out_specs=P(), axis_names={"x"})
try:  # the two 'x' devices hold different blocks: a checked shard_map must refuse to call them replicated
    print("out_specs=P(): JAX returns", np.asarray(jax.jit(claim)(x)).tolist())
    refused = False
except ValueError as error:
    print("out_specs=P(): JAX refuses:", str(error).splitlines()[0])
    refused = True

f = jax.shard_map(inner, mesh=mesh, in_specs=P("x"), out_specs=P("x"), axis_names={"x"})
try:
    grad = np.asarray(jax.jit(jax.grad(lambda v: jnp.sum(f(v) * v)))(x))
    print("grad:   ", grad.tolist())
except ValueError as error:
    grad = None
    print("grad: JAX raises ValueError:", str(error).splitlines()[0])
correct = 4.0 * np.asarray(x)  # d/dv sum(2 v * v)
print("correct grad:", correct.tolist())
assert refused and grad is not None and np.array_equal(grad, correct), \
    "an unchecked shard_map nested in a checked one is typed invariant along the enclosing axes"
