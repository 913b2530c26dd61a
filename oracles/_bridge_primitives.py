"""Which JAX primitives the bridge runs, and the check that refuses the others before anything runs.

Every primitive JAX registers (its lowering, JVP and transpose registries and every `Primitive` object of
the modules `import jax` loads) gets a status inside a shard_map body:

- ``collective``: run as meshsim's collective, through the registry (and JAX's casts between varying,
  unreduced and reduced types, which move no data);
- ``walked``: a call or control flow whose body the bridge walks (`jit`, `checkpoint`, `custom_jvp_call`,
  `cond`, `while`, `scan`, ..., and a nested `shard_map`);
- ``local``: evaluated by JAX on each device's values (it has a CPU lowering);
- ``refused``: with the reason (a collective meshsim lacks, asynchronous collectives, a primitive XLA:CPU
  cannot run, mutable references, `xla_pmap`).

Outside shard_map every primitive runs with JAX on the host, except collectives and `xla_pmap`.

>>> support("sin")
('local', 'evaluated by JAX on each device')
"""

from __future__ import annotations

import gc
import importlib

from jax._src.interpreters import ad, mlir
from jax.extend import core

from collectives import REGISTRY
from oracles._bridge_device import ALIASES, CASTS, DONES, PARALLEL, STARTS
from oracles._bridge_diagnostics import source_line
from oracles._bridge_eval import CALLS, CONTROL, BridgeError, UnsupportedPrimitiveError

_REFS = frozenset({"new_ref", "empty_ref", "free_ref", "freeze", "get", "swap", "addupdate", "accum_grad_in_ref",
                   "box_get", "box_set", "new_box", "new_log", "log_read", "log_extend"})


# Modules whose primitives are registered only once imported; all are imported before primitives are listed.
_MODULES = ("jax.numpy", "jax.lax", "jax.random", "jax.nn", "jax.scipy.special", "jax.experimental.multihost_utils",
            "jax.experimental.custom_partitioning", "jax.experimental.checkify")


def primitives() -> list[str]:
    """The name of every primitive JAX registers once `_MODULES` are imported, sorted (meshsim's own, named
    `meshsim_...`, left out)."""
    for module in _MODULES:
        importlib.import_module(module)
    found = set(mlir._lowerings) | set(ad.primitive_jvps) | set(ad.primitive_transposes)
    for table in mlir._platform_specific_lowerings.values():
        found |= set(table)
    names = {p.name for p in found} | {o.name for o in gc.get_objects() if isinstance(o, core.Primitive)}
    return sorted(name for name in names if not name.startswith("meshsim_"))


def _on_cpu() -> frozenset[str]:
    return frozenset(p.name for p in mlir._lowerings) | frozenset(
        p.name for p in mlir._platform_specific_lowerings.get("cpu", {}))


def support(name: str) -> tuple[str, str]:
    """(status, reason) of the primitive `name` inside a shard_map body (see the module's list)."""
    collective = {p for d in REGISTRY.values() for p in d.jax.primitives} | set(ALIASES)
    if name in collective or name in CASTS:
        return "collective", "run as meshsim's collective" if name in collective else "a type cast: no data moves"
    if name in STARTS and name.removesuffix("_start") in collective:
        return "collective", "an asynchronous collective, run as meshsim's collective when it starts"
    if name in DONES:
        return "collective", "the end of an asynchronous collective: hands on its result"
    if (name in CALLS and CALLS[name] is not None) or name in CONTROL:
        return "walked", "its body walked per device"
    if name == "shard_map":
        return "walked", "a nested shard_map: its body walked per device on its blocks, its outputs gathered"
    if name in PARALLEL:
        return "refused", f"a JAX collective meshsim does not implement (the bridge runs {sorted(collective)})"
    if name == "xla_pmap":
        return "refused", "the bridge simulates jax.shard_map, not jax.pmap: write the program with jax.shard_map"
    if name in _REFS:
        return "refused", "mutable references (jax.new_ref, state) are not evaluated per device"
    if name in CALLS:
        return "refused", "a call with no body to walk"
    if name not in _on_cpu():
        elsewhere = any(name in {p.name for p in table} for table in mlir._platform_specific_lowerings.values())
        return "refused", ("XLA:CPU has no lowering for it (a GPU or TPU primitive)" if elsewhere else
                           "JAX has no lowering for it: an internal primitive JAX replaces before lowering")
    return "local", "evaluated by JAX on each device"


def table() -> dict[str, tuple[str, str]]:
    """`support` of every primitive JAX registers."""
    return {name: support(name) for name in primitives()}


def check_primitives(jaxpr: core.Jaxpr | core.ClosedJaxpr) -> None:
    """Refuse, before anything runs, an equation the bridge cannot run: its primitive, the user's source line
    and why.

    Raises:
        UnsupportedPrimitiveError: a refused primitive inside a shard_map body, or `xla_pmap` anywhere.
        BridgeError: a local primitive in a body whose own jaxpr holds collectives the bridge cannot reach.
    """
    _check(jaxpr, inside=False, where="")


def _check(jaxpr: core.Jaxpr | core.ClosedJaxpr, inside: bool, where: str) -> None:
    if isinstance(jaxpr, core.ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        status, reason = support(name) if inside or name == "xla_pmap" else ("host", "")
        if status == "refused":
            raise UnsupportedPrimitiveError(f"primitive {name!r} at {source_line(eqn, where)} cannot run on the "
                                            f"simulated mesh: {reason} (in `{_short(eqn)}`)")
        subs = list(core.jaxprs_in_params(eqn.params))
        if status == "local" and any(_has_collective(sub) for sub in subs):
            raise BridgeError(f"primitive {name!r} at {source_line(eqn, where)} holds collectives in a body the bridge "
                              f"does not walk (it would run them outside the simulator)")
        for sub in subs:
            _check(sub, inside or name == "shard_map", source_line(eqn, where) if name == "shard_map" else where)


def _has_collective(jaxpr: core.Jaxpr | core.ClosedJaxpr) -> bool:
    if isinstance(jaxpr, core.ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    return any(e.primitive.name in PARALLEL or any(_has_collective(s) for s in core.jaxprs_in_params(e.params))
               for e in jaxpr.eqns)


def _short(eqn: core.JaxprEqn) -> str:
    text = str(eqn).replace("\n", " ")
    return text if len(text) <= 200 else text[:197] + "..."
