"""JAX's own transpose and batching rules against meshsim on one generated call: the JAX side of the campaign.

A call (any object with a collective's `op`, `mesh_shape`, per-device `args` and `params`, like
`scenarios`' generated cases) becomes a `Program`: a `jax.shard_map` of the `jax.lax` collective on the
stacked per-device blocks, with `check_vma` on or off, and the same program in meshsim. Two properties:

- `transpose_problem` (linear collectives, float dtypes): `jax.vjp`, `jax.grad` of `vdot(f(x), ct)` and
  `jax.linear_transpose` of the JAX program == meshsim's transpose (`collectives.linear_transpose`, the
  registry's rules), and meshsim's satisfies the adjoint identity <T(ct), x> == <ct, f(x)>;
- `vmap_problem` (every collective): `jax.vmap` of the JAX program over a batch axis per argument (or
  none, even for every argument: the batching rules' unbatched branches) == the program run once per
  batch element. Here each argument is taken whole (the devices' blocks
  concatenated along the sharded leading axis, the body applying the collective to its block as it is), so
  the batch axis reaches the collective's batching rule at the position drawn, not moved first by indexing.

`classify` names the finding of FINDINGS.md (its `KNOWN` table) that explains a disagreement. This module
imports jax with 64-bit types on: import it only in a process made for it, with 8 CPU devices and
`oracles.install_cpu_lowerings()` installed before jax (`python -m scenarios.campaign._rules_worker`,
`tests/campaign.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import collectives
import sim
from oracles import spec
from oracles._jax_dispatch import route
from oracles._jax_setup import mesh as jax_mesh

jax.config.update("jax_enable_x64", True)

Case = Any  # a generated call: `op`, `mesh_shape`, `args[k][d]`, `params`


def small_ints(shape: tuple[int, ...], dtype: np.dtype, salt: int) -> np.ndarray:
    """Values 0..4 (exact in every dtype, and their sums too), different per device and argument."""
    rng = np.random.default_rng(salt)
    return rng.integers(0, 5, shape).astype(dtype)


# ---------------------------------------------------------------------------------------------- the programs


class Program:
    """One call as a JAX program and a meshsim program over the same global arrays and specs."""

    def __init__(self, case: Case, check_vma: bool, whole: bool = False) -> None:
        self.definition = collectives.definition(case.op)
        # JAX runs grouped psum and pmean only unchecked (NotImplementedError otherwise)
        grouped = self.definition.jax.grouped_unchecked and case.params.get("axis_index_groups") is not None
        # psum_invariant exists only in typed programs (JAX refuses an untyped operand)
        typed_only = self.definition is collectives.REGISTRY.of(collectives.psum_invariant)
        self.case, self.check_vma = case, (check_vma and not grouped) or typed_only
        on = jax_mesh(case.mesh_shape)
        found = route(case.op).operands(on, case.args, case.params)
        # whole: device d's block is rows d*m..(d+1)*m of its argument, no leading device axis to index away
        self.whole = whole and all(np.asarray(per[0]).ndim > 0 for per in case.args)
        self.globals = [g.reshape(g.shape[0] * g.shape[1], *g.shape[2:]) if self.whole else g for g, _ in found]
        self.jax_specs = tuple(s for _, s in found)
        self.linear = [k for k, name in enumerate(self.definition.arrays) if name not in self.definition.index_arrays]
        self.jax = jax.jit(jax.shard_map(self._jax_body(), mesh=on, in_specs=self.jax_specs,
                                         out_specs=jax.sharding.PartitionSpec(on.axis_names), check_vma=self.check_vma))

    def _jax_body(self) -> Callable[..., Any]:
        body = route(self.case.op).body(self.case.params)
        if self.whole:
            return lambda *blocks: body(*blocks)[None]
        return lambda *blocks: body(*(b[0] for b in blocks))[None]

    def meshsim(self) -> sim.ShardMapped:
        """The same program with meshsim's collective (the specs JAX's got, as sim.P)."""
        fn, params = self.definition.call, self.case.params
        return sim.shard_map(lambda *b: fn(*(x[0] for x in b), **params)[None],
                             mesh=sim.Mesh(dict(self.case.mesh_shape)),
                             in_specs=tuple(sim.P(*tuple(s)) for s in self.jax_specs),
                             out_specs=sim.P(tuple(self.case.mesh_shape)), check_vma=self.check_vma)

    def with_linear(self, values: tuple) -> list:
        args = list(self.globals)
        for k, v in zip(self.linear, values):
            args[k] = v
        return args


def same(want: np.ndarray, got: Any) -> bool:
    """Equal shape and dtype, values within a few roundings of the dtype (pmean divides; nothing else rounds)."""
    got = np.asarray(got)
    if want.shape != got.shape or want.dtype != got.dtype:
        return False
    w, g = want.astype(np.float64), got.astype(np.float64)
    eps = float(jnp.finfo(want.dtype).eps) if jnp.issubdtype(want.dtype, jnp.inexact) else 0.0
    return bool(np.all(np.abs(w - g) <= 4 * eps * np.maximum(1, np.abs(w))))


def transpose_problem(case: Case, check_vma: bool) -> str | None:
    """What differs between JAX's three transposes and meshsim's (or meshsim's and the adjoint identity)."""
    p = Program(case, check_vma)
    forward = np.asarray(p.jax(*p.globals))
    ct = small_ints(forward.shape, forward.dtype, 7)
    transposed = collectives.linear_transpose(p.meshsim(), *p.globals, linear_argnums=tuple(p.linear))
    others = [g for k, g in enumerate(p.globals) if k not in p.linear]
    mine = [np.asarray(x) for x in _tuple(transposed.run(*others, ct).outputs)]
    linear = tuple(p.globals[k] for k in p.linear)
    try:
        theirs = _jax_transposes(p, linear, ct)
    except Exception as error:  # JAX's rule failing is a finding, not a crash of the campaign
        return f"JAX's transpose raised {type(error).__name__}: {str(error)[:300]}"
    lhs = float(np.vdot(forward.astype(np.float64), ct.astype(np.float64)))
    if not adjoint(p, lhs, mine):
        jax_ok = [kind for kind, got in theirs.items() if adjoint(p, lhs, got)]
        jax_side = jax_ok if jax_ok else f"does too ({pairing(p, theirs['jax.vjp'])})"
        return (f"meshsim's transpose breaks the adjoint identity (<ct, f(x)>={lhs}, <T(ct), x>="
                f"{pairing(p, mine)}); JAX's: {jax_side}")
    for kind, got in theirs.items():
        for k, want, g in zip(p.linear, mine, got):
            if not same(want, g):
                return (f"{kind}: the cotangent of argument {k} differs from meshsim's (which satisfies the "
                        f"adjoint identity):\n  meshsim {want.ravel()[:24]}\n  jax     {np.asarray(g).ravel()[:24]}")
    return None


def pairing(p: Program, back: list) -> float:
    """<T(ct), x> over the linear arguments, in float64."""
    return sum(float(np.vdot(np.asarray(p.globals[k], np.float64), np.asarray(b, np.float64)))
               for k, b in zip(p.linear, back))


def adjoint(p: Program, lhs: float, back: list) -> bool:
    """<T(ct), x> == <ct, f(x)> (`lhs`), up to pmean's rounding."""
    return abs(pairing(p, back) - lhs) <= 1e-2 * max(1.0, abs(lhs))


def _tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _jax_transposes(p: Program, linear: tuple, ct: np.ndarray) -> dict[str, list]:
    def f(*ls: Any) -> Any:
        return p.jax(*p.with_linear(ls))

    def all_three(ls: tuple, ct: Any) -> tuple:
        vjp = jax.vjp(f, *ls)[1](ct)
        grad = jax.grad(lambda *a: jnp.vdot(f(*a).astype(jnp.float32), ct.astype(jnp.float32)),
                        argnums=tuple(range(len(ls))))(*ls)
        return vjp, grad, jax.linear_transpose(f, *ls)(ct)

    vjp, grad, lt = jax.jit(all_three)(linear, ct)
    return {"jax.vjp": list(vjp), "jax.grad": list(grad), "jax.linear_transpose": list(lt)}


def vmap_problem(case: Case, check_vma: bool, size: int, axes: list[int | None]) -> str | None:
    """What differs between jax.vmap of the program and the program run once per batch element."""
    p = Program(case, check_vma, whole=True)
    rng = np.random.default_rng(size)
    variants = [[g if a is None else (g + rng.integers(0, 3, g.shape).astype(g.dtype) if k in p.linear else g)
                 for k, (g, a) in enumerate(zip(p.globals, axes))] for _ in range(size)]
    loop = [np.asarray(p.jax(*v)) for v in variants]
    stacked = [p.globals[k] if a is None else np.stack([v[k] for v in variants], axis=a) for k, a in enumerate(axes)]
    try:
        got = np.asarray(jax.vmap(p.jax, in_axes=tuple(axes), axis_size=size)(*stacked))
    except NotImplementedError as error:  # JAX's documented refusals (ragged with groups, ...)
        return None if "feature request" in str(error) or "axis_index_groups" in str(error) else str(error)
    except Exception as error:
        return f"jax.vmap raised {type(error).__name__}: {str(error)[:300]}"
    for b, want in enumerate(loop):
        if got[b].shape != want.shape or got[b].tobytes() != want.tobytes():
            return (f"batch element {b} differs from the per-batch run:\n  loop {want.ravel()[:24]}\n"
                    f"  vmap {got[b].ravel()[:24]}")
    return None


# ---------------------------------------------------------------------------------------------- what is known


def _is(case: Case, function: Callable[..., Any]) -> bool:
    """Whether `case` calls the collective whose public function is `function`."""
    return collectives.definition(case.op) is collectives.REGISTRY.of(function)


def _ragged(case: Case) -> bool:
    return _is(case, collectives.ragged_all_to_all)


def shared_starts(case: Case) -> bool:
    """A receiver has two slices starting at one output row (at least one of them empty)."""
    starts = spec.all_to_all(list(case.args[4]), case.mesh_shape, case.params["axis_name"], 0, 0,
                             axis_index_groups=case.params["axis_index_groups"], tiled=True)
    return any(len(set(map(int, s))) < len(s) for s in starts)


def overlapping_reads(case: Case) -> bool:
    """Two non-empty send slices of one device read a common operand row."""
    for offsets, sizes in zip(case.args[2], case.args[3]):
        rows = [r for o, n in zip(offsets, sizes) for r in range(int(o), int(o) + int(n))]
        if len(rows) != len(set(rows)):
            return True
    return False


def _permutes(case: Case) -> bool:
    """The call binds JAX's ppermute (ppermute, pshuffle, and psend/precv's equivalent)."""
    return case.op in ("ppermute", "pshuffle", "psend", "precv")


def _vmap_axis_in_tuple(case: Case) -> bool:
    """The axis_name is a tuple of the vmapped (last) mesh axis and another."""
    names = case.params["axis_name"]
    return isinstance(names, tuple) and len(names) > 1 and list(case.mesh_shape)[-1] in names


# Reductions whose partial-manual program XLA:CPU aborts on in bfloat16 (FINDINGS.md 16): before it runs
REDUCING = ("psum", "pmean", "pmax", "pmin", "psum_scatter", "psum_invariant")


def bfloat16_reduction(case: Case) -> bool:
    """A reduction over bfloat16 (its partial-manual program kills the process: check before running it)."""
    return case.op in REDUCING and np.asarray(case.args[0][0]).dtype == np.dtype("bfloat16")


# Each finding of FINDINGS.md: (property, predicate on the call and check_vma (transpose) or the batch axes (vmap)).
KNOWN: dict[str, tuple[str, Callable[..., bool]]] = {
    "ragged-transpose-ignores-groups": ("transpose", lambda c, *_: _ragged(c)
                                        and c.params["axis_index_groups"] is not None),
    "ragged-transpose-shared-start": ("transpose", lambda c, *_: _ragged(c) and shared_starts(c)),
    "ragged-transpose-overlapping-reads": ("transpose", lambda c, *_: _ragged(c) and overlapping_reads(c)),
    "untiled-all-to-all-transpose": ("transpose", lambda c, *_: _is(c, collectives.all_to_all) and not c.params["tiled"]
                                     and c.params["split_axis"] % c.args[0][0].ndim
                                     != c.params["concat_axis"] % c.args[0][0].ndim),
    "unchecked-all-gather-invariant-transpose": ("transpose", lambda c, vma: _is(c, collectives.all_gather_invariant)
                                                 and not vma),
    "pbroadcast-transpose-non-scalar": ("transpose", lambda c, *_: c.op == "pbroadcast"
                                        and any(np.ndim(x) > 0 for x in c.args[0])),
    "ragged-vmap-empty-rows": ("vmap", lambda c, *_: _ragged(c) and 0 in c.args[0][0].shape[1:]),
    "ragged-vmap-unbatched-index": ("vmap", lambda c, axes: _ragged(c) and any(a is None for a in axes[2:])),
    "untiled-psum-scatter-vmap-axis": ("vmap", lambda c, axes: _is(c, collectives.psum_scatter)
                                       and not c.params["tiled"]
                                       and axes[0] is not None
                                       and axes[0] > c.params["scatter_dimension"] % c.args[0][0].ndim),
    # vmap with axis_name (oracles._rules_named): predicates on the call, check_vma, unbatched and JAX's answer
    "vmap-axis-typed-as-mesh-axis": ("vmap_named", lambda c, vma, unbatched, problem: any(
        where in problem for where in ("in core.py:pvary", "in parallel.py:_get_from"))),
    "vmap-axis-ppermute-tuple": ("vmap_named", lambda c, *_: _permutes(c) and _vmap_axis_in_tuple(c)),
    "vmap-axis-ppermute-partial-perm": ("vmap_named", lambda c, vma, unbatched, problem: _permutes(c)
                                        and "Permutation doesn't match the axis size" in problem),
    "vmap-axis-pbroadcast-take": ("vmap_named", lambda c, vma, unbatched, problem: c.op == "pbroadcast"
                                  and "take requires ndarray" in problem),
    "eager-shard-map-zero-size": ("vmap_named", lambda c, vma, unbatched, problem: problem.startswith("(eager)")
                                  and "could not broadcast input array" in problem),
    "vmap-psend-precv": ("vmap_pair", lambda c, problem: "unexpected keyword argument 'out_shape'" in problem),
    "vmap-axis-all-to-all-unbatched": ("vmap_named", lambda c, vma, unbatched, problem: unbatched
                                       and c.op in ("all_to_all", "pswapaxes") and "differs" in problem),
    # vma: the `oracles._vma_table.VmaCase` and nothing else; partial_manual: the call, check_vma, manual axes
    "argsort-typed-invariant": ("vma", lambda c, *_: (c.primitive == "argsort" and bool(c.varying[0]))
                                or (c.primitive == "sort_key_val" and c.varying[0] != c.varying[1])),
    "cond-typed-without-index": ("vma", lambda c, *_: c.primitive == "cond"
                                 and not set(c.varying[0]) <= set(c.varying[1]) | set(c.varying[2])),
    "while-typed-without-predicate": ("vma", lambda c, *_: c.primitive == "while_loop" and bool(c.varying[0])),
    "pure-callback-typed-invariant": ("vma", lambda c, *_: c.primitive == "pure_callback" and any(c.varying)),
    "partial-manual-bfloat16-reduction": ("partial_manual", lambda c, *_: bfloat16_reduction(c)),
    # control_flow: the call, check_vma and JAX's message (the construct is in the message)
    "nested-shard-map-grad-residuals": ("control_flow", lambda c, vma, problem: vma and problem.startswith(
        "nested: jax.vjp raised ValueError: Cannot lower jaxpr with verifier errors")),
    "size-one-axis-all-reduce": ("control_flow", lambda c, vma, problem: problem.startswith("nested: ")
                                 and "allreduce must be in (partial) manual partitioning mode" in problem),
}


def classify(kind: str, case: Case, *rest: Any) -> str | None:
    """The known finding that explains a disagreement of property `kind` on `case`, or None."""
    return next((name for name, (k, fits) in KNOWN.items() if k == kind and fits(case, *rest)), None)


