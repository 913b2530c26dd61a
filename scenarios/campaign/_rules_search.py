"""The search of the rules campaign: Hypothesis draws calls and batch axes, `oracles._rules` judges them.

`search(op, kind, examples, seed)` runs one property ("transpose" or "vmap") of one collective over
`scenarios.campaign._cases.cases(op)` (for "transpose", float dtypes only: what `jax.grad` takes), with `check_vma`
drawn on or off and, for "vmap", a batch size of 1-3 and a batch axis per argument. A disagreement that a
finding of FINDINGS.md explains is counted under its id; one that none explains is shrunk by Hypothesis to
a minimal program and returned under "new". Like `oracles._rules`, this imports jax: only a process made
for it imports it (`python -m scenarios.campaign._rules_worker`, `tests/campaign.py`).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as seeded
from hypothesis import strategies as st

from layouts import MeshError
from oracles._rules import classify, small_ints, transpose_problem, vmap_problem
from oracles._rules_named import named, named_vmap_problem, pair_vmap_problem
from scenarios.campaign._answers import Case
from scenarios.campaign._cases import DTYPES, cases

FLOATS = ("bfloat16", "float16", "float32", "float64")


class Disagreement(MeshError, AssertionError):
    """JAX's rule and meshsim's answer differ in a way no known finding explains."""


def float_dtypes() -> st.SearchStrategy[np.dtype]:
    """bfloat16, float16, float32 and float64 (what jax.grad takes)."""
    return st.sampled_from([d for d in DTYPES if d.name in FLOATS])


def drawn(op: str, floats: bool) -> st.SearchStrategy[tuple[Case, bool]]:
    """A call of `op` (float dtypes when it is to be transposed) and whether the program checks vma."""
    options = {"dtypes": float_dtypes()} if floats else {}
    return st.tuples(cases(op, fillers=st.just(small_ints), **options), st.booleans())


def batch_axes(case: Case) -> st.SearchStrategy[list[int | None]]:
    """A batch axis of each whole argument (None: unbatched), at least one batched; one draw in eight none
    at all (the batching rules' branches for operands the batch does not touch)."""
    ranks = [max(np.asarray(per[0]).ndim, 1) for per in case.args]
    one = st.tuples(*(st.one_of(st.none(), st.integers(0, r)) for r in ranks)).map(list)
    touched = one.filter(lambda axes: any(a is not None for a in axes))
    return st.integers(0, 7).flatmap(lambda k: st.just([None] * len(ranks)) if k == 0 else touched)


def search(op: str, kind: str, examples: int, seed: int | None = None, shrink: bool = True) -> dict[str, Any]:
    """Run property `kind` of collective `op` on `examples` drawn calls (derandomized when `seed` is None).

    Returns:
        `{"op", "kind", "examples", "known", "shown", "new", "seconds"}`: programs run (shrinking included),
        known disagreements by finding id with the first of each shown, new ones shrunk, as text.
    """
    tally: Counter[str] = Counter()
    known: dict[str, str] = {}
    rest = (st.tuples(st.integers(1, 3), st.data()) if kind == "vmap" else st.just(None))

    @settings(max_examples=examples, deadline=None, database=None, derandomize=seed is None,
              suppress_health_check=list(HealthCheck), print_blob=False,
              phases=list(Phase) if shrink else [Phase.explicit, Phase.reuse, Phase.generate])
    @given(drawn(op, floats=kind == "transpose"), rest)
    def prop(call: tuple[Case, bool], extra: Any) -> None:
        case, check_vma = call
        kind_ = kind
        if kind == "vmap" and named(case) and extra[1].draw(st.integers(0, 3), label="named") == 0:
            kind_, unbatched = "vmap_named", extra[1].draw(st.booleans(), label="unbatched")
            problem = named_vmap_problem(case, check_vma, unbatched, extra[1].draw(st.booleans(), label="eager"))
            args = (check_vma, unbatched, problem)
        elif kind == "vmap":
            size, data = extra
            axes = data.draw(batch_axes(case), label="in_axes")
            problem, args = vmap_problem(case, check_vma, size, axes), (axes,)
            if problem is None and case.op in ("psend", "precv"):  # the pair as JAX binds it, traced
                kind_, problem = "vmap_pair", pair_vmap_problem(case, check_vma, axes)
                args = (problem,)
        else:
            problem, args = transpose_problem(case, check_vma), (check_vma,)
        tally["examples"] += 1
        if problem is None:
            return
        name = classify(kind_, case, *args)
        if name is None:
            raise Disagreement(f"{op} {kind_}, check_vma={check_vma} {args}: {problem}\n{case!r}")
        tally[name] += 1
        known.setdefault(name, f"{problem}\n{case!r}")

    start, new = time.perf_counter(), []
    try:
        (prop if seed is None else seeded(seed)(prop))()
    except Exception as error:
        new = [f"{type(e).__name__}: {e}" for e in getattr(error, "exceptions", [error])]
    return {"op": op, "kind": kind, "examples": tally.pop("examples", 0), "known": dict(tally), "shown": known,
            "new": new, "seconds": round(time.perf_counter() - start, 1)}
