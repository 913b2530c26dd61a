"""A lowering that fails verification in a nested shard_map, with `oracles.serial_mlir_verification()` installed.

`python tests/serial_verify_child.py lower|compare` (2 CPU devices) takes the reverse mode of a ragged_all_to_all
inside a shard_map nested in another (FINDINGS.md 24's fault, under `jax.vjp`), which stock JAX 0.10.2 either
refuses to lower or, in some processes, hangs on for good (`oracles._serial_verify`). `lower` installs the guard
and lowers it with `jax.jit`; `compare` hands it to `oracles.compare_jax`, whose bridge installs the guard as it
loads. It prints one JSON line: whether this process's first call of the guard installed it, whether a second
was refused, and how the work ended ("done", or the exception's type and first two lines).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import oracles

MODE = sys.argv[1]
if MODE == "lower":
    first, again = oracles.serial_mlir_verification(), oracles.serial_mlir_verification()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


def nested():
    """ragged_all_to_all over 'x' (size 1) in a shard_map manual over 'x', inside one manual over 'y' (size 2)."""
    def inner(*blocks):
        operand, output, *steer = (b.reshape(b.shape[2:]) for b in blocks)
        return jax.lax.ragged_all_to_all(operand, output, *steer, axis_name="x")[None, None]

    def outer(*blocks):
        return jax.shard_map(inner, mesh=jax.sharding.get_abstract_mesh(), in_specs=(P("x", None),) * 6,
                             out_specs=P("x", None), axis_names=frozenset({"x"}))(*blocks)

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]).reshape(1, 2), ("x", "y"))
    return jax.shard_map(outer, mesh=mesh, in_specs=(P(None, "y"),) * 6, out_specs=P(None, "y"),
                         axis_names=frozenset({"y"}))


operand = jnp.asarray([4.0, 2.0], jnp.bfloat16).reshape(1, 2, 1)
output = jnp.asarray([3.0, 2.0], jnp.bfloat16).reshape(1, 2, 1)
zeros = jnp.zeros((1, 2, 1), jnp.int32)
f = lambda operand, output: nested()(operand, output, zeros, zeros, zeros, zeros)
backward = jax.jit(lambda a, b: jax.vjp(f, a, b)[1](jnp.ones((1, 2, 1), jnp.bfloat16)))
try:
    if MODE == "lower":
        backward.lower(operand, output)
    else:
        oracles.install_cpu_ragged_all_to_all()
        oracles.compare_jax(backward, operand, output)
    ended = "done"
except Exception as error:  # what is pinned is the exception
    ended = f"raised {type(error).__name__}: " + " ".join(line.strip() for line in str(error).splitlines()[:2])
if MODE == "compare":  # the bridge installed the guard: a first call of this process's own is refused
    first, again = not oracles.serial_mlir_verification(), oracles.serial_mlir_verification()
print(json.dumps({"installed": first, "again": again, "ended": ended}))
