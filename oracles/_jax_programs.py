"""Worker side of small generated programs: their JAX types (`{V:...}` of each output) and transposes.

A program is plain data, the same for the simulator and for JAX: `inputs` (one PartitionSpec tuple per
argument), `steps` (`(op, argument indices, params)`, each appending one value) and `outputs`
(`(value index, PartitionSpec tuple)`), and optionally `check_vma` (default True). Every value has the
local shape of the inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec


def _perm(mesh: Mesh, axis: str, shift: int) -> list[tuple[int, int]]:
    n = mesh.shape[axis]
    return [(i, (i + shift) % n) for i in range(n)]


def _step(mesh: Mesh, op: str, args: list, params: dict) -> Any:
    """One step of a generated program, written with jax.numpy and jax.lax."""
    a = args[0] if args else None
    axis = params.get("axis")
    steps: dict[str, Callable[[], Any]] = {
        "add": lambda: a + args[1],
        "mul": lambda: a * args[1],
        "neg": lambda: -a,
        "scale": lambda: a * 2.0,
        "psum": lambda: lax.psum(a, axis),
        "pmax": lambda: lax.pmax(a, axis),
        "ppermute": lambda: lax.ppermute(a, axis, _perm(mesh, axis, params["shift"])),
        "all_to_all": lambda: lax.all_to_all(a, axis, 0, 0, tiled=True),
        "pvary": lambda: lax.pcast(a, axis, to="varying"),
        "all_gather": lambda: lax.all_gather(a, axis, tiled=True)[: a.shape[0]],
        "psum_scatter": lambda: lax.all_gather(lax.psum_scatter(a, axis, tiled=True), axis, tiled=True),
        "axis_index": lambda: a + lax.axis_index(axis).astype(a.dtype),
    }
    return steps[op]()


def _function(mesh: Mesh, program: dict) -> Callable:
    def body(*inputs: Any) -> tuple:
        values = list(inputs)
        for op, arg_indices, params in program["steps"]:
            values.append(_step(mesh, op, [values[i] for i in arg_indices], params))
        return tuple(values[i] for i, _ in program["outputs"])

    in_specs = tuple(PartitionSpec(*s) for s in program["inputs"])
    out_specs = tuple(PartitionSpec(*s) for _, s in program["outputs"])
    return jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=program.get("check_vma", True))


def program_types(mesh: Mesh, program: dict, shapes: list[tuple[int, ...]]) -> tuple[Any, ...]:
    """('ok', [sorted vma of each output]) from `jax.make_jaxpr`, or ('rejected', message)."""
    avals = [jax.ShapeDtypeStruct(s, np.float32) for s in shapes]
    try:
        closed = jax.make_jaxpr(_function(mesh, program))(*avals)
    except Exception as error:  # JAX's verdict on the program is the answer, whatever its type
        return ("rejected", f"{type(error).__name__}: {error}")
    inner = closed.jaxpr.eqns[0].params["jaxpr"]
    # the {V:...} of a type lives in its manual axis type (`aval.mat.varying`) in jax 0.10
    return ("ok", [sorted(v.aval.mat.varying) for v in inner.outvars])


def program_transpose(mesh: Mesh, program: dict, primals: list[np.ndarray], cotangents: list[np.ndarray]
                      ) -> list[np.ndarray]:
    """`jax.linear_transpose` of the program at `primals`, applied to `cotangents` (global arrays)."""
    f = _function(mesh, program)
    transposed = jax.linear_transpose(f, *primals)
    return [np.asarray(x) for x in jax.jit(transposed)(tuple(cotangents))]
