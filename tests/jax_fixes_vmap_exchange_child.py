"""The programs FINDINGS.md pins for findings 21 and 23, in JAX with the fixes of `oracles.jax_fixes._vmap_exchange`.

`python tests/jax_fixes_vmap_exchange_child.py` runs with 8 CPU devices, installs every fix of
`_vmap_exchange.FIXES` and prints one JSON object: `installed`, the ids installed, and `answers`, for each
program `["ok", answer]` (nested lists) or `["error", kind, message]`. The test
(`test_jax_fixes_vmap_exchange.py`) judges them without jax.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import oracles  # noqa: E402
from oracles.jax_fixes import _vmap_exchange  # noqa: E402


def answer(f: Callable[..., Any], *args: Any) -> list:
    try:
        return ["ok", np.asarray(f(*args)).tolist()]
    except Exception as error:  # a refusal is an answer the test judges
        return ["error", type(error).__name__, str(error).splitlines()[0] if str(error) else ""]


def unbatched(exchange: Callable[[Any], Any], size: int) -> Callable[[Any], Any]:
    """`exchange` over the vmap axis 'y' of `size` members that all hold the one operand."""
    return jax.vmap(exchange, in_axes=None, axis_size=size, axis_name="y")


def all_to_all() -> dict[str, list]:
    """Finding 21's pinned program, and all_to_all / pswapaxes of unbatched operands of rank 2 (tiled, untiled,
    split_axis != concat_axis), each also with the operand batched (`size` copies)."""
    x = jnp.array([1.0, 2.0])
    m = jnp.arange(24.0).reshape(4, 6)
    programs = {
        "all_to_all 0 0 tiled, 2 members": (lambda v: lax.all_to_all(v, "y", 0, 0, tiled=True), 2, x),
        "all_to_all 1 0 tiled, 2 members": (lambda v: lax.all_to_all(v, "y", 1, 0, tiled=True), 2, m),
        "all_to_all 0 1 untiled, 4 members": (lambda v: lax.all_to_all(v, "y", 0, 1), 4, m),
        "pswapaxes 0, 4 members": (lambda v: lax.pswapaxes(v, "y", 0), 4, m),
    }
    answers = {}
    for name, (exchange, size, operand) in programs.items():
        answers[name] = answer(unbatched(exchange, size), operand)
        answers[f"{name}, batched"] = answer(jax.vmap(exchange, axis_name="y"), jnp.stack([operand] * size))
    return answers


def zero_size() -> dict[str, list]:
    """Finding 23's pinned program (an eager shard_map of a (2, 0) array on 2 devices), a jit asking for a sharded
    zero-size result, and a non-empty result of each, with the shapes of each result's shards."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
    copy = jax.shard_map(lambda v: v, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    sharded = jax.jit(lambda v: v + 1, out_shardings=NamedSharding(mesh, P("x")))
    programs = {
        "eager shard_map (2, 0)": (copy, jnp.zeros((2, 0))),
        "eager shard_map (4, 3)": (copy, jnp.ones((4, 3))),
        "jit out_shardings P('x') (4, 0)": (sharded, jnp.zeros((4, 0))),
        "jit out_shardings P('x') (4, 3)": (sharded, jnp.ones((4, 3))),
    }
    answers = {}
    for name, (f, x) in programs.items():
        answers[name] = answer(f, x)
        answers[f"{name} shards"] = answer(lambda v, f=f: [list(s.data.shape) for s in f(v).addressable_shards], x)
    return answers


def main() -> None:
    installed = oracles.install_jax_fixes(list(_vmap_exchange.FIXES))
    print(json.dumps({"installed": list(installed), "answers": {**all_to_all(), **zero_size()}}))


if __name__ == "__main__":
    main()
