"""lax.cond with a predicate that varies across devices is typed invariant: out_specs=P() passes, silently wrong.

Stock JAX 0.10.2 on 2 CPU devices; the same code runs unchanged on GPU/TPU with 2 devices.
"""

import os

os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip()

import jax
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("i",))
pred = np.array([True, False])                       # device 0 takes the true branch, device 1 the false one
a, b = np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)


def body(p, x, y):
    return lax.cond(p[0], lambda: x, lambda: y)


typed = jax.make_jaxpr(jax.shard_map(body, mesh=mesh, in_specs=(P("i"), P(), P()), out_specs=P("i")))(pred, a, b)
print("JAX's jaxpr (the cond's result):", [str(e.outvars[0].aval) for e in typed.eqns[0].params["jaxpr"].eqns
                                           if e.primitive.name == "cond"])
print("each device's result:", [(a if q else b).tolist() for q in pred], "(varies along 'i')")
claimed = jax.shard_map(body, mesh=mesh, in_specs=(P("i"), P(), P()), out_specs=P())
try:
    answer = np.asarray(claimed(pred, a, b))
except Exception as error:  # the result typed varying: out_specs=P() refused, as it must be
    print("JAX refuses out_specs=P():", type(error).__name__, str(error).splitlines()[0][:120])
    answer = None
else:
    print("JAX accepts out_specs=P() and returns", answer.tolist(), "for both devices")
assert answer is None, \
    "lax.cond with a predicate varying along 'i' is typed invariant: out_specs=P() returns one device's value"
