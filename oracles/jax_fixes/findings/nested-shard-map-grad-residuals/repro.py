"""Reverse mode of a shard_map nested in another fails to lower under check_vma=True.

The inner shard_map (manual over 'x') sits in an outer one (manual over 'y'); its body multiplies an element of
one argument by an element of another, so `jax.grad` keeps a residual that varies along 'y'. JAX's partial
evaluation gives each residual the spec `ShapedArray.nospec` makes, which under check_vma names every axis the
residual varies along, 'y' included, though the enclosing shard_map already made 'y' manual: lowering fails.
With check_vma=False the same gradient is right.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]).reshape(1, 2), ("x", "y"))


def nested(check_vma):
    inner = lambda b, w: (b[0, 0] * w[0, 0])[None, None]  # keeps b[0, 0] and w[0, 0] as residuals
    outer = lambda b, w: jax.shard_map(inner, in_specs=P("x", None), out_specs=P("x", None), axis_names={"x"},
                                       check_vma=check_vma)(b, w)
    return jax.shard_map(outer, mesh=mesh, in_specs=P(None, "y"), out_specs=P(None, "y"), axis_names={"y"},
                         check_vma=check_vma)


b = jnp.arange(4.0).reshape(1, 2, 2)
w = b + 1.0
print("forward:", np.asarray(jax.jit(nested(True))(b, w)).reshape(-1).tolist())
correct = np.asarray(jax.jit(jax.grad(lambda b: jnp.sum(nested(False)(b, w))))(b))  # d(b * w)/db = w
assert np.array_equal(correct, w)
try:
    jax_answer = np.asarray(jax.jit(jax.grad(lambda b: jnp.sum(nested(True)(b, w))))(b))
    print("JAX:    ", jax_answer.reshape(-1).tolist())
except ValueError as error:
    jax_answer = None
    print("JAX raises ValueError:", str(error).splitlines()[0], str(error).splitlines()[1].strip())
print("correct:", correct.reshape(-1).tolist())
assert jax_answer is not None and np.array_equal(jax_answer, correct), \
    "reverse mode of a nested shard_map fails to lower under check_vma=True"
