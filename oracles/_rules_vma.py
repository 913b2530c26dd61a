"""Device-variance typing of `jax.lax`'s multi-operand primitives against the rule and the per-device truth.

The vma kind of the rules campaign. A `VmaCase` (`oracles._vma_table`) calls one primitive inside a
`jax.shard_map` with `check_vma=True`, each operand varying along its own axes. The design note's rule: a
value computed from values that vary along an axis varies along it. `vma_problem` checks it twice:

- on the typed jaxpr: every equation (the primitive's, and those inside its branches, loops and calls,
  collectives excepted: they change variance by definition) gives each result at least the union of its
  operands' varying axes;
- by running: the program is run with `out_specs` that claim invariance wherever JAX typed a result
  invariant (JAX then returns one device's value for all), and that answer is compared with each
  device's own result, computed by the same body under `jax.jit` on that device's blocks alone. A type
  that says invariant for a value that differs between devices is a silent wrong answer.

For example, `jnp.argsort` of an operand varying along `i` is typed invariant (FINDINGS.md 4), and with
`out_specs=P()` every device reads device 0's order. Like `oracles._rules`, import this only in a process
made for it (8 CPU devices).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src.lax import parallel
from jax.sharding import PartitionSpec as P

from oracles._jax_setup import mesh as jax_mesh
from oracles._vma_table import VmaCase

Body = Callable[..., Any]


@jax.custom_jvp
def _product(x: Any, y: Any) -> Any:
    return x * y + y


_product.defjvp(lambda p, t: (_product(*p), t[0] * p[1] + p[0] * t[1] + t[1]))


@jax.custom_vjp
def _mixed(x: Any, y: Any) -> Any:
    return x * y - x


_mixed.defvjp(lambda x, y: (_mixed(x, y), (x, y)), lambda r, g: (g * (r[1] - 1), g * r[0]))


def _sort(v: int) -> Body:
    return lambda a, b, c: tuple(lax.sort((a, b, c), num_keys=1 + v % 3))


def _cond(v: int) -> Body:
    # both branches read both operands, so their results have one type (JAX requires it, the docs say so)
    if v % 3 == 0:
        return lambda p, a, b: lax.cond(p, lambda: a + b * 0, lambda: b * 2 + a * 0)
    if v % 3 == 1:
        return lambda p, a, b: lax.cond(p, lambda x, y: x - y, lambda x, y: y + x * 0, a, b)
    return lambda p, a, b: lax.switch(p.astype(jnp.int32), [lambda: a + b * 0, lambda: b + 1 + a * 0])


def _while(v: int) -> Body:
    if v % 2:
        return lambda n, a: lax.fori_loop(0, n, lambda _, x: x * 2 + 1, a)
    return lambda n, a: lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2 + 1), (0, a))[1]


def _custom(function: Any, v: int) -> Body:
    if v % 2 == 0:
        return function
    if function is _product:  # tangents and cotangents in float32 (an int32 primal's tangent is float0)
        return lambda a, b: jax.jvp(function, (_f32(a), _f32(b)), (_f32(b), _f32(a)))
    # the primal result of jax.vjp (the fwd rule's typing); a bwd rule of mixed variance needs a psum
    return lambda a, b: jax.vjp(function, _f32(a), _f32(b))[0]


def _f32(x: Any) -> Any:
    return x.astype(jnp.float32)


def _callback(v: int) -> Body:
    method = (None, "sequential")[v % 2]
    return lambda a, b: jax.pure_callback(lambda x, y: np.asarray(x * y + x), jax.ShapeDtypeStruct(a.shape, a.dtype),
                                          a, b, vmap_method=method)


def _scan(a: Any, b: Any) -> Any:
    # (a, b) pairs of the affine recurrence x -> a x + b: both parts of the result read both operands
    return lax.associative_scan(lambda p, q: (p[0] * q[0], q[0] * p[1] + q[1] + p[0]), (a, b))


# name -> variant -> the per-device body (operands as `oracles._vma_table.VMA_PRIMITIVES` lists them)
BODIES: dict[str, Callable[[int], Body]] = {
    "sort": _sort,
    "sort_key_val": lambda v: lambda k, x: lax.sort_key_val(k, x),
    "argsort": lambda v: lambda a: jnp.argsort(a, descending=bool(v % 2)),
    "top_k": lambda v: lambda a: tuple(lax.top_k(a, 1 + v % a.shape[0])),
    "scatter": lambda v: lambda a, i, u: a.at[i].set(u),
    "scatter_add": lambda v: lambda a, i, u: a.at[i].add(u),
    "gather": lambda v: lambda a, i: a[i],
    "dynamic_slice": lambda v: lambda a, s: lax.dynamic_slice(a, (s,), (1 + v % a.shape[0],)),
    "dynamic_update_slice": lambda v: lambda a, u, s: lax.dynamic_update_slice(a, u, (s,)),
    "select_n": lambda v: lambda p, a, b: lax.select_n(p, a, b),
    "where": lambda v: lambda p, a, b: jnp.where(p, a, b),
    "cond": _cond,
    "while_loop": _while,
    "cumsum": lambda v: lambda a: lax.cumsum(a, reverse=bool(v % 2)),
    "cumprod": lambda v: lambda a: lax.cumprod(a, reverse=bool(v % 2)),
    "cummax": lambda v: lambda a: (lax.cummin if v % 2 else lax.cummax)(a),
    "associative_scan": lambda v: _scan,
    "concatenate": lambda v: lambda a, b: lax.concatenate([a, b] if v % 2 else [b, a], 0),
    "pad": lambda v: lambda a, s: lax.pad(a, s, [(1 - v % 3, v % 2, v % 2)]),
    "dot_general": lambda v: lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())) if v % 2 else
                                                          (((0,), (1,)), ((), ()))),
    "custom_jvp": lambda v: _custom(_product, v),
    "custom_vjp": lambda v: _custom(_mixed, v),
    "pure_callback": _callback,
}


def _flat(out: Any) -> tuple[Any, ...]:
    return tuple(jax.tree.leaves(out))


def body_of(case: VmaCase) -> Body:
    """The per-device program of `case`: its primitive's body, results as a flat tuple."""
    inner = BODIES[case.primitive](case.variant)
    return lambda *blocks: _flat(inner(*blocks))


# ---------------------------------------------------------------------------------------------- the types


def varying(atom: Any) -> frozenset[str]:
    """The axes JAX's type says `atom` (a jaxpr variable or literal) varies along."""
    mat = getattr(atom.aval, "mat", None)
    return frozenset(mat.varying) if mat is not None else frozenset()


CALLS = ("jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call")


def _exempt(primitive: Any) -> bool:
    """Collectives change variance by definition; a call's results are typed by its jaxpr, checked itself."""
    return getattr(parallel, f"{primitive.name}_p", None) is primitive or primitive.name in CALLS


def _subjaxprs(params: dict[str, Any]) -> Iterator[Any]:
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, jax.extend.core.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, jax.extend.core.Jaxpr):
                yield item


def _read(jaxpr: Any) -> set[Any]:
    """The input variables `jaxpr` reads (in an equation or as a result)."""
    seen = {id(v) for eqn in jaxpr.eqns for v in eqn.invars} | {id(v) for v in jaxpr.outvars}
    return {v for v in jaxpr.invars if id(v) in seen}


def required(eqn: Any) -> frozenset[str]:
    """The axes every result of `eqn` must vary along. cond and while pass each operand to the results
    through their branches' and body's own typed jaxprs (checked there); what those cannot see is the
    choice: cond's results vary along its index's axes, a while loop's along those of what its predicate
    reads (the trip count). Any other primitive: the union of its operands'."""
    if eqn.primitive.name == "cond":
        return varying(eqn.invars[0])
    if eqn.primitive.name == "while":
        cond = eqn.params["cond_jaxpr"].jaxpr
        n, body_n = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        inputs = [*eqn.invars[:n], *eqn.invars[n + body_n:]]
        read = _read(cond)
        return frozenset().union(*(varying(x) for x, v in zip(inputs, cond.invars) if v in read))
    return frozenset().union(*(varying(v) for v in eqn.invars))


def untyped_results(jaxpr: Any) -> list[str]:
    """Each equation (recursively) whose result misses an axis it must vary along (`required`)."""
    found = []
    for eqn in jaxpr.eqns:
        if not _exempt(eqn.primitive):
            union = required(eqn)
            for k, out in enumerate(eqn.outvars):
                if not union <= varying(out):
                    found.append(f"{eqn.primitive.name} result {k} typed varying along {sorted(varying(out))}, "
                                 f"must vary along {sorted(union)}")
        for sub in _subjaxprs(eqn.params):
            found.extend(untyped_results(sub))
    return found


def _typed(case: VmaCase, on: Any, in_specs: tuple) -> tuple[Any, list[frozenset[str]]]:
    """The shard_map body's typed jaxpr and each result's varying axes (before out_specs' pvary)."""
    body = body_of(case)
    everything = P(tuple(case.mesh_shape))
    traced = jax.make_jaxpr(jax.shard_map(lambda *b: body(*(x[0] for x in b)), mesh=on, in_specs=in_specs,
                                          out_specs=everything, check_vma=True))(*case.args)
    [eqn] = [e for e in traced.jaxpr.eqns if e.primitive.name == "shard_map"]
    inner = eqn.params["jaxpr"]
    made = {id(v): e for e in inner.eqns for v in e.outvars}
    typed = []
    for v in inner.outvars:  # the type the body gave, before the pvary that out_specs (every axis) adds
        while id(v) in made and made[id(v)].primitive.name == "pvary":
            v = made[id(v)].invars[0]
        typed.append(varying(v))
    return inner, typed


def _spec(axes: tuple[str, ...]) -> P:
    return P(axes) if axes else P()


def _mesh_order(case: VmaCase, axes: frozenset[str]) -> tuple[str, ...]:
    return tuple(a for a in case.mesh_shape if a in axes)


def vma_problem(case: VmaCase) -> str | None:
    """What breaks the rule in JAX's types of `case`, or where a typed-invariant result differs between
    devices (the silent wrong answer); None when both hold."""
    on = jax_mesh(case.mesh_shape)
    in_specs = tuple(_spec(axes) for axes in case.varying)
    try:
        inner, typed = _typed(case, on, in_specs)
    except Exception as error:  # JAX refusing a valid typed program is a finding, not a crash
        return f"tracing with check_vma=True raised {type(error).__name__}: {str(error)[:300]}"
    problems = untyped_results(inner)
    claimed = [_mesh_order(case, t) for t in typed]
    body = body_of(case)
    mapped = jax.jit(jax.shard_map(lambda *b: tuple(o[None] for o in body(*(x[0] for x in b))), mesh=on,
                                   in_specs=in_specs, out_specs=tuple(_spec(a) for a in claimed), check_vma=True))
    try:
        got = [np.asarray(o) for o in mapped(*case.args)]
    except Exception as error:
        return f"running with out_specs as typed {claimed} raised {type(error).__name__}: {str(error)[:300]}"
    local = jax.jit(body)
    truths = [[np.asarray(o) for o in local(*case.blocks(d))] for d in range(case.devices)]
    for k, axes in enumerate(claimed):
        for d, truth in enumerate(truths):
            want, seen = truth[k], got[k][case.row(d, axes)]
            if seen.shape != want.shape or not np.array_equal(seen, want):
                where = f"invariant along {sorted(set(case.mesh_shape) - set(axes))}"
                problems.append(f"silent wrong answer: result {k} typed {where}, out_specs {_spec(axes)}: device {d} "
                                f"{case.coords(d)} computes {want.ravel()[:12]}, JAX returns {seen.ravel()[:12]}")
                break
    return "\n".join(problems[:6]) or None
