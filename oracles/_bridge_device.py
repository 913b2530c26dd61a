"""A `shard_map` equation run on the simulated mesh: each device walks the body on its own values.

Inside the body, a device evaluates every local primitive with JAX on its own block (`primitive.bind`,
the result recorded in the device's typed `sim.Program` under the primitive's name), and runs every
collective primitive as meshsim's collective, found by `collectives.REGISTRY.by_primitive` and called
through its `Definition`: its messages go through the simulated network into the run's trace. After
each equation the value's device-variance type is checked against the jaxpr's (`{V:...}`) under
`check_vma=True`, so a collective whose meshsim type rule disagrees with JAX's stops the run there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax._src.lax import parallel
from jax.extend import core

import sim
from collectives import REGISTRY, Definition
from oracles._bridge_eval import BridgeError, Evaluator, UnsupportedPrimitiveError

# JAX's parameter names where meshsim's differ; every other parameter keeps its name, and those a
# collective does not take (`axis_size`, JAX's own bookkeeping) are dropped.
_RENAMED = {"axes": "axis_name", "all_gather_dimension": "axis"}
# The all_to_all primitive splits and concatenates in place whatever its `tiled` says: `lax.all_to_all`
# adds and removes the untiled axis around it with expand_dims and squeeze.
_FIXED = {"all_to_all": {"tiled": True}}
# Every collective primitive JAX defines; those the registry lacks are refused by name.
PARALLEL = frozenset(p.name for p in vars(parallel).values() if isinstance(p, core.Primitive))


class TypeMismatchError(BridgeError):
    """meshsim's device-variance type of a value differs from the one in the jaxpr."""


def body(jaxpr: core.Jaxpr, check_vma: bool) -> Callable[..., tuple]:
    """The per-device program of a shard_map equation whose body is `jaxpr`."""
    if jaxpr.constvars:
        raise BridgeError(f"shard_map body with constvars={jaxpr.constvars} cannot be run; JAX closes over "
                          f"constants as inputs, so this jaxpr was not made by jax.make_jaxpr")
    evaluator = Evaluator(lambda eqn, ins: _apply(eqn, ins, check_vma), _literal, _stack)
    return lambda *args: tuple(evaluator.run(jaxpr, list(args)))


def _literal(lit: core.Literal) -> np.ndarray:
    return np.asarray(lit.val, dtype=lit.aval.dtype)


def _stack(values: list, aval: Any) -> Any:
    if not values:
        return sim.wrap(np.zeros(aval.shape, aval.dtype), _vma(aval))
    return np.stack(values)


def _vma(aval: Any) -> frozenset:
    mat = getattr(aval, "mat", None)
    return frozenset(getattr(mat, "varying", ()) or ())


def _apply(eqn: core.JaxprEqn, ins: list, check_vma: bool) -> list:
    name = eqn.primitive.name
    definition = _definition(name)
    if definition is not None:
        outs = _collective(definition, eqn, ins)
    elif name in PARALLEL:
        raise UnsupportedPrimitiveError(
            f"primitive {name!r} (in `{eqn}`) is a JAX collective meshsim does not implement; the bridge runs "
            f"these: {sorted(p for d in REGISTRY.values() for p in d.jax.primitives)}")
    else:
        outs = _local(eqn, ins)
    if check_vma:
        for var, out in zip(eqn.outvars, outs):
            _check_type(eqn, var, out)
    return outs


def _definition(primitive: str) -> Definition | None:
    try:
        return REGISTRY.by_primitive(primitive)
    except KeyError:
        return None


def _local(eqn: core.JaxprEqn, ins: list) -> list:
    """A local primitive, evaluated by JAX on this device's values and recorded in its program."""
    def evaluate(*plain: np.ndarray) -> Any:
        try:
            result = eqn.primitive.bind(*(jax.numpy.asarray(x) for x in plain), **eqn.params)
        except Exception as error:
            raise UnsupportedPrimitiveError(
                f"device {sim.current().device}: primitive {eqn.primitive.name!r} (in `{eqn}`) could not be "
                f"evaluated on one device's values: {type(error).__name__}: {error}") from error
        if eqn.primitive.multiple_results:
            return tuple(np.asarray(r) for r in result)
        return np.asarray(result)

    out = sim.apply(eqn.primitive.name, evaluate, list(ins), _recorded(eqn.params))
    return list(out) if eqn.primitive.multiple_results else [out]


def _recorded(params: dict) -> dict:
    """The parameters a program records: bodies are shown by name, not printed whole."""
    return {k: ("<jaxpr>" if isinstance(v, (core.Jaxpr, core.ClosedJaxpr)) else v) for k, v in params.items()}


def _collective(definition: Definition, eqn: core.JaxprEqn, ins: list) -> list:
    """A collective primitive run as meshsim's collective: its messages cross the simulated network."""
    params = {_RENAMED.get(k, k): v for k, v in eqn.params.items()}
    params.update(_FIXED.get(eqn.primitive.name, {}))
    kwargs = {k: v for k, v in params.items() if definition.takes(k)}
    names = kwargs.get("axis_name")
    if isinstance(names, (tuple, list)) and len(names) == 1:
        kwargs["axis_name"] = names[0]
    if len(definition.arrays) == 1 and len(ins) > 1:
        # psum and its kin bind every leaf of a pytree at once: meshsim takes the pytree
        return list(definition.function(tuple(ins), **kwargs))
    out = definition.function(*ins, **kwargs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _check_type(eqn: core.JaxprEqn, var: Any, out: Any) -> None:
    expected, found = _vma(var.aval), sim.vma_of(out)
    if expected != found:
        raise TypeMismatchError(
            f"device {sim.current().device}: `{eqn}`: meshsim's result varies along {sorted(found)}, the jaxpr "
            f"says {sorted(expected)} ({var}:{var.aval.str_short()}); meshsim's device-variance rule for "
            f"{eqn.primitive.name!r} disagrees with JAX's")
