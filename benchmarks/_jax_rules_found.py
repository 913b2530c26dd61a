"""The rule functions of JAX's collectives and of shard_map, found in JAX's own registries.

`rule_functions()` imports jax (before any rule is replaced: `oracles.install_cpu_lowerings()` is not run
here) and walks the tables JAX dispatches through: each primitive's abstract evaluation,
`ad.primitive_jvps`, `ad.primitive_transposes`, `batching.fancy_primitive_batchers` (where
`primitive_batchers` stores its rules, wrapped), the lowerings of `mlir` (every platform), and shard_map's
own hooks (the `process_shard_map` of each trace, its typecheck, partial-evaluation, DCE and discharge
rules). A registered rule is unwrapped (`functools.partial`, `__wrapped__`, a lowering's entry, a
closure's functions) to the function defined in `jax/_src/lax/parallel.py` or `jax/_src/shard_map.py`
that does the work; generic rules defined elsewhere (`ad.linear_jvp` for the linear collectives) are
left out, since their lines are not the collectives'.

For example `ad.primitive_transposes[psum_p]` is `partial(ad.linear_transpose2, _psum_transpose_rule)`,
found as `Rule("psum", "transpose", "_psum_transpose_rule", "parallel.py", 1031)`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILES = ("lax/parallel.py", "shard_map.py")  # under jax/_src
KINDS = ("abstract eval", "jvp", "transpose", "batching", "lowering", "shard_map")


@dataclass(frozen=True)
class Rule:
    """One registration: the primitive (or 'shard_map'), the kind of rule, the function and its file."""

    primitive: str
    kind: str
    function: str
    file: str
    first_line: int


def jax_sources() -> dict[str, Path]:
    """The two files, by short name ('parallel.py', 'shard_map.py'), as installed."""
    import jax

    root = Path(jax.__file__).resolve().parent / "_src"
    return {Path(f).name: root / f for f in FILES}


def _defined_in_ours(fn: Any, files: set[str]) -> bool:
    code = getattr(fn, "__code__", None)
    return code is not None and str(Path(code.co_filename).resolve()) in files


def unwrap(rule: Any, files: set[str], depth: int = 0) -> Iterator[Callable[..., Any]]:
    """The functions of `files` that `rule` runs: itself, or what a partial, wrapper, lowering entry or
    closure holds."""
    if depth > 4 or rule is None:
        return
    if isinstance(rule, functools.partial):
        yield from unwrap(rule.func, files, depth + 1)
        for arg in rule.args:
            if callable(arg) and not hasattr(arg, "bind"):
                yield from unwrap(arg, files, depth + 1)
        return
    if hasattr(rule, "rule") and not callable(rule):  # mlir.LoweringRuleEntry
        yield from unwrap(rule.rule, files, depth + 1)
        return
    if inspect.ismethod(rule):
        rule = rule.__func__
    if _defined_in_ours(rule, files):
        yield rule
        return
    if hasattr(rule, "__wrapped__"):
        yield from unwrap(rule.__wrapped__, files, depth + 1)
        return
    for cell in getattr(rule, "__closure__", None) or ():
        try:
            content = cell.cell_contents
        except ValueError:
            continue
        if callable(content):
            yield from unwrap(content, files, depth + 1)


def _primitives() -> dict[Any, str]:
    """Every primitive parallel.py defines or registers rules for, by name."""
    from jax._src import core
    from jax._src.lax import parallel

    found = {v: v.name for v in vars(parallel).values() if isinstance(v, core.Primitive)}
    found.update({p: p.name for p in (core.pvary_p, core.reduced_vary_cast_p)})
    return found


def _registrations() -> Iterator[tuple[str, str, Any]]:
    """(primitive, kind, registered rule) for every table entry of a collective primitive and of shard_map."""
    from jax._src import core
    from jax._src import shard_map as shmap
    from jax._src.interpreters import ad, batching, mlir
    from jax._src.interpreters import partial_eval as pe

    prims = _primitives()
    prims[shmap.shard_map_p] = "shard_map"
    for prim, name in prims.items():
        yield name, "abstract eval", getattr(prim, "abstract_eval", None)
        yield name, "jvp", ad.primitive_jvps.get(prim)
        yield name, "transpose", ad.primitive_transposes.get(prim)
        # primitive_batchers stores a wrapper of the rule in fancy_primitive_batchers
        yield name, "batching", batching.fancy_primitive_batchers.get(prim)
        yield name, "lowering", mlir._lowerings.get(prim)
        for per_platform in mlir._platform_specific_lowerings.values():
            yield name, "lowering", per_platform.get(prim)
    for table in (core.custom_typechecks, pe.partial_eval_jaxpr_custom_rules, pe.dce_rules):
        yield "shard_map", "shard_map", table.get(shmap.shard_map_p)
    for trace in (core.EvalTrace, pe.DynamicJaxprTrace, pe.JaxprTrace, ad.JVPTrace, ad.LinearizeTrace,
                  batching.BatchTrace):
        yield "shard_map", "shard_map", getattr(trace, "process_shard_map", None)
    yield "shard_map", "shard_map", getattr(shmap.shard_map_p, "to_lojax", None)
    yield "shard_map", "shard_map", core.shard_aval_handlers.get(core.ShapedArray)
    yield "shard_map", "shard_map", core.unshard_aval_handlers.get(core.ShapedArray)
    from jax._src.state import discharge

    yield "shard_map", "shard_map", discharge._discharge_rules.get(shmap.shard_map_p)


def _names(code: Any) -> Iterator[str]:
    """The global names `code` and the functions nested in it read."""
    yield from code.co_names
    for const in code.co_consts:
        if inspect.iscode(const):
            yield from _names(const)


def _callees(fn: Callable[..., Any], files: set[str]) -> Iterator[Callable[..., Any]]:
    """The functions of `files` that `fn` names (a rule's helpers: `_all_to_all_batcher`, ...)."""
    for name in dict.fromkeys(_names(fn.__code__)):
        found = fn.__globals__.get(name)
        if inspect.isfunction(found) and _defined_in_ours(found, files):
            yield found


def _rule(prim: str, kind: str, fn: Callable[..., Any]) -> Rule:
    return Rule(prim, kind, fn.__qualname__, Path(fn.__code__.co_filename).name, fn.__code__.co_firstlineno)


def rule_functions(helpers: bool = True) -> list[Rule]:
    """Every (primitive, kind, function) registered, the function found in parallel.py or shard_map.py;
    with `helpers`, also each private function a rule names (kind 'helper of <rule>'), once."""
    files = {str(p) for p in jax_sources().values()}
    rules: dict[tuple[str, str, str], Rule] = {}
    for prim, kind, registered in _registrations():
        for fn in unwrap(registered, files):
            # shard_map's rules for its own primitive are listed as shard_map's, whatever table holds them
            rule = _rule(prim, "shard_map" if prim == "shard_map" else kind, fn)
            rules.setdefault((rule.primitive, rule.kind, rule.function), rule)
    if not helpers:
        return list(rules.values())
    named = {r.function for r in rules.values()}
    found = list(rules.values())
    for rule in list(found):
        fn = _function(rule, files)
        for callee in _callees(fn, files) if fn is not None else ():
            if callee.__name__.startswith("_") and callee.__qualname__ not in named:
                named.add(callee.__qualname__)
                found.append(_rule(rule.primitive, f"helper of {rule.function}", callee))
    return found


def _function(rule: Rule, files: set[str]) -> Callable[..., Any] | None:
    """The function object of a rule, found again by name in its module (None for a nested function)."""
    from jax._src import shard_map as shmap
    from jax._src.lax import parallel

    module = parallel if rule.file == "parallel.py" else shmap
    fn = getattr(module, rule.function, None)
    return fn if inspect.isfunction(fn) and _defined_in_ours(fn, files) else None
