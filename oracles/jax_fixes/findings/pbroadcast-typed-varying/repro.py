"""lax.pbroadcast's result is typed varying, and an operand invariant along the axis is refused as "ppermute".

The docs' equivalent is psum(where(axis_index == source, x, 0)): every member ends with the source's value,
so the result is invariant along the axis (out_specs=P() is valid), and an invariant operand is a valid call.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import oracles

# XLA:CPU has no CollectiveBroadcast: this registers one for CPU only; on GPU/TPU the same code runs without it
oracles.install_cpu_lowerings(["pbroadcast"])

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("i",))
typed = []


def body(block):
    out = lax.pbroadcast(block, "i", 1)
    typed.append(jax.typeof(out).mat.varying)
    return out


x = jnp.arange(8.0)
every = jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)
print("every member's result:", np.asarray(every).reshape(4, 2).tolist(), "(all device 1's block)")
print("JAX types the result as varying along", sorted(typed[-1]), "; correct: []")
try:
    kept = jax.shard_map(lambda v: lax.pbroadcast(v, "i", 1), mesh=mesh, in_specs=P(), out_specs=P("i"))(x[:2])
    invariant_operand = np.asarray(kept).tolist()
    print("invariant operand: JAX gives", invariant_operand, "; correct:", np.tile(x[:2], 4).tolist())
except ValueError as error:
    invariant_operand = None
    print("invariant operand: JAX raises ValueError:", " ".join(str(error).split())[:120])
assert not typed[-1] and invariant_operand == np.tile(x[:2], 4).tolist(), (
    "JAX types pbroadcast's result varying and refuses an invariant operand")
