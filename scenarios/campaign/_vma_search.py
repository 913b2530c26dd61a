"""The searches of the vma and partial_manual kinds: Hypothesis draws the programs, the oracles judge them.

`search(name, kind, examples, seed, shrink)` runs one kind on one name: for "vma" a `jax.lax` primitive of
`oracles._vma_table.VMA_PRIMITIVES` (`scenarios.campaign._vma_cases.vma_cases`, judged by
`oracles._rules_vma.vma_problem`), for "partial_manual" a collective with arrays
(`partial_cases`, judged by `oracles._rules_partial.partial_problem`). It returns the row
`scenarios.campaign._rules_search.search` returns for the other rules kinds, which calls it: known
disagreements counted by finding id (`oracles._rules.classify`), new ones shrunk.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as seeded

from layouts import MeshError
from oracles._rules import classify
from oracles._rules_partial import partial_problem
from oracles._rules_vma import vma_problem
from scenarios.campaign._vma_cases import partial_cases, vma_cases

KINDS = ("vma", "partial_manual")


class Disagreement(MeshError, AssertionError):
    """JAX's typing or its partial-manual program disagrees with the rule or the manual program in a way no
    known finding explains."""


def _judged(kind: str, drawn: Any) -> tuple[str, Any, tuple, str | None]:
    """(what to show, the call to classify, the rest of classify's arguments, the problem or None)."""
    if kind == "vma":
        return repr(drawn), drawn, (), vma_problem(drawn)
    case, check_vma, manual = drawn
    shown = f"check_vma={check_vma}, manual axes {manual}:\n{case!r}"
    return shown, case, (check_vma, manual), partial_problem(case, check_vma, manual)


def search(name: str, kind: str, examples: int, seed: int | None = None, shrink: bool = True) -> dict[str, Any]:
    """Run `kind` ("vma" or "partial_manual") on `name` over `examples` drawn programs (derandomized when
    `seed` is None); the row `{"op", "kind", "examples", "known", "shown", "new", "seconds"}`."""
    tally: Counter[str] = Counter()
    known: dict[str, str] = {}
    strategy = vma_cases(name) if kind == "vma" else partial_cases(name)

    @settings(max_examples=examples, deadline=None, database=None, derandomize=seed is None,
              suppress_health_check=list(HealthCheck), print_blob=False,
              phases=list(Phase) if shrink else [Phase.explicit, Phase.reuse, Phase.generate])
    @given(strategy)
    def prop(drawn: Any) -> None:
        shown, case, rest, problem = _judged(kind, drawn)
        tally["examples"] += 1
        if problem is None:
            return
        found = classify(kind, case, *rest)
        if found is None:
            raise Disagreement(f"{name} {kind}: {problem}\n{shown}")
        tally[found] += 1
        known.setdefault(found, f"{problem}\n{shown}")

    start, new = time.perf_counter(), []
    try:
        (prop if seed is None else seeded(seed)(prop))()
    except Exception as error:
        new = [f"{type(e).__name__}: {e}" for e in getattr(error, "exceptions", [error])]
    return {"op": name, "kind": kind, "examples": tally.pop("examples", 0), "known": dict(tally), "shown": known,
            "new": new, "seconds": round(time.perf_counter() - start, 1)}


__all__ = ["KINDS", "Disagreement", "search"]
