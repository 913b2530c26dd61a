"""The programs FINDINGS.md pins for findings 18, 19 and 20, run in JAX with their fixes installed.

`python tests/jax_fixes_vmap_permute_child.py [ID ...]` runs with 8 CPU devices, installs the fixes named
(default: every one of `oracles.jax_fixes._vmap_permute.FIXES`) and prints one JSON object: the fixes
installed and, for each program, `["ok", answer]` or `["error", kind, message]`. Answers are JAX's, as nested
lists; the test (`test_jax_fixes_vmap_permute.py`) judges them without jax.
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
from jax.sharding import PartitionSpec as P  # noqa: E402

import oracles  # noqa: E402
from oracles.jax_fixes import _vmap_permute  # noqa: E402


def mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> jax.sharding.Mesh:
    return jax.sharding.Mesh(np.array(jax.devices()[:int(np.prod(shape))]).reshape(shape), names)


def answer(f: Callable[..., Any], *args: Any) -> list:
    try:
        return ["ok", np.asarray(f(*args)).tolist()]
    except Exception as error:  # a refusal is an answer too
        return ["error", type(error).__name__, str(error).splitlines()[0] if str(error) else ""]


def pbroadcast() -> dict[str, Any]:
    """Finding 20's program, the same inside a shard_map over 8 devices (source 2 of a 'y' of 3), and an
    operand the vmap does not batch."""
    x = jnp.array([1.0, 2.0])
    inner = jax.vmap(lambda v: lax.pbroadcast(v, "y", 2), in_axes=1, out_axes=1, axis_name="y")
    mapped = jax.jit(jax.shard_map(inner, mesh=mesh((8,), ("x",)), in_specs=P("x"), out_specs=P("x"),
                                   check_vma=False))
    return {
        "pbroadcast: vmap": answer(jax.vmap(lambda v: lax.pbroadcast(v, "y", 0), axis_name="y"), x),
        "pbroadcast: shard_map": answer(mapped, jnp.arange(48.0).reshape(16, 3)),
        "pbroadcast: unbatched": answer(
            jax.vmap(lambda v: lax.pbroadcast(v, "y", 1), in_axes=None, axis_size=3, axis_name="y"), x),
    }


def partial_perm() -> dict[str, Any]:
    """Finding 19's program, a partial perm of a 'y' of 3 (batch axis 1) with the same call over a mesh axis of
    3 devices, one of an operand the vmap does not batch, and a full perm (right before)."""
    x = jnp.arange(6.0).reshape(2, 3)
    perm = [(0, 2), (2, 1)]
    on_mesh = jax.jit(jax.shard_map(lambda b: lax.ppermute(b, "y", perm), mesh=mesh((3,), ("y",)),
                                    in_specs=P(None, "y"), out_specs=P(None, "y")))
    return {
        "ppermute partial: vmap": answer(jax.vmap(lambda v: lax.ppermute(v, "y", [(0, 1)]), axis_name="y"),
                                         jnp.array([1.0, 2.0])),
        "ppermute partial: vmap axis 1": answer(
            jax.vmap(lambda v: lax.ppermute(v, "y", perm), in_axes=1, out_axes=1, axis_name="y"), x),
        "ppermute partial: on a mesh": answer(on_mesh, x),
        "ppermute partial: unbatched": answer(
            jax.vmap(lambda v: lax.ppermute(v, "y", [(0, 2)]), in_axes=None, axis_size=3, axis_name="y"),
            jnp.array([1.0, 2.0])),
        "ppermute partial: full perm": answer(
            jax.vmap(lambda v: lax.ppermute(v, "y", [(0, 1), (1, 2), (2, 0)]), axis_name="y"), jnp.arange(3.0)),
    }


TUPLE_PERMS = {"full": [(0, 5), (5, 2), (2, 7), (7, 1), (1, 4), (4, 6), (6, 3), (3, 0)],
               "partial": [(6, 0), (0, 3), (5, 1)], "negative": [(-8, 5), (5, -1)]}


def tuple_of_axes() -> dict[str, Any]:
    """Finding 18's program (and the same call with 'y' a mesh axis), then ppermute over ('x', 'y') and
    ('y', 'x') with 'x' a mesh axis of 4 and 'y' a vmap axis of 2, full and partial perms, batched and not."""
    answers = {}
    swap = jax.vmap(lambda v: lax.ppermute(v, ("x", "y"), [(0, 1), (1, 0)]), axis_name="y")
    pinned = jax.jit(jax.shard_map(lambda b: swap(b[0])[None], mesh=mesh((2,), ("x",)), in_specs=P("x"),
                                   out_specs=P("x"), check_vma=False))
    answers["ppermute tuple: pinned"] = answer(pinned, jnp.arange(4.0).reshape(2, 2))
    x = jnp.arange(24.0).reshape(4, 2, 3)  # x[i, j]: the member at x = i, y = j
    for names in [("x", "y"), ("y", "x")]:
        for kind, perm in TUPLE_PERMS.items():
            inner = jax.vmap(lambda v, names=names, perm=perm: lax.ppermute(v, names, perm), axis_name="y")
            f = jax.jit(jax.shard_map(lambda b, inner=inner: inner(b[0])[None], mesh=mesh((4,), ("x",)),
                                      in_specs=P("x"), out_specs=P("x"), check_vma=False))
            answers[f"ppermute tuple: {''.join(names)} {kind}"] = answer(f, x)
        unbatched = jax.vmap(lambda v, names=names: lax.ppermute(v, names, TUPLE_PERMS["partial"]), in_axes=None,
                             axis_size=2, axis_name="y")
        g = jax.jit(jax.shard_map(lambda b, unbatched=unbatched: unbatched(b[0])[None], mesh=mesh((4,), ("x",)),
                                  in_specs=P("x"), out_specs=P("x"), check_vma=False))
        answers[f"ppermute tuple: {''.join(names)} unbatched"] = answer(g, x[:, 0])
    on_mesh = jax.jit(jax.shard_map(lambda b: lax.ppermute(b, ("x", "y"), TUPLE_PERMS["full"]),
                                    mesh=mesh((4, 2), ("x", "y")), in_specs=P("x", "y"), out_specs=P("x", "y"),
                                    check_vma=False))
    answers["ppermute tuple: xy full on a mesh"] = answer(on_mesh, x)
    return answers


PROGRAMS = [pbroadcast, partial_perm, tuple_of_axes]


def main() -> None:
    names = sys.argv[1:] or list(_vmap_permute.FIXES)
    installed = oracles.install_jax_fixes(names)
    answers: dict[str, Any] = {}
    for program in PROGRAMS:
        answers.update(program())
    print(json.dumps({"installed": list(installed), "answers": answers}))


if __name__ == "__main__":
    main()
