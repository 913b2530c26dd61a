"""The programs FINDINGS.md pins for findings 17 and 22 (and their neighbours), run in JAX with their fixes installed.

`python tests/jax_fixes_vmap_axes_child.py [ID ...]` runs with 8 CPU devices, installs the fixes named (default:
every one of `oracles.jax_fixes._vmap_axes.FIXES`) and prints one JSON object: `installed`, the ids installed,
and `answers`, for each program `["ok", answer]` or `["error", kind, message]`. Answers are JAX's, as nested
lists; the test (`test_jax_fixes_vmap_axes.py`) judges them without jax.
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
from oracles.jax_fixes import _vmap_axes  # noqa: E402

MESH = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))


def answer(f: Callable[..., Any], *args: Any) -> list:
    try:
        return ["ok", np.asarray(f(*args)).tolist()]
    except Exception as error:  # a refusal is an answer to judge
        return ["error", type(error).__name__, str(error).splitlines()[0] if str(error) else ""]


def over_y(fn: Callable[..., Any], batched: bool) -> Callable[..., Any]:
    """`fn` vmapped with axis name 'y' (size 3) inside a checked shard_map over 'x' (2 devices), jitted: an
    unbatched operand of shape (2,) split along 'x', or a batched one of shape (3, n) split along its columns."""
    body = jax.vmap(fn, in_axes=0 if batched else None, axis_size=3, axis_name="y")
    spec = P(None, "x") if batched else P("x")
    return jax.jit(jax.shard_map(body, mesh=MESH, in_specs=spec, out_specs=P(None, "x")))


def typed_as_mesh_axis() -> dict[str, Any]:
    """Finding 17's pinned program (psum over 'y' of an unbatched operand), and collectives over 'y' of a
    batched one."""
    x = jnp.array([1.0, 2.0])
    rows = jnp.arange(6.0).reshape(3, 2)
    wide = jnp.arange(18.0).reshape(3, 6)
    return {
        "psum unbatched": answer(over_y(lambda v: lax.psum(v, "y"), False), x),
        "psum unbatched over x, y": answer(over_y(lambda v: lax.psum(v, ("x", "y")), False), x),
        "psum batched": answer(over_y(lambda v: lax.psum(v, "y"), True), rows),
        "psum batched over x, y": answer(over_y(lambda v: lax.psum(v, ("x", "y")), True), rows),
        "all_gather batched": answer(over_y(lambda v: lax.all_gather(v, "y"), True), rows),
        "ppermute batched": answer(over_y(lambda v: lax.ppermute(v, "y", [(0, 1), (1, 2), (2, 0)]), True), rows),
        "psum_scatter batched": answer(over_y(lambda v: lax.psum_scatter(v, "y", tiled=True), True), wide),
        "all_to_all batched": answer(over_y(lambda v: lax.all_to_all(v, "y", 0, 0, tiled=True), True), wide),
        "pmax batched": answer(over_y(lambda v: lax.pmax(v, "y"), True), rows),
        "pmin batched": answer(over_y(lambda v: lax.pmin(v, "y"), True), rows),
    }


def pair(b: Any) -> Any:
    token = lax.psend(b, "x", [(0, 1), (1, 0)])
    return lax.precv(token, jax.ShapeDtypeStruct(b.shape, b.dtype), "x", [(0, 1), (1, 0)])


def shape_of(f: Callable[..., Any]) -> Callable[..., Any]:
    """`f`'s result shape, traced (`jax.eval_shape`)."""
    return lambda v: jax.eval_shape(f, v).shape


def psend_precv() -> dict[str, Any]:
    """Finding 22's pinned program (vmap of a psend/precv pair in a shard_map, traced: XLA:CPU has no Send or
    Recv), checked and unchecked, its operand batched at 0, at 1 or not at all; the shapes psend sends and
    precv receives; the pair over the vmap axis itself."""
    found: dict[str, Any] = {}
    for check_vma in (True, False):
        piped = jax.shard_map(pair, mesh=MESH, in_specs=P("x"), out_specs=P("x"), check_vma=check_vma)
        found[f"per batch {check_vma}"] = answer(shape_of(piped), jnp.ones(4))
        for in_axes, shape in ((0, (3, 4)), (1, (4, 3)), (None, (4,))):
            found[f"vmap {in_axes} {check_vma}"] = answer(shape_of(jax.vmap(piped, in_axes=in_axes, axis_size=3)),
                                                          jnp.ones(shape))
    piped = jax.shard_map(pair, mesh=MESH, in_specs=P("x"), out_specs=P("x"))
    body = jax.make_jaxpr(jax.vmap(piped, in_axes=1))(jnp.ones((4, 3))).jaxpr.eqns[0].params["jaxpr"]
    send, recv = (next(e for e in body.eqns if e.primitive.name == name) for name in ("psend", "precv"))
    found["sent and received"] = ["ok", [list(send.invars[0].aval.shape), list(recv.params["out_shape"].shape)]]
    found["over the vmap axis"] = answer(
        jax.vmap(lambda v: lax.precv(lax.psend(v, "y", [(0, 1), (1, 0)]), jax.ShapeDtypeStruct((), v.dtype), "y",
                                     [(0, 1), (1, 0)]), axis_name="y"), jnp.ones(2))
    return found


PROGRAMS: dict[str, Callable[[], dict[str, Any]]] = {
    "vmap-axis-typed-as-mesh-axis": typed_as_mesh_axis,
    "vmap-psend-precv": psend_precv,
}


def main(names: list[str]) -> None:
    installed = oracles.install_jax_fixes(names or list(_vmap_axes.FIXES))
    answers: dict[str, Any] = {}
    for name in installed:
        answers.update({f"{name}: {key}": value for key, value in PROGRAMS[name]().items()})
    print(json.dumps({"installed": list(installed), "answers": answers}))


if __name__ == "__main__":
    main(sys.argv[1:])
