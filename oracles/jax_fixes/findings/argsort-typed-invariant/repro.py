"""jnp.argsort of a device-varying array is typed invariant under shard_map(check_vma=True).

argsort sorts (keys, iota): the iota is invariant, but the varying keys permute it, so each device's
indices differ. JAX types the indices invariant, so out_specs=P() passes its check and silently returns
device 0's order.
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("i",))
x = np.array([3, 1, 2, 0, 1, 2], np.float32)  # device 0 holds [3, 1, 2], device 1 holds [0, 1, 2]

typed = []


def body(block):
    order = jnp.argsort(block)
    typed.append(jax.typeof(order).mat.varying)
    return order


per_device = jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x).reshape(2, 3)
print("per-device orders:", per_device.tolist())  # [[1, 2, 0], [0, 1, 2]]: they differ
print("JAX types the order as varying along", sorted(typed[-1]), "; correct: ['i']")
try:
    replicated = jax.shard_map(jnp.argsort, mesh=mesh, in_specs=P("i"), out_specs=P())(x)
    print("JAX accepts out_specs=P() and returns", replicated.tolist(), "(device 1's order is lost)")
except ValueError as error:
    print("JAX refuses out_specs=P():", str(error).splitlines()[0])

# the same typing makes a gradient silently wrong: invariant values sorted by varying keys (lax.sort_key_val,
# which argsort calls), each device's result mapped; d/dv of sum(w * f(v)) sends each weight to its value
values, weights = np.array([10, 20, 30], np.float32), np.arange(6, dtype=np.float32)
g = jax.shard_map(lambda k, v: lax.sort_key_val(k, v)[1], mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"))
jax_grad = np.asarray(jax.grad(lambda v: (g(x, v) * weights).sum())(values))
correct_grad = np.zeros(3, np.float32)
for d, order in enumerate(per_device):
    np.add.at(correct_grad, order, weights[3 * d:3 * d + 3])
print("gradient: JAX", jax_grad.tolist(), "; correct:", correct_grad.tolist())
assert "i" in typed[-1] and np.array_equal(jax_grad, correct_grad), (
    "JAX types argsort of a varying array invariant: out_specs=P() drops device 1's order, gradients are wrong")
