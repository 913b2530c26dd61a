"""jax.linear_transpose of lax.pmax over a one-member axis (the identity) has no transpose rule.

The fixture finding of tests/test_jax_reports.py: a reproducer in the format every finding's folder holds.
"""

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:1]), ("i",))
f = jax.shard_map(lambda v: lax.pmax(v, "i"), mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                  check_vma=False)
x = jnp.arange(3.0)
correct = np.array([1.0, 2.0, 3.0])  # on one member pmax is the identity, so its transpose is too
try:
    (answer,) = jax.linear_transpose(f, x)(jnp.array([1.0, 2.0, 3.0]))
except NotImplementedError as error:
    answer = f"{type(error).__name__}: {error}"
print("JAX:    ", answer)
print("correct:", correct)
assert isinstance(answer, jax.Array) and np.array_equal(answer, correct), "pmax over one member is not transposed"
