"""Partial-manual shard_map (`axis_names=` a subset of the mesh) against the fully manual program.

The partial_manual kind of the rules campaign. A collective's call (as `oracles._rules.Program` builds
it: device d's block at index d of a leading axis sharded over the call's mesh axes) runs on a mesh with
one more axis, `auto`, of 2 devices when the call has at most 4 (8 CPU devices in all). Every argument
gets one leading dimension per mesh axis (its size that axis's, or 1 where the argument is invariant
along it) plus one of 2 for `auto`, where the second copy is the first plus 1 (index arrays copied as
they are), so each (auto, other-axis) slice is a different call. Inside the shard_map only the `manual`
axes are the program's (the collective's own and, drawn, others); the rest are left to the compiler,
which is given the arguments sharded over every axis. The body loops over the slices of the axes left
to the compiler and calls the collective on each.

The same body run with every axis manual (the slices then replicated over the axes that were automatic)
is what the partial program must equal, bit for bit: the values are small integers, so every reduction
is exact in every order. For example, psum over `x` on mesh `{'x': 2}`: the partial program is manual
over `x` and leaves `auto` to the compiler; both programs give each `auto` slice its own sum.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from oracles import jax_fixes
from oracles._jax_dispatch import route
from oracles._rules import Case, Program, bfloat16_reduction

AUTO = "auto"
ABORTS = "partial-manual-bfloat16-reduction"  # the finding whose programs kill the process unless fixed


def layout(case: Case) -> dict[str, int]:
    """The partial program's mesh: `auto` of 2 when the call has at most 4 devices, then the call's axes."""
    return {**({AUTO: 2} if case.devices <= 4 else {}), **case.mesh_shape}


def _names(spec: P) -> tuple[str, ...]:
    """The mesh axes the leading dimension of an argument's `spec` is sharded over, in the spec's order."""
    first = spec[0] if len(spec) else None
    return () if first is None else (first,) if isinstance(first, str) else tuple(first)


def _split(case: Case, g: np.ndarray, names: tuple[str, ...], index: bool) -> np.ndarray:
    """`g` (leading axis over `names`, row-major) with one leading dimension per mesh axis of `layout`:
    the axis's size where `g` spans it, else 1; the `auto` copy adds 1 to data (index arrays as they are)."""
    rest = g.shape[1:]
    per_axis = g.reshape(tuple(case.mesh_shape[a] for a in names) + rest)
    order = [a for a in case.mesh_shape if a in names]
    per_axis = np.transpose(per_axis, [names.index(a) for a in order] + list(range(len(names), per_axis.ndim)))
    out = per_axis.reshape(tuple(case.mesh_shape[a] if a in names else 1 for a in case.mesh_shape) + rest)
    if AUTO in layout(case):
        out = np.stack([out, out if index else (out + 1).astype(out.dtype)])
    return out


def _body(case: Case, manual: tuple[str, ...]) -> Callable[..., Any]:
    """The per-device program: the collective on every slice of the axes the block holds whole (those
    left to the compiler; in the fully manual program, those replicated), results in the same layout."""
    call = route(case.op).body(case.params)
    axes = list(layout(case))
    slices = [k for k, a in enumerate(axes) if a not in manual]

    def body(*blocks: Any) -> Any:
        sizes = [blocks[0].shape[k] for k in slices]
        results = []
        for at in itertools.product(*(range(n) for n in sizes)):
            index = [0] * len(axes)
            for k, i in zip(slices, at):
                index[k] = i
            results.append(call(*(b[tuple(index)] for b in blocks)))
        whole = dict(zip(slices, sizes))
        # the results in row-major order of the sliced axes; size-1 dimensions between them keep that order
        return jnp.stack(results).reshape(tuple(whole.get(k, 1) for k in range(len(axes))) + results[0].shape)

    return body


def _spec(shape: dict[str, int], names: tuple[str, ...], manual: tuple[str, ...]) -> P:
    """Each leading dimension's axis if it is manual and the array spans it, else None."""
    return P(*(a if a in manual and a in names else None for a in shape))


def _run(case: Case, program: Program, args: list[np.ndarray], names: list[tuple[str, ...]],
         manual: tuple[str, ...], axis_names: tuple[str, ...]) -> np.ndarray:
    """The program manual over `axis_names` on the arguments sharded over every axis they span; its
    in_specs and out_specs name only the axes `manual` (the partial program's) in both programs."""
    shape = layout(case)
    on = Mesh(np.array(jax.devices()[:int(np.prod(list(shape.values())))]).reshape(tuple(shape.values())),
              tuple(shape))
    mapped = jax.shard_map(_body(case, manual), mesh=on, in_specs=tuple(_spec(shape, n, manual) for n in names),
                           out_specs=_spec(shape, tuple(shape), manual), axis_names=set(axis_names),
                           check_vma=program.check_vma)
    placed = [jax.device_put(a, NamedSharding(on, _spec(shape, n, tuple(shape)))) for a, n in zip(args, names)]
    return np.asarray(jax.jit(mapped)(*placed))


def partial_problem(case: Case, check_vma: bool, manual: tuple[str, ...]) -> str | None:
    """What differs between the program manual over `manual` (the rest of the mesh left to the compiler)
    and the same program manual over every axis, or the error one of them raised."""
    if bfloat16_reduction(case) and ABORTS not in jax_fixes.installed():
        return f"not run: XLA:CPU aborts compiling {case.op} over bfloat16 in a partial-manual program (FINDINGS.md 16)"
    program = Program(case, check_vma)
    names = [(AUTO, *_names(s)) for s in program.jax_specs]
    args = [_split(case, g, n[1:], k not in program.linear) for k, (g, n) in enumerate(zip(program.globals, names))]
    answers = {}
    for label, axes in (("fully manual", tuple(layout(case))), ("partial", manual)):
        try:
            answers[label] = _run(case, program, args, names, manual, axes)
        except Exception as error:  # JAX refusing the program is a finding, not a crash of the campaign
            return f"the {label} program (manual over {axes}) raised {type(error).__name__}: {str(error)[:300]}"
    want, got = answers["fully manual"], answers["partial"]
    if want.shape != got.shape or want.tobytes() != got.tobytes():
        return (f"manual over {manual} of mesh {layout(case)}: the partial-manual program differs from the fully "
                f"manual one:\n  fully manual {want.ravel()[:24]}\n  partial      {got.ravel()[:24]}")
    return None
