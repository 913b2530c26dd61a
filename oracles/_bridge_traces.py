"""A program's trace: `jax.make_jaxpr` of the user's function, and, for a jitted function, the trace kept per
argument signature as `jax.jit` keeps its own (a warm `simulate_jax` call neither traces nor compiles again).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax._src import config as jax_config
from jax._src import core as jax_core
from jax.extend import core

from oracles._bridge_eval import BridgeError, contains

__all__ = ["dynamic", "kept", "static_argnums", "trace", "traced"]


_TRACES_KEPT = 64
# Jitted functions' traces by argument signature, and the traced jaxprs whose primitives were checked.
_traces: OrderedDict[tuple, Any] = OrderedDict()


def traced(f: Callable[..., Any], args: tuple) -> tuple[core.ClosedJaxpr, Any]:
    """`trace(f, args)`, kept per argument signature when `f` is jitted (as `jax.jit` keeps its trace: a
    jitted function is pure by contract, so a warm call neither traces nor compiles again); a function that
    is not jitted is traced on every call, as JAX traces it."""
    if not hasattr(f, "lower"):
        return trace(f, args)
    leaves, structure = jax.tree.flatten(dynamic(f, args))
    static = tuple(args[k] for k in static_argnums(f) if k < len(args))
    key = (f, structure, tuple([_signature(x) for x in leaves]), static, jax_config.trace_context())
    return kept(key, lambda: trace(f, args))


def static_argnums(f: Callable[..., Any]) -> tuple[int, ...]:
    """The positions of a jitted `f`'s static arguments (`jax.jit(..., static_argnums=...)`), else none."""
    return tuple(getattr(getattr(f, "_jit_info", None), "static_argnums", ()) or ())


def dynamic(f: Callable[..., Any], args: tuple) -> tuple:
    """`args` without the static ones: what `f`'s jaxpr takes."""
    static = static_argnums(f)
    return tuple(a for k, a in enumerate(args) if k not in static) if static else args


# The signatures of the last jax.Arrays met, by identity (a jax.Array never changes its type or sharding).
_ARRAYS_KEPT = 256
_arrays: OrderedDict[int, tuple[Any, tuple]] = OrderedDict()


def _signature(x: Any) -> tuple:
    """What `jax.jit` traces an argument by: a numpy array's shape and dtype, anything else's abstract value
    and sharding (a jax.Array's found once per array)."""
    if type(x) is np.ndarray:
        return ("numpy", x.shape, x.dtype)
    if not isinstance(x, jax.Array):
        return (jax_core.shaped_abstractify(x), getattr(x, "sharding", None))
    found = _arrays.get(id(x))
    if found is None or found[0] is not x:
        found = _arrays[id(x)] = (x, (jax_core.shaped_abstractify(x), x.sharding))
        while len(_arrays) > _ARRAYS_KEPT:
            _arrays.popitem(last=False)
    return found[1]


def kept(key: tuple, make: Callable[[], Any]) -> Any:
    """`make()`, kept under `key` among the last `_TRACES_KEPT` made."""
    found = _traces.get(key)
    if found is None:
        found = _traces[key] = make()
    _traces.move_to_end(key)
    while len(_traces) > _TRACES_KEPT:
        _traces.popitem(last=False)
    return found


def trace(f: Callable[..., Any], args: tuple) -> tuple[core.ClosedJaxpr, Any]:
    """`f`'s jaxpr on `args` and its output tree; a clear error when `f` has no shard_map."""
    try:
        closed, shape = jax.make_jaxpr(f, static_argnums=static_argnums(f), return_shape=True)(*args)
    except NameError as error:
        if "unbound axis name" not in str(error):
            raise
        raise BridgeError(f"{error}: a collective names a mesh axis outside any shard_map; wrap the body in "
                          f"jax.shard_map(body, mesh=mesh, in_specs=..., out_specs=...)") from None
    if not contains(closed, "shard_map"):
        raise BridgeError(f"{getattr(f, '__name__', f)!r} has no jax.shard_map: the bridge simulates the mesh "
                          f"a shard_map runs on; wrap the per-device body in jax.shard_map(body, mesh=mesh, "
                          f"in_specs=..., out_specs=...)")
    return closed, jax.tree.structure(shape)
