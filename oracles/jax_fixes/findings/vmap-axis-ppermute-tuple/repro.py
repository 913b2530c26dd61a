"""jax.vmap's axis inside a tuple of ppermute's axes: the perm is applied to the other axes alone.

With 'y' a vmap axis of 2 and 'x' a mesh axis of 2, the index along ('x', 'y') is 2 * x + y, so the perm
[(0, 1), (1, 0)] swaps (x0, y0) and (x0, y1) and every other member gets zeros, as the same call does with
'y' a mesh axis. The batching rule binds ppermute over 'x' with the same perm: a silent wrong answer.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

perm = [(0, 1), (1, 0)]
x = jnp.arange(4.0).reshape(2, 2)  # x[i, j]: the member at x = i, y = j

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
swap = jax.vmap(lambda v: lax.ppermute(v, ("x", "y"), perm), axis_name="y")
f = jax.jit(jax.shard_map(lambda b: swap(b[0])[None], mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
jax_answer = np.asarray(f(x))

mesh2 = jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
on_mesh = jax.jit(jax.shard_map(lambda b: lax.ppermute(b, ("x", "y"), perm), mesh=mesh2, in_specs=P("x", "y"),
                                out_specs=P("x", "y"), check_vma=False))
correct = np.asarray(on_mesh(x))  # the same call with 'y' a mesh axis: [[1, 0], [0, 0]]
print("JAX:    ", jax_answer.tolist())
print("correct:", correct.tolist())
assert np.array_equal(jax_answer, correct), "ppermute over ('x', 'y') with 'y' a vmap axis permutes 'x' alone"
