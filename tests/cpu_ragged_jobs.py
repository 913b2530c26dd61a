"""How `test_cpu_ragged.py` sends calls to its JAX child (`cpu_ragged_child.py`) and reads the answers: a job of
one or several calls on one mesh (one compile in the child), grouped into one round trip, each answer compared
byte for byte with the simulator's and the spec's."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from jax_child import Child
from strategies import Case, differences, run_simulator, run_spec

Call = tuple[Case, tuple[Any, ...]]  # a case and its arguments as sent: per argument, per device


# The lowering's two forms: one shot under its default limit (every case here is small), rounds with the
# limit at 0 bytes.
FORMS = {"one shot": {}, "rounds": {"one_shot_bytes": 0}}


def job(kind: str, case: Case, check_vma: bool = True, extra: tuple[list[np.ndarray], ...] = (),
        args: tuple[Any, ...] | None = None, form: str = "one shot") -> dict[str, Any]:
    """A job of one call of `body(kind)` on `case` (its own arguments, or `args`, then `extra`), lowered in
    `form`."""
    return merged(kind, [(case, (*(case.args if args is None else args), *extra))], check_vma, form)


def merged(kind: str, calls: list[Call], check_vma: bool, form: str = "one shot") -> dict[str, Any]:
    """One job of several calls on the same mesh: one compile in the child for all of them."""
    return {"kind": kind, "mesh_shape": calls[0][0].mesh_shape, "check_vma": check_vma, **FORMS[form],
            "args": [[list(a) for a in args] for _, args in calls], "params": [case.params for case, _ in calls]}


def ask_grouped(child: Child, kind: str, calls: list[tuple[Call, bool]], form: str = "one shot") -> list[Any]:
    """Run every call, grouped by (mesh, check_vma) into one job each, in one round trip; per-call results
    in the order given (a failed job fails the test, naming its cases)."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, ((case, _), vma) in enumerate(calls):
        groups.setdefault((tuple(case.mesh_shape.items()), vma), []).append(i)
    jobs = [merged(kind, [calls[i][0] for i in members], key[1], form) for key, members in groups.items()]
    found: list[Any] = [None] * len(calls)
    for members, reply in zip(groups.values(), child.ask(jobs)):
        for i, result in zip(members, outputs(reply, *(calls[i][0][0] for i in members))):
            found[i] = result
    return found


def outputs(reply: tuple[Any, ...], *cases: Case) -> Any:
    """The per-call results of a job's reply; a failure names the job's cases."""
    assert reply[0] == "ok", f"JAX failed ({reply[1]}: {reply[2]}) on\n" + "\n".join(map(repr, cases))
    return reply[1]


def one(reply: tuple[Any, ...], case: Case) -> Any:
    """The result of a one-call job."""
    return outputs(reply, case)[0]


def generated(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """`count` examples drawn by Hypothesis (under the suite's profile and seed), to check in a few batches.

    Drawing a whole batch as one example overruns Hypothesis's buffer, and checking one case per example
    costs one compile and round trip per case; a failing case is reported whole instead of shrunk.
    """
    drawn: list[Any] = []

    @settings(max_examples=count, deadline=None, database=None)
    @given(strategy)
    def collect(example: Any) -> None:
        drawn.append(example)

    collect()
    return drawn


def expected(case: Case) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The simulator's and the spec's answers to `case`."""
    return run_simulator(case), run_spec(case)


def disagreements(case: Case, got: list[np.ndarray],
                  want: tuple[list[np.ndarray], list[np.ndarray]] | None = None) -> list[str]:
    """Where the CPU lowering's answer differs from the simulator's and the spec's (`want`, else worked out
    now), byte for byte."""
    simulated, specified = expected(case) if want is None else want
    return (differences(simulated, got, "simulator", "jax cpu lowering")
            + differences(specified, got, "spec", "jax cpu lowering"))
