"""A psum over a vmap axis inside shard_map raises AssertionError in core.pvary.

`jax.vmap(..., axis_name='y')` inside a shard_map: psum over 'y' of a value the vmap does not batch asks
`pvary` to make it vary along 'y', and `pvary` keeps only mesh axes, then asserts it kept them all.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=6"

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
x = jnp.array([1.0, 2.0])


def program(check_vma: bool):
    body = jax.vmap(lambda v: lax.psum(v, "y"), in_axes=None, axis_size=3, axis_name="y")
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P(None, "x"), check_vma=check_vma))


# the same call with 'y' a mesh axis: each of the 3 members along 'y' holds x and gets the sum of 3 copies
mesh_xy = jax.sharding.Mesh(np.array(jax.devices()[:6]).reshape(2, 3), ("x", "y"))
on_mesh = jax.jit(jax.shard_map(lambda v: lax.psum(v, "y"), mesh=mesh_xy, in_specs=P("x"), out_specs=P("x")))
correct = np.stack([np.asarray(on_mesh(x))] * 3)  # [[3, 6]] * 3
assert np.array_equal(np.asarray(program(check_vma=False)(x)), correct)  # the untyped program agrees

try:
    jax_answer = np.asarray(program(check_vma=True)(x))
    print("JAX:    ", jax_answer.tolist())
except AssertionError as error:
    jax_answer = None
    print("JAX raises AssertionError (core.pvary: assert set(new_axes) == set(axes))", error)
print("correct:", correct.tolist())
assert jax_answer is not None and np.array_equal(jax_answer, correct), "psum over a vmap axis inside shard_map fails"
