"""lax.precv's result is typed invariant, although each device receives its own value (or zeros).

So out_specs=P() passes JAX's check for a value that differs between devices. XLA:CPU has no Send/Recv, so
this only traces the program (jax.make_jaxpr); on GPU, where psend/precv lower, the same program runs.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("i",))
perm = [(0, 1), (1, 2), (2, 3)]  # each stage sends its block to the next; stage 0 receives zeros
typed = []


def stage(v):
    token = lax.psend(v, "i", perm)
    received = lax.precv(token, jax.ShapeDtypeStruct(v.shape, v.dtype), "i", perm)
    typed.append(jax.typeof(received).mat.varying)
    return received


jax.make_jaxpr(jax.shard_map(stage, mesh=mesh, in_specs=P("i"), out_specs=P("i")))(jnp.ones((8, 2)))
print("JAX types precv's result as varying along", sorted(typed[-1]), "; correct: ['i']")
try:
    jax.make_jaxpr(jax.shard_map(stage, mesh=mesh, in_specs=P("i"), out_specs=P()))(jnp.ones((8, 2)))
    print("JAX accepts out_specs=P() for the received blocks (device 0's zeros, the others' neighbours')")
except ValueError as error:
    print("JAX refuses out_specs=P():", str(error).splitlines()[0])
assert "i" in typed[-1], "JAX types precv's result invariant: out_specs=P() passes for values that differ"
