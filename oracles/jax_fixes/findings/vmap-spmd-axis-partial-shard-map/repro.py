"""jax.vmap with spmd_axis_name of a shard_map over some of the mesh's axes fails.

On a 2 x 4 mesh ('x', 'y'), a shard_map manual over 'y' (axis_names={'y'}, 'x' left to the compiler) doubles
its block. `jax.vmap` of it with `spmd_axis_name='x'` (the vmapped dimension split over 'x') fails: typed,
"Axes mentioned in `manual_axis_type` field of ShapedArray should be of type `Manual`"; untyped
(check_vma=False), the lowering fails verification. The batching rule adds 'x' to the shard_map's specs but
not to its manual axes. The same vmap without spmd_axis_name runs, and gives the answer.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))
f = jax.shard_map(lambda a: a * 2.0, mesh=mesh, in_specs=P("y"), out_specs=P("y"), axis_names={"y"})
xs = np.arange(64.0, dtype=np.float32).reshape(2, 4, 8)
correct = np.asarray(jax.jit(jax.vmap(f))(xs))  # the vmap without spmd_axis_name: each slice doubled
assert np.array_equal(correct, xs * 2.0)
try:
    jax_answer = np.asarray(jax.jit(jax.vmap(f, spmd_axis_name="x"))(xs))
    print("JAX:    ", jax_answer.reshape(-1)[:8].tolist(), "...")
except ValueError as error:
    jax_answer = None
    print("JAX raises ValueError:", str(error).splitlines()[0])
print("correct:", correct.reshape(-1)[:8].tolist(), "...")
assert jax_answer is not None and np.array_equal(jax_answer, correct), \
    "vmap with spmd_axis_name of a shard_map over some mesh axes fails"
