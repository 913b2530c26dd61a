"""A JAX user's process for tests/test_cpu_lowerings.py: CPU lowerings installed (or not), then batches.

Started as `python tests/cpu_lowerings_child.py [--no-install]`: unless told not to, it calls
`oracles.install_cpu_lowerings()` before jax is imported (as a user's script would), asks for 8 CPU
devices, then answers requests on stdin in the `oracles._protocol` format until stdin closes. A request is
a list of jobs; the reply lists one ("ok", result) or ("error", kind, message) per job.

A job {"kind", "mesh_shape", "check_vma", "calls"} runs every call (a dict with "axis_name", "source" and
"args", one array per device in row-major mesh order) in one `jax.jit(jax.shard_map(...))` on a classic
`Mesh` of those devices (one compile for the lot) and answers, per call, one array per device of:

- "run": `jax.lax.pbroadcast(x, axis_name, source)`;
- "documented": the docs' `psum(where(axis_index(axis_name) == source, x, 0), axis_name)`;
- "vjp": the cotangent `jax.vjp` of pbroadcast returns for `args[1]`, for scalar blocks;
- "grad": `jax.grad` of `pbroadcast(x) * weight` (weight `args[1]`), for scalar blocks;
- "vmap": `jax.vmap` of pbroadcast over the leading axis of each device's block;
- "tree": pbroadcast of the list of the call's arguments (a pytree), the list of results;
- "invariant": pbroadcast of an operand invariant along the mesh (ones), plus x;
- "typeof": pbroadcast, answered with the type JAX gives its result (`str(jax.typeof(...))`) per call.

Other jobs: {"kind": "mutant"} installs a lowering with the source off by one (and clears JAX's caches);
{"kind": "survey"} runs every collective of `jax.lax` (and the async and unreduced forms JAX keeps in
`jax._src.lax.parallel`) on {'i': 4}, check_vma on and off, and answers {name: {check_vma: "ok" or the
error's type and first line}}; {"kind": "install"} installs and clears the caches, answering what was
newly installed; {"kind": "send_recv"} registers HLO Send and Recv as the CPU lowerings of psend and precv
and answers what XLA:CPU says to each.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()
os.environ["JAX_PLATFORMS"] = "cpu"

import oracles

INSTALLED = () if "--no-install" in sys.argv else oracles.install_cpu_lowerings()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from cpu_lowerings_survey import SURVEY_MESH, survey  # noqa: E402
from jax import lax  # noqa: E402
from jax.interpreters import mlir  # noqa: E402
from jax.sharding import Mesh, PartitionSpec  # noqa: E402
from jax_child import guarded, serve  # noqa: E402

from oracles import _cpu_pbroadcast_rule  # noqa: E402

jax.config.update("jax_enable_x64", True)


def documented(x: jax.Array, axis_name: Any, source: int) -> jax.Array:
    """The docs' definition of pbroadcast (a masked psum)."""
    return lax.psum(jnp.where(lax.axis_index(axis_name) == source, x, jnp.zeros_like(x)), axis_name)


def body(kind: str, axis_name: Any, source: int) -> Any:
    """The per-device function of a call, on the device's own blocks."""
    def pbroadcast(x: jax.Array) -> jax.Array:
        return lax.pbroadcast(x, axis_name, source)

    if kind == "run":
        return pbroadcast
    if kind == "documented":
        return lambda x: documented(x, axis_name, source)
    if kind == "vjp":
        return lambda x, cotangent: jax.vjp(pbroadcast, x)[1](cotangent)[0]
    if kind == "grad":
        return lambda x, weight: jax.grad(lambda y: pbroadcast(y) * weight)(x)
    if kind == "vmap":
        return jax.vmap(pbroadcast)
    if kind == "tree":
        return lambda *xs: lax.pbroadcast(list(xs), axis_name, source)
    if kind == "invariant":
        return lambda x: pbroadcast(jnp.ones(x.shape, x.dtype)) + x
    if kind == "typeof":
        return lambda x: TYPES.append(str(jax.typeof(pbroadcast(x)))) or x
    raise ValueError(f"kind={kind!r} must be run, documented, vjp, grad, vmap, tree, invariant or typeof")


TYPES: list[str] = []  # the result types "typeof" calls saw while tracing


def run_job(job: dict[str, Any]) -> tuple[Any, ...]:
    """One job: its calls on one mesh, compiled as one program. Per-device arguments are stacked on a new
    leading axis sharded over every mesh axis."""
    shape = job["mesh_shape"]
    devices = np.array(jax.devices()[:int(np.prod(list(shape.values())))]).reshape(tuple(shape.values()))
    spec = PartitionSpec(tuple(shape))
    calls = job["calls"]
    bodies = [body(job["kind"], call["axis_name"], call["source"]) for call in calls]
    counts = [len(call["args"]) for call in calls]

    def per_device(*stacked: jax.Array) -> Any:
        blocks, results = [x[0] for x in stacked], []
        for fun, start, count in zip(bodies, np.cumsum([0, *counts]), counts):
            results.append(fun(*blocks[start:start + count]))
        return jax.tree.map(lambda y: y[None], results)

    mapped = jax.jit(jax.shard_map(per_device, mesh=Mesh(devices, tuple(shape)), in_specs=spec, out_specs=spec,
                                   check_vma=job["check_vma"]))
    stacked = [np.stack(arg) for call in calls for arg in call["args"]]
    TYPES.clear()
    got = jax.tree.map(lambda y: list(np.asarray(y)), mapped(*stacked))
    return ("ok", list(TYPES) if job["kind"] == "typeof" else got)


def mutant() -> tuple[Any, ...]:
    """Swap the pbroadcast lowering for one whose source is off by one (modulo the group size)."""
    def wrong(x: jax.Array, *, axis_name: Any, source: int) -> jax.Array:
        size = int(np.prod([lax.axis_size(a) for a in _cpu_pbroadcast_rule.names(axis_name)]))
        return _cpu_pbroadcast_rule.decomposition(x, axis_name=axis_name, source=(source + 1) % size)

    mlir.register_lowering(_cpu_pbroadcast_rule.PRIMITIVE, mlir.lower_fun(wrong, multiple_results=False),
                           platform="cpu")
    jax.clear_caches()
    return ("ok", "mutant")


def install() -> tuple[Any, ...]:
    """Install every CPU lowering now (jax already running) and clear JAX's caches."""
    newly = oracles.install_cpu_lowerings()
    jax.clear_caches()
    return ("ok", newly)


def answer(job: dict[str, Any]) -> tuple[Any, ...]:
    """The reply to one job; JAX's exceptions become ("error", kind, message)."""
    return guarded(_answer, job)


def _answer(job: dict[str, Any]) -> tuple[Any, ...]:
    if job["kind"] == "mutant":
        return mutant()
    if job["kind"] == "install":
        return install()
    if job["kind"] == "survey":
        return ("ok", survey(Mesh(np.array(jax.devices()[:SURVEY_MESH]), ("i",))))
    if job["kind"] == "send_recv":
        from cpu_lowerings_survey import send_recv
        return ("ok", send_recv(Mesh(np.array(jax.devices()[:SURVEY_MESH]), ("i",))))
    return run_job(job)


def main() -> None:
    """Announce readiness, then answer batches until stdin closes."""
    serve(answer, {"installed": INSTALLED, "devices": len(jax.devices())})


if __name__ == "__main__":
    main()
