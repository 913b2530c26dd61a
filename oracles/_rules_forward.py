"""JAX's forward mode and compositions of transformations on one generated call: two kinds of the rules campaign.

Both take a linear collective's call in a float dtype (as `oracles._rules.transpose_problem` does) and judge
JAX by answers that do not come from the rule under test:

- `jvp_problem`: `jax.jvp` and `jax.linearize` of the program. Their primal output equals the program's; the
  tangent equals the central finite difference (f(x + h t) - f(x - h t)) / 2h of the same program rebuilt in
  float64 (exact up to float64 rounding for a linear program); and JAX's forward and reverse modes agree,
  <jvp(t), ct> == <t, vjp(ct)> in float64. A disagreement of that last identity alone is a fault of the
  transpose (the tangent was right), so it is classified with `KNOWN`'s transpose findings.
- `compose_problem`: `jax.vmap` of `jax.grad`, `jax.grad` of `jax.vmap` and `jax.jvp` of `jax.vmap` of the
  program (each argument whole with a drawn batch axis, as `vmap_problem` takes them), each against the
  inner transformation run once per batch element and the results stacked (or, for the gradient of an
  argument shared by every batch element, summed).

Each returns `(problem, side)`: the text of what differs (None when nothing does) and which of JAX's rules
it points at ("jvp", "transpose" or "vmap"), for `classify`. Like `oracles._rules`, this imports jax with
64-bit types: import it only in a process made for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import collectives
from oracles._rules import KNOWN, Case, Program, small_ints

FD_STEP = 0.5  # any step is exact for a linear program up to float64 rounding; this one keeps values small

Outcome = tuple[str | None, str]  # (what differs, the rule it points at)


def close(want: Any, got: Any, ulps: float = 8.0, dtype: Any = None) -> bool:
    """Equal shapes, values within `ulps` roundings of `dtype` (default: `got`'s) relative to max(1, |want|), NaN
    where the other is NaN (float8_e8m0fnu holds no zero: a loop's zero carry is its NaN)."""
    want, got = np.asarray(want), np.asarray(got)
    if want.shape != got.shape:
        return False
    kind = np.dtype(dtype if dtype is not None else got.dtype)
    eps = float(jnp.finfo(kind).eps) if jnp.issubdtype(kind, jnp.inexact) else 0.0
    w, g = want.astype(np.float64), got.astype(np.float64)
    return bool(np.all((np.abs(w - g) <= ulps * eps * np.maximum(1, np.abs(w))) | (np.isnan(w) & np.isnan(g))))


def shown(name: str, want: Any, got: Any) -> str:
    """Both answers' first values, for a report."""
    return f"{name}:\n  want {np.asarray(want).ravel()[:24]}\n  jax  {np.asarray(got).ravel()[:24]}"


def _linear_fn(p: Program, program: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """The program as a function of its linear arguments only (the index arrays held)."""
    run = program or p.jax
    return lambda *ls: run(*p.with_linear(ls))


def _float64(p: Program) -> Program:
    """The same call with every linear argument in float64 (index arrays unchanged)."""
    args = tuple(tuple(np.asarray(x, np.float64) for x in arg) if k in p.linear else arg
                 for k, arg in enumerate(p.case.args))
    return Program(dataclasses.replace(p.case, args=args), p.check_vma)


# ---------------------------------------------------------------------------------------------- jvp


def jvp_problem(case: Case, check_vma: bool) -> Outcome:
    """What differs between JAX's jvp / linearize of the program, the float64 finite difference and JAX's vjp."""
    p = Program(case, check_vma)
    linear = tuple(p.globals[k] for k in p.linear)
    tangents = tuple(small_ints(x.shape, x.dtype, 11 + k) for k, x in enumerate(linear))
    f = _linear_fn(p)
    try:
        primal, tangent = jax.jit(lambda ls, ts: jax.jvp(f, ls, ts))(linear, tangents)
        lin_primal, f_jvp = jax.linearize(f, *linear)
        lin_tangent = f_jvp(*tangents)
    except Exception as error:  # JAX's rule failing is a finding, not a crash of the campaign
        return f"JAX's jvp raised {type(error).__name__}: {str(error)[:300]}", "jvp"
    forward = np.asarray(p.jax(*p.globals))
    for name, got in (("jax.jvp", primal), ("jax.linearize", lin_primal)):
        if not close(forward, got, 4.0):
            return shown(f"{name}: the primal output differs from the program's", forward, got), "jvp"
    fd = finite_difference(p, tangents)
    for name, got in (("jax.jvp", tangent), ("jax.linearize", lin_tangent)):
        if not close(fd, got, 8.0, forward.dtype):
            return shown(f"{name}: the tangent differs from the float64 finite difference", fd, got), "jvp"
    return _forward_reverse(p, f, linear, tangents, np.asarray(tangent, np.float64)), "transpose"


def finite_difference(p: Program, tangents: tuple) -> np.ndarray:
    """(f(x + h t) - f(x - h t)) / 2h of the program rebuilt in float64."""
    wide = _float64(p)
    ts = [np.asarray(t, np.float64) for t in tangents]
    plus = wide.with_linear(tuple(np.asarray(wide.globals[k]) + FD_STEP * t for k, t in zip(wide.linear, ts)))
    minus = wide.with_linear(tuple(np.asarray(wide.globals[k]) - FD_STEP * t for k, t in zip(wide.linear, ts)))
    return (np.asarray(wide.jax(*plus)) - np.asarray(wide.jax(*minus))) / (2 * FD_STEP)


def _forward_reverse(p: Program, f: Callable[..., Any], linear: tuple, tangents: tuple,
                     tangent: np.ndarray) -> str | None:
    """<jvp(t), ct> == <t, vjp(ct)> in float64, or what breaks it."""
    ct = small_ints(tangent.shape, np.dtype(p.globals[p.linear[0]].dtype), 7)
    try:
        back = jax.jit(lambda ls, c: jax.vjp(f, *ls)[1](c))(linear, ct)
    except Exception as error:
        return f"JAX's vjp (the transpose of its jvp) raised {type(error).__name__}: {str(error)[:300]}"
    lhs = float(np.vdot(tangent, np.asarray(ct, np.float64)))
    rhs = sum(float(np.vdot(np.asarray(t, np.float64), np.asarray(b, np.float64))) for t, b in zip(tangents, back))
    if abs(lhs - rhs) > 1e-2 * max(1.0, abs(lhs)):
        return f"JAX's forward and reverse modes disagree: <jvp(t), ct>={lhs}, <t, vjp(ct)>={rhs}"
    return None


# ---------------------------------------------------------------------------------------------- compose

COMPOSITIONS = ("vmap_of_grad", "grad_of_vmap", "jvp_of_vmap")


def compose_problem(case: Case, check_vma: bool, size: int, axes: list[int | None]) -> Outcome:
    """What differs between each composition of JAX's transformations and its per-batch loop."""
    p = Program(case, check_vma, whole=True)
    rng = np.random.default_rng(size)
    variants = [[g + rng.integers(0, 3, g.shape).astype(g.dtype) if a is not None and k in p.linear else g
                 for k, (g, a) in enumerate(zip(p.globals, axes))] for _ in range(size)]
    out = np.asarray(p.jax(*p.globals))
    cts = [small_ints(out.shape, out.dtype, 20 + b) for b in range(size)]
    for name in COMPOSITIONS:
        try:
            problem = _COMPOSED[name](p, variants, axes, cts)
        except NotImplementedError as error:  # JAX's documented refusals (ragged with groups, ...)
            if "feature request" in str(error) or "axis_index_groups" in str(error):
                return None, "vmap"
            return f"{name}: {error}", "vmap"
        except Exception as error:
            return f"{name} raised {type(error).__name__}: {str(error)[:300]}", "vmap"
        if problem is not None:
            return f"{name}: {problem}", "vmap"
    return None, "vmap"


def _stack(p: Program, variants: list[list], axes: list[int | None]) -> list:
    return [p.globals[k] if a is None else np.stack([v[k] for v in variants], axis=a) for k, a in enumerate(axes)]


def _vjp_of(p: Program) -> Callable[..., Any]:
    """args, ct -> JAX's cotangents of the linear arguments."""
    return lambda args, ct: jax.vjp(lambda *ls: p.jax(*_put(p, args, ls)), *(args[k] for k in p.linear))[1](ct)


def _put(p: Program, args: list, ls: tuple) -> list:
    args = list(args)
    for k, v in zip(p.linear, ls):
        args[k] = v
    return args


def _vmap_of_grad(p: Program, variants: list[list], axes: list[int | None], cts: list) -> str | None:
    loop = [jax.jit(_vjp_of(p))(v, ct) for v, ct in zip(variants, cts)]
    got = jax.jit(jax.vmap(_vjp_of(p), in_axes=(list(axes), 0)))(_stack(p, variants, axes), np.stack(cts))
    for j, k in enumerate(p.linear):
        want = np.stack([np.asarray(one[j]) for one in loop])
        if not close(want, got[j]):
            return shown(f"the cotangent of argument {k} differs from the per-batch vjp", want, got[j])
    return None


def _grad_of_vmap(p: Program, variants: list[list], axes: list[int | None], cts: list) -> str | None:
    stacked = _stack(p, variants, axes)
    batched = jax.vmap(p.jax, in_axes=tuple(axes))
    got = jax.jit(lambda args, c: jax.vjp(lambda *ls: batched(*_put(p, args, ls)),
                                          *(args[k] for k in p.linear))[1](c))(stacked, np.stack(cts))
    loop = [jax.jit(_vjp_of(p))(v, ct) for v, ct in zip(variants, cts)]
    for j, k in enumerate(p.linear):
        parts = [np.asarray(one[j], np.float64) for one in loop]
        want = sum(parts) if axes[k] is None else np.stack(parts, axis=axes[k])
        if not close(want, got[j], 8.0 * len(parts)):
            return shown(f"the cotangent of argument {k} differs from the per-batch vjp", want, got[j])
    return None


def _jvp_at(p: Program, fn: Callable[..., Any]) -> Callable[..., Any]:
    """args, tangents of the linear arguments -> JAX's tangent of `fn`'s output."""
    return lambda args, t: jax.jvp(lambda *ls: fn(*_put(p, args, ls)), tuple(args[k] for k in p.linear), tuple(t))[1]


def _jvp_of_vmap(p: Program, variants: list[list], axes: list[int | None], cts: list) -> str | None:
    size = len(variants)
    ts = [[small_ints(p.globals[k].shape, p.globals[k].dtype, 40 + 7 * b + k) for k in p.linear] for b in range(size)]
    # an unbatched argument's tangent is one for every batch element
    ts = [[ts[0][j] if axes[k] is None else t for j, (k, t) in enumerate(zip(p.linear, one))] for one in ts]
    loop = [np.asarray(jax.jit(_jvp_at(p, p.jax))(v, t)) for v, t in zip(variants, ts)]
    tangents = [ts[0][j] if axes[k] is None else np.stack([one[j] for one in ts], axis=axes[k])
                for j, k in enumerate(p.linear)]
    batched = jax.vmap(p.jax, in_axes=tuple(axes))
    got = jax.jit(_jvp_at(p, batched))(_stack(p, variants, axes), tangents)
    want = np.stack(loop)
    if not close(want, got):
        return shown("the tangent differs from the per-batch jvp", want, got)
    return None


_COMPOSED: dict[str, Callable[..., str | None]] = {"vmap_of_grad": _vmap_of_grad, "grad_of_vmap": _grad_of_vmap,
                                                   "jvp_of_vmap": _jvp_of_vmap}


# ---------------------------------------------------------------------------------------------- what is known


def classify_side(side: str, kind: str, case: Case, check_vma: bool, axes: list[int | None] | None,
                  problem: str = "") -> str | None:
    """The finding of `KNOWN` that explains a disagreement pointing at JAX's rule `side` ("jvp", "transpose",
    "vmap", or "control_flow": the construct's own, judged on the call, check_vma and JAX's `problem`).
    Under a composition a transpose finding or a batching one may explain it, the transpose's judged on the
    call as batched (each batched data argument one dimension more: a scalar pbroadcast
    vmapped is a non-scalar one to its transpose). Where a call fits findings of both rules, the batching
    ones are tried first when JAX raised an AssertionError (the symptom of ragged_all_to_all's batching
    rule with an unbatched index array, FINDINGS.md 9), the transpose ones first otherwise."""
    views = [case]
    sides: tuple[str, ...] = (side,)
    if kind == "compose":
        sides = ("vmap", "transpose") if "AssertionError" in problem else ("transpose", "vmap")
        views = [case, batched_view(case, axes or [])]
    for rule in sides:
        for name, (of, fits) in KNOWN.items():
            if of != rule:
                continue
            if rule == "vmap":
                if axes is not None and fits(case, axes):
                    return name
            elif rule == "control_flow":  # judged on JAX's message too: the construct is not in the call
                if fits(case, check_vma, problem):
                    return name
            elif any(fits(view, check_vma) for view in views):
                return name
    return None


def batched_view(case: Case, axes: list[int | None]) -> Case:
    """`case` with a batch dimension of one inserted where `axes` batches a data argument."""
    d = collectives.definition(case.op)
    args = tuple(arg if k >= len(axes) or axes[k] is None or d.arrays[k] in d.index_arrays
                 else tuple(np.expand_dims(x, min(axes[k], np.ndim(x))) for x in arg)
                 for k, arg in enumerate(case.args))
    return dataclasses.replace(case, args=args)
