"""A device's segment traced with its mesh axes bound, for loops JAX types by device variance.

Under `check_vma=True`, JAX types a `scan`, `while` or `cond` in a body by the variance of its operands: a
carry that a `pvary` inside the loop makes varying must come in varying. Bound outside any shard_map, such a
segment's operands are plain arrays and JAX refuses the loop ("Scan carry input and output got mismatched
varying manual axes"). So that segment is traced with the body's mesh axes bound, as a shard_map binds them,
and each operand cast varying along the axes the jaxpr types it: the casts compile to nothing, and the
computation is the segment's own, as the user's jitted program compiles it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax
from jax._src import config
from jax._src.core import empty_mat, extend_axis_env_nd
from jax._src.interpreters import mlir
from jax._src.mesh import use_abstract_mesh
from jax.extend import core


def varying(aval: Any) -> tuple[str, ...]:
    """The mesh axes JAX types `aval` as varying along, sorted."""
    mat = getattr(aval, "mat", None)
    return tuple(sorted(getattr(mat, "varying", ()) or ()))


def body_mesh(eqns: tuple[core.JaxprEqn, ...]) -> Any:
    """The abstract mesh of the body whose values of `eqns` (or of their nested bodies) vary along some of its
    axes, or None where none does."""
    return next((aval.sharding.mesh for aval in _avals(eqns) if varying(aval)), None)


def _avals(eqns: tuple[core.JaxprEqn, ...]) -> Iterator[Any]:
    for eqn in eqns:
        for var in (*eqn.invars, *eqn.outvars):
            yield var.aval
        for sub in core.jaxprs_in_params(eqn.params):
            yield from _avals(tuple(sub.eqns))


def with_axes(run: Callable[..., list], invars: tuple, mesh: Any) -> Callable[..., list]:
    """`run` (a segment's function of `invars`) traced with the axes of the body's abstract `mesh` bound, as a
    shard_map binds them, each operand cast varying along the axes its invar varies."""
    def wrapped(*values: Any) -> list:
        with extend_axis_env_nd(tuple(mesh.shape.items())), use_abstract_mesh(mesh), config._check_vma(True):
            outs = run(*[jax.lax.pcast(x, varying(v.aval), to="varying") if varying(v.aval) else x
                         for x, v in zip(values, invars)])
            return [_untyped_p.bind(out) for out in outs]

    return wrapped


# A device's value as it leaves the segment: the same array, no longer typed by the body's axes (a shard_map's
# outputs leave its body the same way). It compiles to nothing.
_untyped_p = core.Primitive("meshsim_untyped")
_untyped_p.def_impl(lambda x: x)
_untyped_p.def_abstract_eval(lambda aval: aval.update(sharding=None, manual_axis_type=empty_mat))
mlir.register_lowering(_untyped_p, lambda ctx, x: [x])
