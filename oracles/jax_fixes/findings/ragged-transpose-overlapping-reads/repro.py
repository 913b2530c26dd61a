"""ragged_all_to_all's transpose where two send slices read one operand row (JAX 0.10.2).

The docs constrain where slices are written (the output slices of one receiver must not overlap), not where
they are read: two slices may read the same operand rows (one token sent to two experts). One device;
operand [a, b] = [5, 6], output zeros(2); slices 0 and 1 both read row 0 and write output rows 0 and 1, so
f(operand) = [a, a] and the operand's cotangent at ct = [1, 2] is [1 + 2, 0] = [3, 0]. JAX's rule writes
the returned rows back with a ragged_all_to_all at the input offsets, an overlapping write (undefined by the
docs; XLA:CPU's lowering here keeps the later slot, other backends either), so one of the two is lost. The
correct answer is computed without JAX's transpose rule, as J^T ct with J the forward-mode Jacobian.
"""

# ruff: noqa: E402  (XLA_FLAGS must be set before jax is imported)

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"

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

mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
index = [jnp.array(v, jnp.int32) for v in ([0, 0], [1, 1], [0, 1], [1, 1])]  # in offsets, sizes, out offsets, sizes
f = jax.jit(jax.shard_map(lambda op, out: lax.ragged_all_to_all(op, out, *index, axis_name="x"),
                          mesh=mesh, in_specs=P("x"), out_specs=P("x")))
operand, output, ct = jnp.array([5.0, 6.0]), jnp.zeros(2), jnp.array([1.0, 2.0])

got = np.asarray(jax.vjp(f, operand, output)[1](ct)[0])
columns = [jax.jvp(lambda op: f(op, output), (operand,), (e,))[1] for e in jnp.eye(2)]
want = np.asarray(jnp.stack(columns, axis=1).T @ ct)  # J^T ct, J[:, k] = d f / d operand[k]

print("forward:", np.asarray(f(operand, output)))
print("JAX's cotangent of operand:", got)
print("correct (J^T ct):          ", want)
assert np.array_equal(got, want), f"JAX's cotangent of operand {got} is not J^T ct = {want}"
