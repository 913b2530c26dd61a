"""ragged_all_to_all's transpose ignores axis_index_groups (JAX 0.10.2).

Four devices in groups [[0, 1], [2, 3]]; each device has two operand rows and sends row j to group member
j, which writes it at the row of the sender's position in the group: within each group the op transposes a
2 x 2 block, f([1, 2, 3, 4, 5, 6, 7, 8]) = [1, 3, 2, 4, 5, 7, 6, 8]. Its transpose is the same exchange.
JAX's rule exchanges the offsets with all_to_all over the whole axis, without the groups, which fails here
(two slots are not divisible by the axis size 4) and gives wrong cotangents where it happens to divide. The
correct answer is computed without JAX's transpose rule, as J^T ct with J the forward-mode Jacobian.
"""

# ruff: noqa: E402  (XLA_FLAGS must be set before jax is imported)

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import oracles

# XLA:CPU cannot compile ragged_all_to_all; this registers a CPU lowering (not needed on GPU/TPU, where the
# same code runs as it is). JAX's transpose rule, the subject here, is untouched.
oracles.install_cpu_lowerings()

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
groups = [[0, 1], [2, 3]]
position = np.array([0, 1, 0, 1])  # each device's place in its group
index = [jnp.array(v, jnp.int32) for v in (np.tile([0, 1], 4), np.ones(8), np.repeat(position, 2), np.ones(8))]
f = jax.jit(jax.shard_map(
    lambda op, out, *idx: lax.ragged_all_to_all(op, out, *idx, axis_name="x", axis_index_groups=groups),
    mesh=mesh, in_specs=P("x"), out_specs=P("x")))
operand, output, ct = jnp.arange(1.0, 9.0), jnp.zeros(8), jnp.arange(1.0, 9.0)

try:
    got = np.asarray(jax.vjp(lambda op: f(op, output, *index), operand)[1](ct)[0])
except ValueError as error:
    got = f"ValueError: {error}"
columns = [jax.jvp(lambda op: f(op, output, *index), (operand,), (e,))[1] for e in jnp.eye(8)]
want = np.asarray(jnp.stack(columns, axis=1).T @ ct)  # J^T ct, J[:, k] = d f / d operand[k]

print("forward:", np.asarray(f(operand, output, *index)))
print("JAX's cotangent of operand:", got)
print("correct (J^T ct):          ", want)
assert not isinstance(got, str) and np.array_equal(got, want), f"JAX's cotangent of operand is not J^T ct: {got}"
