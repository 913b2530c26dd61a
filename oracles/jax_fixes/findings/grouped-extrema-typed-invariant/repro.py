"""pmax and pmin with axis_index_groups are typed invariant under check_vma=True: one group's result returned.

On a mesh of 4 devices ('x'), `lax.pmax(a, 'x', axis_index_groups=[[0, 1], [2, 3]])` gives 1 on devices 0 and 1
and 3 on devices 2 and 3. Under check_vma=True JAX types the result invariant along 'x', so out_specs=P()
passes the replication check and JAX returns [1.]: a silent wrong answer. psum and pmean refuse
axis_index_groups under check_vma=True (NotImplementedError); pmax and pmin do not, and type as if the
groups were the whole axis.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("x",))
x = jnp.arange(4.0)
groups = [[0, 1], [2, 3]]
per_device = jax.jit(jax.shard_map(lambda a: lax.pmax(a, "x", axis_index_groups=groups), mesh=mesh,
                                   in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)
print("each device's pmax:", np.asarray(per_device).tolist())  # [1, 1, 3, 3]: the groups differ
claim = jax.shard_map(lambda a: lax.pmax(a, "x", axis_index_groups=groups), mesh=mesh, in_specs=P("x"),
                      out_specs=P())
try:  # a checked shard_map must refuse to call a value that differs between devices replicated
    print("out_specs=P(): JAX returns", np.asarray(jax.jit(claim)(x)).tolist())
    refused = False
except ValueError as error:
    print("out_specs=P(): JAX refuses:", str(error).splitlines()[0])
    refused = True
assert refused, "pmax over axis_index_groups is typed invariant under check_vma=True"
