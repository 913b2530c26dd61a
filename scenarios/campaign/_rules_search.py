"""The search of the rules campaign: Hypothesis draws calls and batch axes, `oracles._rules` judges them.

`search(op, kind, examples, seed)` runs one property ("transpose", "vmap", or `FORWARD`'s "jvp", "compose"
and "control_flow"; "vma" and "partial_manual" are `scenarios.campaign._vma_search`'s) of one collective over
`scenarios.campaign._cases.cases(op)` (for the differentiated kinds, float dtypes only: what `jax.grad` takes),
with `check_vma` drawn on or off and, for "vmap" and "compose", a batch size of 1-3 and a batch axis per
argument, for "control_flow" a construct and a predicate (`oracles._rules_forward`, `oracles._rules_control`).
A disagreement that a
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
from oracles._rules_control import batch_axes as control_batch_axes
from oracles._rules_control import constructs, control_problem
from oracles._rules_forward import classify_side, compose_problem, jvp_problem
from oracles._rules_named import named, named_vmap_problem, pair_vmap_problem
from scenarios.campaign._answers import Case
from scenarios.campaign._cases import DTYPES, cases

FLOATS = ("bfloat16", "float16", "float32", "float64")
DIFFERENTIATED = ("transpose", "jvp", "compose")  # kinds that take float dtypes only


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
    """A batch axis of each whole argument (None: unbatched), at least one batched."""
    ranks = [max(np.asarray(per[0]).ndim, 1) for per in case.args]
    one = st.tuples(*(st.one_of(st.none(), st.integers(0, r)) for r in ranks)).map(list)
    return one.filter(lambda axes: any(a is not None for a in axes))


def search(op: str, kind: str, examples: int, seed: int | None = None, shrink: bool = True) -> dict[str, Any]:
    """Run property `kind` of collective `op` on `examples` drawn calls (derandomized when `seed` is None).

    Returns:
        `{"op", "kind", "examples", "known", "shown", "new", "seconds"}`: programs run (shrinking included),
        known disagreements by finding id with the first of each shown, new ones shrunk, as text.
    """
    if kind in ("vma", "partial_manual"):  # their own programs and strategies
        from scenarios.campaign._vma_search import search as search_vma

        return search_vma(op, kind, examples, seed, shrink)
    if kind == "vmap":
        return search_vmap(op, examples, seed, shrink)
    tally: Counter[str] = Counter()
    known: dict[str, str] = {}
    looped = st.tuples(st.sampled_from(constructs(op)), st.booleans(), st.booleans())  # construct, pred, batched
    rest = (st.tuples(st.integers(1, 3), st.data()) if kind in ("vmap", "compose") else
            looped if kind == "control_flow" else st.just(None))

    @settings(max_examples=examples, deadline=None, database=None, derandomize=seed is None,
              suppress_health_check=list(HealthCheck), print_blob=False,
              phases=list(Phase) if shrink else [Phase.explicit, Phase.reuse, Phase.generate])
    @given(drawn(op, floats=kind in DIFFERENTIATED), rest)
    def prop(call: tuple[Case, bool], extra: Any) -> None:
        case, check_vma = call
        if kind in FORWARD:
            problem, args, name = forward_property(kind, case, check_vma, extra)
        elif kind == "vmap":
            size, data = extra
            axes = data.draw(batch_axes(case), label="in_axes")
            problem, args = vmap_problem(case, check_vma, size, axes), (axes,)
        else:
            problem, args = transpose_problem(case, check_vma), (check_vma,)
        tally["examples"] += 1
        if problem is None:
            return
        if kind not in FORWARD:
            name = classify(kind, case, *args)
        if name is None:
            raise Disagreement(f"{op} {kind}, check_vma={check_vma} {args}: {problem}\n{case!r}")
        tally[name] += 1
        known.setdefault(name, f"{problem}\n{case!r}")

    start, new = time.perf_counter(), []
    try:
        (prop if seed is None else seeded(seed)(prop))()
    except Exception as error:
        new = [f"{type(e).__name__}: {e}" for e in getattr(error, "exceptions", [error])]
    return {"op": op, "kind": kind, "examples": tally.pop("examples", 0), "known": dict(tally), "shown": known,
            "new": new, "seconds": round(time.perf_counter() - start, 1)}


def vmap_axes(case: Case) -> st.SearchStrategy[list[int | None]]:
    """The vmap kind's batch axes: `batch_axes`, and one draw in eight none at all (the batching rules'
    branches for operands the batch does not touch)."""
    return st.integers(0, 7).flatmap(lambda k: st.just([None] * len(case.args)) if k == 0 else batch_axes(case))


def vmap_property(case: Case, check_vma: bool, size: int, data: Any) -> tuple[str, str | None, tuple]:
    """One vmap program of a drawn call: one draw in four with a named batch (`oracles._rules_named`, the
    call's last mesh axis a vmap axis, the operand batched or not, jitted or eager), else the positional
    vmap against the per-batch loop (and for psend/precv the pair as JAX binds it, traced). Returns the
    property the KNOWN table classifies it under, what differs, and the arguments of its predicates."""
    if named(case) and data.draw(st.integers(0, 3), label="named") == 0:
        unbatched, eager = data.draw(st.booleans(), label="unbatched"), data.draw(st.booleans(), label="eager")
        problem = named_vmap_problem(case, check_vma, unbatched, eager)
        return "vmap_named", problem, (check_vma, unbatched, problem)
    axes = data.draw(vmap_axes(case), label="in_axes")
    problem = vmap_problem(case, check_vma, size, axes)
    if problem is None and case.op in ("psend", "precv"):
        problem = pair_vmap_problem(case, check_vma, axes)
        return "vmap_pair", problem, (problem,)
    return "vmap", problem, (axes,)


def search_vmap(op: str, examples: int, seed: int | None = None, shrink: bool = True) -> dict[str, Any]:
    """`search` of the vmap kind, in its own function: a derandomized search draws from its test's source,
    so the other kinds' `prop` keeps the draws it had before the vmap kind grew."""
    tally: Counter[str] = Counter()
    known: dict[str, str] = {}

    @settings(max_examples=examples, deadline=None, database=None, derandomize=seed is None,
              suppress_health_check=list(HealthCheck), print_blob=False,
              phases=list(Phase) if shrink else [Phase.explicit, Phase.reuse, Phase.generate])
    @given(drawn(op, floats=False), st.integers(1, 3), st.data())
    def prop(call: tuple[Case, bool], size: int, data: Any) -> None:
        case, check_vma = call
        kind, problem, args = vmap_property(case, check_vma, size, data)
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
        (prop if seed is None else seeded(seed)(prop))()
    except Exception as error:
        new = [f"{type(e).__name__}: {e}" for e in getattr(error, "exceptions", [error])]
    return {"op": op, "kind": "vmap", "examples": tally.pop("examples", 0), "known": dict(tally), "shown": known,
            "new": new, "seconds": round(time.perf_counter() - start, 1)}


FORWARD = ("jvp", "compose", "control_flow")


def forward_property(kind: str, case: Case, check_vma: bool, extra: Any) -> tuple[str | None, tuple, str | None]:
    """Run property `kind` ("jvp", "compose" or "control_flow") on one drawn call; return what differs, the
    drawn extras (for the report) and the known finding that explains it, if any."""
    if kind == "jvp":
        problem, side = jvp_problem(case, check_vma)
        return problem, (check_vma,), problem and classify_side(side, kind, case, check_vma, None)
    if kind == "compose":
        size, data = extra
        axes = data.draw(batch_axes(case), label="in_axes")
        problem, side = compose_problem(case, check_vma, size, axes)
        return problem, (size, axes), problem and classify_side(side, kind, case, check_vma, axes, problem)
    construct, pred, batched = extra
    problem = control_problem(case, check_vma, construct, pred, batched)
    side = ("vmap" if batched else "transpose" if problem and "of the unrolled program raised" in problem
            else "control_flow")
    axes = control_batch_axes(case) if batched else None
    return problem, (construct, pred, batched), problem and classify_side(side, kind, case, check_vma, axes, problem)
