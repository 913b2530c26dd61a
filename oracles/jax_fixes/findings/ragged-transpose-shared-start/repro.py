"""ragged_all_to_all's transpose with an empty slice that starts where a written slice starts (JAX 0.10.2).

One device; operand [1, 2, 3, 4], output zeros(4); slice 0 sends operand rows 0-1 to output rows 0-1, slice 1
is empty and also starts at output row 0 (it writes nothing; the docs allow it). The result is
[op0, op1, out2, out3], so the cotangent of `output` at ct = ones(4) is [0, 0, 1, 1]: rows 0-1 were
overwritten. The correct answer is computed here without JAX's transpose rule, as J^T ct with J the
forward-mode Jacobian (jax.jvp with each unit tangent of `output`).
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
index = [jnp.array(v, jnp.int32) for v in ([0, 2], [2, 0], [0, 0], [2, 0])]  # in offsets, sizes, out offsets, sizes
f = jax.jit(jax.shard_map(lambda op, out: lax.ragged_all_to_all(op, out, *index, axis_name="x"),
                          mesh=mesh, in_specs=P("x"), out_specs=P("x")))
operand, output, ct = jnp.arange(1.0, 5.0), jnp.zeros(4), jnp.ones(4)

got = np.asarray(jax.vjp(f, operand, output)[1](ct)[1])
columns = [jax.jvp(lambda out: f(operand, out), (output,), (e,))[1] for e in jnp.eye(4)]
want = np.asarray(jnp.stack(columns, axis=1).T @ ct)  # J^T ct, J[:, k] = d f / d output[k]

print("forward:", np.asarray(f(operand, output)))
print("JAX's cotangent of output:", got)
print("correct (J^T ct):         ", want)
assert np.array_equal(got, want), f"JAX's cotangent of output {got} is not J^T ct = {want}"
