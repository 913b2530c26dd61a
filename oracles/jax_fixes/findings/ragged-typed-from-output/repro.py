"""ragged_all_to_all's result is typed from `output` alone (JAX 0.10.2, check_vma=True).

Four devices on axis i; each device sends its operand row j to device j, which writes it at the sender's
row of a zeros(4) buffer made inside the body (invariant along i). The result holds rows received from the
other devices, so it varies along i: device d gets [op_0[d], op_1[d], op_2[d], op_3[d]], and out_specs=P()
(a value replicated over i) must be refused, as the design note's rule for collectives that move data
between devices says. JAX types the result as `output` (invariant), accepts out_specs=P() and returns
device 0's rows only; for the same reason jax.vjp through the program with out_specs=P('i') sums every
device's cotangent (the pvary JAX inserts for the invariant result transposes to a psum).
"""

# ruff: noqa: E402  (XLA_FLAGS must be set before jax is imported)

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import oracles

# XLA:CPU cannot compile ragged_all_to_all; this registers a CPU lowering (not needed on GPU/TPU, where the
# same code runs as it is). JAX's abstract evaluation, the subject here, is untouched.
oracles.install_cpu_lowerings()

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
index = [jnp.array(v, jnp.int32) for v in (np.tile(np.arange(4), 4), np.ones(16), np.repeat(np.arange(4), 4),
                                           np.ones(16))]


def body(op, *idx):
    return lax.ragged_all_to_all(op, jnp.zeros(4), *idx, axis_name="i")


operand, ct = jnp.arange(16.0), jnp.arange(16.0)
f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
print("the result on each device:", np.asarray(f(operand, *index)).reshape(4, 4).tolist())
try:
    replicated = jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P())(operand, *index)
    typed = f"accepted: typed invariant, out_specs=P() returns {np.asarray(replicated).tolist()}"
except ValueError as error:
    typed = "refused: " + str(error).splitlines()[0]
print("JAX, out_specs=P():", typed)
print("correct:            refused (the result varies along 'i')")

got = np.asarray(jax.vjp(lambda op: f(op, *index), operand)[1](ct)[0])
tangent = jax.jit(lambda e: jax.jvp(lambda op: f(op, *index), (operand,), (e,))[1])
want = np.asarray(jnp.stack([tangent(e) for e in jnp.eye(16)], axis=1).T @ ct)  # J^T ct
print("JAX's cotangent of operand (out_specs=P('i')):", got.tolist())
print("correct (J^T ct):                             ", want.tolist())
assert typed.startswith("refused") and np.array_equal(got, want), (
    f"JAX typed a result that varies along 'i' invariant ({typed}); its cotangent {got.tolist()}")
