"""lax.while_loop whose predicate varies across devices is typed from the carry alone: a silent wrong answer.

Stock JAX 0.10.2 on 2 CPU devices; the same code runs unchanged on GPU/TPU with 2 devices.
"""

import os

os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip()

import jax
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("i",))
steps = np.array([1, 3], np.int32)                   # device 0 loops once, device 1 three times
x = np.array([1.0, 1.0], np.float32)


def body(n, v):
    return lax.while_loop(lambda c: c[0] < n[0], lambda c: (c[0] + 1, c[1] * 2), (0, v))[1]


print("each device's result:", [(x * 2 ** int(k)).tolist() for k in steps], "(varies along 'i')")
claimed = jax.shard_map(body, mesh=mesh, in_specs=(P("i"), P()), out_specs=P())
try:
    answer = np.asarray(claimed(steps, x))
except Exception as error:  # the result typed varying: out_specs=P() refused, as it must be
    print("JAX refuses out_specs=P():", type(error).__name__, str(error).splitlines()[0][:120])
    answer = None
else:
    print("JAX accepts out_specs=P() and returns", answer.tolist(), "for both devices")
assert answer is None, \
    "lax.while_loop with a trip count varying along 'i' is typed invariant: one device's value returned"
