"""The transpose of all_gather_invariant under check_vma=False keeps only each device's own cotangent.

Untyped, each device's output has its own cotangent (out_specs=P("i")); f(x) = [x0, x1, x0, x1], so the
cotangent of x at ct = [1, 2, 3, 4] is [1 + 3, 2 + 4]. JAX slices each device's own cotangent instead of
summing them (the rule assumes the typed invariant result, one cotangent on every device).
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.lax import parallel
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("i",))
f = jax.shard_map(lambda x: parallel.all_gather_invariant(x, "i", tiled=True), mesh=mesh, in_specs=P("i"),
                  out_specs=P("i"), check_vma=False)
x, ct = jnp.array([1.0, 2.0]), jnp.array([1.0, 2.0, 3.0, 4.0])
jax_answer = np.asarray(jax.vjp(f, x)[1](ct)[0])
correct = np.array([1.0 + 3.0, 2.0 + 4.0])
print("f(x):   ", np.asarray(f(x)).tolist())
print("JAX:    ", jax_answer.tolist())
print("correct:", correct.tolist())
# the adjoint identity <ct, f(x)> == <T(ct), x> holds for the correct answer only
print("<ct, f(x)> =", float(jnp.vdot(ct, f(x))), "; <T(ct), x> =", float(jnp.vdot(jax_answer, x)))
assert np.array_equal(jax_answer, correct), "all_gather_invariant's transpose under check_vma=False is wrong"
