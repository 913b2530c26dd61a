"""A JAX user's process for tests/test_cpu_ragged.py: installs the CPU ragged lowering, then runs batches.

Started as `python tests/cpu_ragged_child.py`; it calls `oracles.install_cpu_ragged_all_to_all()` before
jax is imported (as a user's script would), asks for 8 CPU devices, then answers requests on stdin in the
`oracles._protocol` format until stdin closes. A request is a list of jobs; the reply lists one
("ok", per-call results) or ("error", kind, message) per job. A job is several calls on one mesh, run as
unmodified user code in one `jax.jit(jax.shard_map(...))` on a classic `Mesh` (one compile for all of
them), with `check_vma` as given; each call applies `body` to its own arguments, where `body` is:

- "run": `jax.lax.ragged_all_to_all(*args, **params)`;
- "vjp": `jax.vjp` of it in (operand, output) at the given cotangent (`args[6]`), both cotangents back;
- "grad": `jax.grad` of `vdot(ragged_all_to_all(...), weights)` in (operand, output);
- "vmap": `jax.vmap` of it over a leading batch axis of every argument;
- "vmap_data": `jax.vmap` of it over a leading batch axis of operand and output, the index arrays shared.

A job may carry "one_shot_bytes", run with `_cpu_ragged_rule.ONE_SHOT_BYTES` set to it (0: every call in
rounds), and "lowered": true, answered with the program's StableHLO text instead of running it.
A job {"kind": "mutant", "name": ...} swaps the lowering for a deliberately wrong one (and clears JAX's
caches), so the tests can watch the comparison catch it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()
os.environ["JAX_PLATFORMS"] = "cpu"

import oracles

INSTALLED = oracles.install_cpu_ragged_all_to_all()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.interpreters import mlir  # noqa: E402
from jax.sharding import Mesh, PartitionSpec  # noqa: E402
from jax_child import guarded, serve  # noqa: E402

from oracles import _cpu_ragged_rule  # noqa: E402

jax.config.update("jax_enable_x64", True)
DEFAULT_ONE_SHOT_BYTES = _cpu_ragged_rule.ONE_SHOT_BYTES


def _ragged(params: dict[str, Any]) -> Callable[..., jax.Array]:
    return lambda *a: jax.lax.ragged_all_to_all(*a, **params)


def _body(kind: str, params: dict[str, Any]) -> Callable[..., Any]:
    """The per-device function of a job, on the device's own blocks."""
    ragged = _ragged(params)
    if kind == "run":
        return ragged
    if kind == "vjp":
        def vjp(operand, output, *rest):
            *index, cotangent = rest
            return jax.vjp(lambda a, b: ragged(a, b, *index), operand, output)[1](cotangent)
        return vjp
    if kind == "grad":
        def grad(operand, output, *rest):
            *index, weights = rest
            return jax.grad(lambda a, b: jnp.vdot(ragged(a, b, *index), weights), argnums=(0, 1))(operand, output)
        return grad
    if kind == "vmap":
        return jax.vmap(ragged)
    if kind == "vmap_data":
        return jax.vmap(ragged, in_axes=(0, 0, None, None, None, None))
    raise ValueError(f"kind={kind!r} must be run, vjp, grad, vmap or vmap_data")


def run_job(job: dict[str, Any]) -> tuple[Any, ...]:
    """One job: several calls on one mesh, compiled as one program (one compile for the lot). Per-device
    arguments are stacked on a new leading axis sharded over every mesh axis."""
    mesh_shape = job["mesh_shape"]
    devices = np.array(jax.devices()[:int(np.prod(list(mesh_shape.values())))]).reshape(tuple(mesh_shape.values()))
    mesh = Mesh(devices, tuple(mesh_shape))
    spec = PartitionSpec(tuple(mesh_shape))
    bodies = [_body(job["kind"], params) for params in job["params"]]
    counts = [len(args) for args in job["args"]]

    def per_device(*stacked: jax.Array) -> Any:
        blocks, results = [x[0] for x in stacked], []
        for body, start, count in zip(bodies, np.cumsum([0, *counts]), counts):
            results.append(body(*blocks[start:start + count]))
        return jax.tree.map(lambda y: y[None], results)

    mapped = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=spec, out_specs=spec,
                                   check_vma=job["check_vma"]))
    stacked = [np.stack(per_device) for args in job["args"] for per_device in args]
    if job.get("lowered"):
        return ("ok", mapped.lower(*stacked).as_text())
    return ("ok", jax.tree.map(lambda y: list(np.asarray(y)), mapped(*stacked)))


def one_shot_bytes(value: int) -> None:
    """Set the lowering's one-shot limit; JAX's caches are cleared when it changes, so the next call lowers
    again under it."""
    if value != _cpu_ragged_rule.ONE_SHOT_BYTES:
        _cpu_ragged_rule.ONE_SHOT_BYTES = value
        jax.clear_caches()


MUTANTS: dict[str, Callable[..., jax.Array]] = {
    # every slice written one row short
    "short": lambda *a, **p: _cpu_ragged_rule.decomposition(*a[:5], a[5] - 1, **p),
    # the groups forgotten: the offsets and rows exchanged over the whole axis
    "ungrouped": lambda *a, **p: _cpu_ragged_rule.decomposition(*a, axis_name=p["axis_name"],
                                                                 axis_index_groups=None),
}


def answer(job: dict[str, Any]) -> tuple[Any, ...]:
    """The reply to one job; JAX's exceptions become ("error", kind, message)."""
    if job["kind"] == "mutant":
        mutant = MUTANTS[job["name"]]
        mlir.register_lowering(_cpu_ragged_rule.PRIMITIVE, mlir.lower_fun(mutant, multiple_results=False),
                               platform="cpu")
        jax.clear_caches()
        return ("ok", job["name"])
    one_shot_bytes(job.get("one_shot_bytes", DEFAULT_ONE_SHOT_BYTES))
    return guarded(run_job, job)


def main() -> None:
    """Announce readiness, then answer batches until stdin closes."""
    serve(answer, {"installed": INSTALLED, "devices": len(jax.devices())})


if __name__ == "__main__":
    main()
