"""A vmap axis named like a mesh axis: JAX's batching rules for collectives over the vmapped axis itself.

`jax.vmap(f, axis_name='y')` lets the collectives in `f` run over the batch as over a mesh axis
(`psum(x, 'y')` sums the batch elements). Every batching rule in `jax/_src/lax/parallel.py` has a branch
for it (`_batched_reduction_collective`, `_ppermute_batcher`, `_all_to_all_batched_collective`, ...),
which the positional vmap of `oracles._rules.vmap_problem` never takes. `named_vmap_problem` takes a
generated call on a mesh `{'x': a, 'y': b}` (or `{'x': n}`), turns its last mesh axis into a vmap axis of
the same name (a `jax.shard_map` over the other axis with `jax.vmap(..., axis_name='y')` inside it, or
a plain `jax.vmap` when no axis is left) and checks each device's result against the same call run by JAX
on the real mesh: a vmap axis and a mesh axis of one name must give the same answer.

With `unbatched`, the operands are not batched (`in_axes=None`): every member of the vmap axis holds
the same block, as the mesh program is given it, which takes the rules' branches for an unmapped operand
(`_constant_reduction`: a psum over the vmap axis of an unbatched value is the value times the axis size).

Example: the case psum(x, 'x') on {'x': 4} becomes `jax.vmap(lambda x: lax.psum(x, 'x'),
axis_name='x')(stacked)` on one device, whose 4 rows must equal the 4 devices' sums.

Like `oracles._rules`, this imports jax: only in a process made for it.
"""

from __future__ import annotations

import dataclasses
import traceback
from pathlib import Path
from typing import Any

import jax
import numpy as np

import collectives
from oracles._jax_dispatch import route
from oracles._jax_setup import mesh as jax_mesh
from oracles._rules import Program

# JAX's frames kept in tracebacks: a disagreement names the function of jax/_src that raised (`raised_in`)
jax.config.update("jax_traceback_filtering", "off")

# NotImplementedError texts of the documented refusals of named-axis batching (groups, several axes)
REFUSALS = ("feature request", "axis_index_groups", "only supports a single axis")


def named(case: Any) -> bool:
    """Whether the call can run with its last mesh axis as a vmap axis: its operands are per-device
    arrays (not the invariant operands pvary and pscatter take, not pytrees), and a shard_map is left
    around the vmap where the collective needs one."""
    definition = collectives.definition(case.op)
    # psum_invariant and all_gather_invariant exist only in a shard_map: a 1-D mesh would leave a plain vmap
    typed_only = definition in (collectives.REGISTRY.of(collectives.psum_invariant),
                                collectives.REGISTRY.of(collectives.all_gather_invariant))
    return (not definition.invariant_operand and all(isinstance(per[0], np.ndarray) for per in case.args)
            and not (typed_only and len(case.mesh_shape) == 1))


def _names(case: Any) -> tuple:
    names = case.params["axis_name"]
    return names if isinstance(names, tuple) else (names,)


def _same_along_last(case: Any) -> Any:
    """The call with every device holding what the member 0 of its line along the last mesh axis holds."""
    size = list(case.mesh_shape.values())[-1]
    args = tuple(tuple(per[d - d % size] for d in range(len(per))) for per in case.args)
    return dataclasses.replace(case, args=args)


def _program(case: Any, check_vma: bool, unbatched: bool, eager: bool) -> tuple[Any, list[np.ndarray]]:
    """The JAX program with the last mesh axis vmapped (jitted, or with `eager` run op by op), and its global
    arguments."""
    *outer, (name, size) = case.mesh_shape.items()
    body = route(case.op).body(case.params)
    in_axes = None if unbatched else 0
    lines = int(np.prod([n for _, n in outer]))
    per_line = [np.stack([np.asarray(x) for x in per]).reshape(lines, size, *np.shape(per[0])) for per in case.args]
    if unbatched:
        per_line = [a[:, 0] for a in per_line]

    def batched(*blocks: Any) -> Any:
        return jax.vmap(body, in_axes=in_axes, axis_size=size, axis_name=name)(*blocks)

    if not outer:
        plain = lambda *a: batched(*(x[0] for x in a))[None]
        return (plain if eager else jax.jit(plain)), per_line
    on = jax_mesh(dict(outer))
    spec = jax.sharding.PartitionSpec(on.axis_names)
    mapped = jax.shard_map(lambda *a: batched(*(x[0] for x in a))[None], mesh=on, in_specs=(spec,) * len(per_line),
                           out_specs=spec, check_vma=check_vma)
    return (mapped if eager else jax.jit(mapped)), per_line


def raised_in(error: BaseException) -> str:
    """Where in jax/_src an exception was raised: 'core.py:pvary' (the innermost frame in JAX's sources)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "/jax/_src/" in f.filename.replace("\\", "/")]
    return f"{Path(frames[-1].filename).name}:{frames[-1].name}" if frames else "?"


def named_vmap_problem(case: Any, check_vma: bool, unbatched: bool, eager: bool = False) -> str | None:
    """What differs between the call with its last mesh axis as a named vmap axis and the call on the mesh
    (jitted; with `eager`, the shard_map and vmap run op by op, as outside `jax.jit`)."""
    problem = _named_vmap_problem(case, check_vma, unbatched, eager)
    return f"(eager) {problem}" if problem and eager else problem


def _named_vmap_problem(case: Any, check_vma: bool, unbatched: bool, eager: bool) -> str | None:
    if unbatched:
        case = _same_along_last(case)
    truth = Program(case, check_vma)
    want = np.asarray(truth.jax(*truth.globals))
    program, args = _program(case, truth.check_vma, unbatched, eager)
    try:
        got = np.asarray(program(*args))
    except NotImplementedError as error:  # JAX refuses groups under vmap, some of them without a message
        refused = any(text in str(error) for text in REFUSALS) or case.params.get("axis_index_groups") is not None
        return None if refused else f"NotImplementedError: {error}"
    except AssertionError as error:
        # all_gather and psum_scatter refuse a tuple axis_name with the vmap axis ("feature request"), but
        # first assert that the tuple's size is the vmap axis's: the refusal, raised as an assertion
        if "axis size doesn't match" in str(error) and len(_names(case)) > 1:
            return None
        return f"jax.vmap with axis_name raised AssertionError in {raised_in(error)}: {str(error)[:300]}"
    except Exception as error:
        return f"jax.vmap with axis_name raised {type(error).__name__} in {raised_in(error)}: {str(error)[:300]}"
    got = got.reshape(want.shape) if got.size == want.size else got
    if got.shape != want.shape or got.dtype != want.dtype or got.tobytes() != want.tobytes():
        return (f"the vmap axis {list(case.mesh_shape)[-1]!r} differs from the mesh axis:\n  mesh {want.ravel()[:24]} "
                f"{want.shape} {want.dtype}\n  vmap {got.ravel()[:24]} {got.shape} {got.dtype}")
    return None


def pair_vmap_problem(case: Any, check_vma: bool, axes: list[int | None]) -> str | None:
    """jax.vmap of psend followed by precv as JAX binds them, traced (XLA:CPU cannot run the pair, so the
    campaign runs it as JAX's equivalent ppermute): the batched program must trace to the per-batch
    program's result type with the batch axis in front, as `vmap_problem` runs it with the ppermute."""
    truth = Program(case, check_vma, whole=True)
    params = case.params
    names = params["axis_name"] if isinstance(params["axis_name"], tuple) else (params["axis_name"],)

    def pair(block: Any) -> Any:
        token = jax.lax.psend(block, names, params["perm"])
        return jax.lax.precv(token, jax.ShapeDtypeStruct(block.shape, block.dtype), names, params["perm"])

    on = jax_mesh(case.mesh_shape)
    program = jax.shard_map(pair, mesh=on, in_specs=truth.jax_specs, out_specs=truth.jax_specs[0],
                            check_vma=truth.check_vma)
    (axis,) = axes
    (whole,) = truth.globals
    try:
        want = jax.eval_shape(program, whole)
        batched = whole if axis is None else np.stack([whole, whole], axis=axis)
        got = jax.eval_shape(jax.vmap(program, in_axes=axis, axis_size=2), batched)
    except Exception as error:
        return f"jax.vmap of psend and precv raised {type(error).__name__} in {raised_in(error)}: {str(error)[:300]}"
    if got.shape != (2, *want.shape) or got.dtype != want.dtype:
        return f"jax.vmap of psend and precv is typed {got}, the per-batch program {want}"
    return None
