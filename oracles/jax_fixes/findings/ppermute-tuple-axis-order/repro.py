"""ppermute over a tuple of mesh axes not in the mesh's order numbers its pairs in the mesh's order.

On a 2 x 2 mesh ('a', 'c'), `axis_index(('c', 'a'))` numbers the devices c-major (device (a, c) is 2c + a), as
`all_gather` over ('c', 'a') orders them. A ring over ('c', 'a') should then move each value from index i to
index i + 1 of that numbering. JAX 0.10.2's lowering sorts each group's device ids first
(`_pcollectives_lowering_common`), so the pairs' indices are read a-major, the mesh's order: the ring over
('c', 'a') runs as a ring over ('a', 'c'), and a program that pairs ppermute with axis_index or all_gather over
the same tuple gets a silent wrong answer.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("a", "c"))
names = ("c", "a")
ring = [(i, (i + 1) % 4) for i in range(4)]


def body(_):
    me = lax.axis_index(names)                     # the tuple's own numbering, c-major
    got = lax.ppermute(me, names, ring)            # the index of whoever sent this device its value
    return (got == (me - 1) % 4)[None]             # the ring's pairs: index i - 1 sends to index i


ok = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(("a", "c")), out_specs=P(("a", "c"))))(np.zeros(4))
print("each device got its predecessor's value (axis_index's numbering):", np.asarray(ok).tolist(),
      "(correct: [True, True, True, True])")
assert np.asarray(ok).all(), "ppermute over ('c', 'a') does not number its pairs as axis_index(('c', 'a')) does"
