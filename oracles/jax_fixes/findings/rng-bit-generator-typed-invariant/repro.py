"""lax.rng_bit_generator of a key that varies across devices types its bits invariant: out_specs=P() passes.

Each device's bits are a function of its own key, but under shard_map(check_vma=True) JAX types the new key varying
and the bits invariant, so out_specs=P() passes the replication check and returns device 0's bits for both.
Stock JAX 0.10.2 on 2 CPU devices; the same code runs unchanged on GPU/TPU with 2 devices.
"""

import os

os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip()

import jax
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("i",))
keys = np.arange(8, dtype=np.uint32).reshape(2, 4)   # device 0's key [0, 1, 2, 3], device 1's [4, 5, 6, 7]


def bits(k):
    return lax.rng_bit_generator(k[0], (2, 3))[1]


each = jax.jit(jax.shard_map(lambda k: bits(k)[None], mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                             check_vma=False))(keys)
print("each device's bits:", np.asarray(each).tolist(), "(they differ, as the keys do)")
claimed = jax.jit(jax.shard_map(bits, mesh=mesh, in_specs=P("i"), out_specs=P()))
try:
    answer = np.asarray(claimed(keys))
except ValueError as error:  # the bits typed varying: out_specs=P() refused, as it must be
    print("JAX refuses out_specs=P():", str(error).splitlines()[0][:120])
    answer = None
else:
    print("JAX accepts out_specs=P() and returns", answer.tolist(), "for both devices")
assert answer is None, "rng_bit_generator of a key varying along 'i' types its bits invariant: device 0's bits returned"
