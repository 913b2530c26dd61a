"""Reductions over vmap axes inside a shard_map body: under `jax.vmap(..., axis_name='v')`, JAX turns a psum,
pmax or pmin over 'v' into one over a positional axis, `psum[axes=(0, 'x')]`, and runs it as XLA does: the
positional axes reduced on the device (`lax.reduce_sum`, `reduce_max`, `reduce_min`, their dimensions
dropped), then the named axes across devices. The bridge does the same: the local reduction recorded in the
device's program, then meshsim's collective over the named axes (none: the reduction is all there is).

>>> # jax.vmap(lambda u: jax.lax.psum(u, ('v', 'x')), axis_name='v')(v) in a body over mesh axis 'x':
>>> #   d:f32[4] = psum[axes=(0, 'x')] c      ->   reduce_sum[axes=(0,)] c, then psum over 'x'
"""

from __future__ import annotations

import jax
import numpy as np
from jax._src import mesh as mesh_lib
from jax.extend import core

import sim

# JAX's own local reducer of each reduction's positional axes (`jax._src.lax.parallel`'s lowerings).
_REDUCERS = {"psum": ("reduce_sum", jax.lax.reduce_sum), "psum_invariant": ("reduce_sum", jax.lax.reduce_sum),
             "pmax": ("reduce_max", jax.lax.reduce_max), "pmin": ("reduce_min", jax.lax.reduce_min)}
REDUCTIONS = frozenset(_REDUCERS)


def split(eqn: core.JaxprEqn) -> tuple[tuple[int, ...], core.JaxprEqn | None] | None:
    """None for an equation without positional axes; else its positional axes and the same equation over its
    named axes alone (None where it names none)."""
    if eqn.primitive.name not in _REDUCERS:
        return None
    axes = eqn.params["axes"]
    positional = tuple(a for a in axes if isinstance(a, int))
    if not positional:
        return None
    named = tuple(a for a in axes if not isinstance(a, int))
    return positional, (eqn.replace(params={**eqn.params, "axes": named}) if named else None)


def reduce(eqn: core.JaxprEqn, positional: tuple[int, ...], ins: list) -> list:
    """Each operand of `eqn` reduced over `positional` on this device, as JAX's lowering reduces it first."""
    name, reducer = _REDUCERS[eqn.primitive.name]

    def evaluate(x: np.ndarray) -> np.ndarray:
        with mesh_lib.use_abstract_mesh(mesh_lib.empty_abstract_mesh):
            return np.asarray(reducer(jax.numpy.asarray(x), positional))

    return [sim.apply(name, evaluate, [x], {"axes": positional}) for x in ins]

