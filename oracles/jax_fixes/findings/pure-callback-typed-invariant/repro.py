"""jax.pure_callback of arguments that vary across devices is typed invariant: out_specs=P() passes, silently wrong.

Stock JAX 0.10.2 on 2 CPU devices; the same code runs unchanged on GPU/TPU with 2 devices.
"""

import os

os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip()

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("i",))
x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)      # device 0 holds [1, 2], device 1 [3, 4]


def body(v):
    return jax.pure_callback(lambda u: np.asarray(u * 2), jax.ShapeDtypeStruct(v.shape, v.dtype), v)


print("each device's result:", [(x[:2] * 2).tolist(), (x[2:] * 2).tolist()], "(varies along 'i')")
claimed = jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P())
try:
    answer = np.asarray(claimed(x))
except Exception as error:  # the result typed varying: out_specs=P() refused, as it must be
    print("JAX refuses out_specs=P():", type(error).__name__, str(error).splitlines()[0][:120])
    answer = None
else:
    print("JAX accepts out_specs=P() and returns", answer.tolist(), "for both devices")
assert answer is None, "pure_callback of an argument varying along 'i' is typed invariant: one device's value returned"
