"""The differential campaign: JAX's own transpose and batching rules against meshsim, on generated programs.

`python tests/campaign.py --profile default|large [--mutant NAME]` runs in its own process with 8 CPU devices
and `oracles.install_cpu_ragged_all_to_all()` installed before jax is imported, and prints a JSON report.
For every registered collective, Hypothesis draws calls over the input space its docs allow
(`strategies.cases`: meshes of 1-8 devices, axis tuples, axis_index_groups, operands of rank 1-3, every
dtype; for ragged_all_to_all any offsets and sizes whose writes into `output` stay apart, reads from
`operand` overlapping freely), each one program: a `jax.shard_map` of the `jax.lax` collective on the
stacked per-device blocks, with `check_vma` on or off, and the same program in meshsim. Two properties:

- transpose (linear collectives, float dtypes): `jax.vjp`, `jax.grad` of `vdot(f(x), ct)` and
  `jax.linear_transpose` of the JAX program == meshsim's transpose (`collectives.linear_transpose`, the
  registry's rules), and meshsim's satisfies the adjoint identity <T(ct), x> == <ct, f(x)>;
- vmap (every collective): `jax.vmap` of the JAX program over a batch axis drawn per argument (or none)
  == the program run once per batch element. Here each argument is taken whole (the devices' blocks
  concatenated along the sharded leading axis, the body applying the collective to its block as it is), so
  the batch axis reaches the collective's batching rule at the position drawn, not moved first by indexing.

A disagreement is classified by `KNOWN` (the findings of FINDINGS.md); one that fits none is raised, so
Hypothesis shrinks it to a minimal program and the report carries it under "new".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import oracles  # noqa: E402

oracles.install_cpu_ragged_all_to_all()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from strategies import DTYPES, Case, cases  # noqa: E402

import collectives  # noqa: E402
import sim  # noqa: E402
from oracles import spec  # noqa: E402
from oracles._jax_dispatch import route  # noqa: E402
from oracles._jax_setup import mesh as jax_mesh  # noqa: E402

jax.config.update("jax_enable_x64", True)

PROFILES = {"default": {"transpose": 10, "vmap": 8, "derandomize": True},
            "large": {"transpose": 150, "vmap": 100, "derandomize": False}}
FLOATS = ("bfloat16", "float16", "float32", "float64")
LINEAR = tuple(n for n, d in collectives.REGISTRY.items() if not isinstance(d.transpose, collectives.NotLinear))
BATCHED = tuple(n for n, d in collectives.REGISTRY.items() if d.arrays)


class Disagreement(AssertionError):
    """JAX's rule and meshsim's answer differ in a way no known finding explains."""


def small_ints(shape: tuple[int, ...], dtype: np.dtype, salt: int) -> np.ndarray:
    """Values 0..4 (exact in every dtype, and their sums too), different per device and argument."""
    rng = np.random.default_rng(salt)
    return rng.integers(0, 5, shape).astype(dtype)


def float_dtypes() -> st.SearchStrategy[np.dtype]:
    """bfloat16, float16, float32 and float64 (what jax.grad takes)."""
    return st.sampled_from([d for d in DTYPES if d.name in FLOATS])


def drawn(op: str, floats: bool) -> st.SearchStrategy[tuple[Case, bool]]:
    """A call of `op` (float dtypes when it is to be transposed) and whether the program checks vma."""
    options = {"dtypes": float_dtypes()} if floats else {}
    return st.tuples(cases(op, fillers=st.just(small_ints), **options), st.booleans())


# ---------------------------------------------------------------------------------------------- the programs


class Program:
    """One call as a JAX program and a meshsim program over the same global arrays and specs."""

    def __init__(self, case: Case, check_vma: bool, whole: bool = False) -> None:
        self.definition = collectives.definition(case.op)
        # JAX runs grouped psum and pmean only unchecked (NotImplementedError otherwise)
        grouped = self.definition.jax.grouped_unchecked and case.params.get("axis_index_groups") is not None
        # psum_invariant exists only in typed programs (JAX refuses an untyped operand)
        self.case, self.check_vma = case, (check_vma and not grouped) or case.op == "psum2"
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
        fn, params = self.definition.function, self.case.params
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
        got = np.asarray(jax.vmap(p.jax, in_axes=tuple(axes))(*stacked))
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


def _ragged(case: Case) -> bool:
    return case.op == "ragged_all_to_all"


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


# Each finding of FINDINGS.md: (property, predicate on the call and check_vma (transpose) or the batch axes (vmap)).
KNOWN: dict[str, tuple[str, Callable[..., bool]]] = {
    "ragged-transpose-ignores-groups": ("transpose", lambda c, *_: _ragged(c)
                                        and c.params["axis_index_groups"] is not None),
    "ragged-transpose-shared-start": ("transpose", lambda c, *_: _ragged(c) and shared_starts(c)),
    "ragged-transpose-overlapping-reads": ("transpose", lambda c, *_: _ragged(c) and overlapping_reads(c)),
    "untiled-all-to-all-transpose": ("transpose", lambda c, *_: c.op == "all_to_all" and not c.params["tiled"]
                                     and c.params["split_axis"] % c.args[0][0].ndim
                                     != c.params["concat_axis"] % c.args[0][0].ndim),
    "unchecked-all-gather-invariant-transpose": ("transpose", lambda c, vma: c.op == "all_gather_invariant"
                                                 and not vma),
    "ragged-vmap-empty-rows": ("vmap", lambda c, *_: _ragged(c) and 0 in c.args[0][0].shape[1:]),
    "ragged-vmap-unbatched-index": ("vmap", lambda c, axes: _ragged(c) and any(a is None for a in axes[2:])),
    "untiled-psum-scatter-vmap-axis": ("vmap", lambda c, axes: c.op == "psum_scatter" and not c.params["tiled"]
                                       and axes[0] is not None
                                       and axes[0] > c.params["scatter_dimension"] % c.args[0][0].ndim),
}


def classify(kind: str, case: Case, *rest: Any) -> str | None:
    """The known finding that explains a disagreement of property `kind` on `case`, or None."""
    return next((name for name, (k, fits) in KNOWN.items() if k == kind and fits(case, *rest)), None)


# ---------------------------------------------------------------------------------------------- the search


def batch_axes(case: Case) -> st.SearchStrategy[list[int | None]]:
    """A batch axis of each whole argument (None: unbatched), at least one batched."""
    ranks = [max(np.asarray(per[0]).ndim, 1) for per in case.args]
    one = st.tuples(*(st.one_of(st.none(), st.integers(0, r)) for r in ranks)).map(list)
    return one.filter(lambda axes: any(a is not None for a in axes))


def search(op: str, kind: str, examples: int, derandomize: bool, shrink: bool = True) -> dict[str, Any]:
    """Run one property of one collective; known disagreements are counted, a new one is shrunk."""
    tally: Counter[str] = Counter()
    known: dict[str, str] = {}
    rest = (st.tuples(st.integers(1, 3), st.data()) if kind == "vmap" else st.just(None))

    @settings(max_examples=examples, deadline=None, database=None, derandomize=derandomize,
              suppress_health_check=list(HealthCheck), print_blob=False,
              phases=list(Phase) if shrink else [Phase.explicit, Phase.reuse, Phase.generate])
    @given(drawn(op, floats=kind == "transpose"), rest)
    def prop(call: tuple[Case, bool], extra: Any) -> None:
        case, check_vma = call
        if kind == "vmap":
            size, data = extra
            axes = data.draw(batch_axes(case), label="in_axes")
            problem, args = vmap_problem(case, check_vma, size, axes), (axes,)
        else:
            problem, args = transpose_problem(case, check_vma), (check_vma,)
        tally["examples"] += 1
        if problem is None:
            return
        name = classify(kind, case, *args)
        if name is None:
            raise Disagreement(f"{op} {kind}, check_vma={check_vma} {args}: {problem}\n{case!r}")
        tally[name] += 1
        known.setdefault(name, f"{problem}\n{case!r}")

    start, new = time.perf_counter(), []
    try:
        prop()
    except Exception as error:
        new = [f"{type(e).__name__}: {e}" for e in getattr(error, "exceptions", [error])]
    return {"op": op, "kind": kind, "examples": tally.pop("examples", 0), "known": dict(tally), "shown": known,
            "new": new, "seconds": round(time.perf_counter() - start, 1)}


def campaign(profile: str, ops: tuple[str, ...] | None = None, shrink: bool = True) -> list[dict[str, Any]]:
    """Every (collective, property) of the profile, in order."""
    sizes = PROFILES[profile]
    chosen = [(op, kind) for kind, names in (("transpose", LINEAR), ("vmap", BATCHED)) for op in names
              if not ops or op in ops]
    return [search(op, kind, sizes[kind], sizes["derandomize"], shrink) for op, kind in chosen]


def main() -> None:
    """Parse the command line, run the campaign (with a mutant, if asked), print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="default")
    parser.add_argument("--ops", nargs="*", help="only these collectives")
    parser.add_argument("--mutant", choices=sorted(MUTANTS), help="run with a deliberately wrong rule")
    parser.add_argument("--no-shrink", action="store_true", help="report a new disagreement unshrunk")
    options = parser.parse_args()
    if options.mutant:
        MUTANTS[options.mutant]()
    start = time.perf_counter()
    rows = campaign(options.profile, tuple(options.ops) if options.ops else None, not options.no_shrink)
    print(json.dumps({"profile": options.profile, "seconds": round(time.perf_counter() - start, 1), "rows": rows}))


def _wrong_psum_transpose() -> None:
    """meshsim's psum transposed to twice the right cotangent."""
    definition = collectives.REGISTRY["psum"]
    right = definition.transpose
    object.__setattr__(definition, "transpose", lambda t: [None if c is None else c * 2 for c in right(t)])


def _wrong_all_gather_batching() -> None:
    """JAX's all_gather batching rule with the batch elements' results reversed."""
    from jax._src.interpreters import batching
    from jax._src.lax import parallel

    right = batching.fancy_primitive_batchers[parallel.all_gather_p]

    def reversed_batch(axis_data: Any, vals: Any, dims: Any, **params: Any) -> Any:
        out, dim = right(axis_data, vals, dims, **params)
        return jax.lax.rev(out, (dim,)), dim

    batching.fancy_primitive_batchers[parallel.all_gather_p] = reversed_batch


MUTANTS = {"psum-transpose": _wrong_psum_transpose, "all-gather-batching": _wrong_all_gather_batching}

if __name__ == "__main__":
    main()
