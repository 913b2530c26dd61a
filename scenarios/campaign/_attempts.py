"""A campaign job's attempts: an oracle that fails is never a finding.

A job asks an oracle process (the JAX worker of the forward kind, the rules worker of the others) for
answers. When that process dies (killed, out of memory, a crash inside XLA), stops answering, breaks its
pipe or fails in itself, the job has learnt nothing about the collective: `attempted` runs it once more
with a fresh process and, if that fails too, returns an error record naming both reasons, with no cases,
no agreements and no finding. A disagreement is only ever what a healthy oracle answered.

`JobClock` measures a job's processor time per process: this process's own (`time.process_time`) and
its oracle's (`oracles.JaxOracle.cpu_seconds`, every worker process it ran, dead ones included), each of
which only grows, so a job's time is never negative, even when its worker was replaced during it.

>>> calls = []
>>> def job():
...     calls.append(1)
...     if len(calls) == 1:
...         raise OSError("worker died")
...     return {"cases": 3, "agree": 3}
>>> attempted(job, restart=lambda: None, failures=(OSError,), empty={})
{'cases': 3, 'agree': 3, 'attempts': 2, 'retried': 'OSError: worker died'}
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

ATTEMPTS = 2  # a job whose oracle fails runs once more with a fresh one, then is an error record
REASON_CHARS = 600  # of each failure's text kept in the record (a worker's log tail can be long)


class OracleDown(BaseException):
    """The oracle failed inside a Hypothesis search. A `BaseException`, so Hypothesis neither takes the case
    for a failing one nor shrinks it: the search ends at once and the job's attempt with it."""

    def __init__(self, failure: Exception) -> None:
        super().__init__(failure)
        self.failure = failure


def _reason(error: BaseException) -> str:
    cause = error.failure if isinstance(error, OracleDown) else error
    text = f"{type(cause).__name__}: {cause}".strip()
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS] + " ..."


def attempted(run: Callable[[], dict[str, Any]], restart: Callable[[], None], failures: tuple[type, ...],
              empty: dict[str, Any]) -> dict[str, Any]:
    """`run()`'s record, with `attempts` (1 or 2) and, after a failure, `retried` (its reason). A failure is
    an `OracleDown` or one of `failures`; `restart()` is called after each, so the next attempt has a fresh
    oracle. After `ATTEMPTS` failures: `empty` with no cases and `error`, the reasons of both."""
    reasons: list[str] = []
    for attempt in range(1, ATTEMPTS + 1):
        try:
            record = run()
        except (OracleDown, *failures) as error:
            reasons.append(_reason(error))
            restart()
            continue
        return {**record, "attempts": attempt, **({"retried": reasons[0]} if reasons else {})}
    return {**empty, "cases": 0, "agree": 0, "known": {}, "findings": [], "attempts": ATTEMPTS,
            "error": f"the oracle failed on all {ATTEMPTS} attempts, so nothing was checked: "
                     + "; then ".join(reasons)}


class JobClock:
    """The processor time of a job: this process's and its oracle's, from `oracle_seconds()`, a total that
    never decreases (e.g. `JaxOracle.cpu_seconds`)."""

    def __init__(self, oracle_seconds: Callable[[], float]) -> None:
        self._oracle_seconds = oracle_seconds
        self._wall, self._own, self._oracle = time.perf_counter(), time.process_time(), oracle_seconds()

    def times(self) -> dict[str, float]:
        """`seconds` (wall) and `cpu_seconds` (both processes) since the clock started; never negative."""
        own = time.process_time() - self._own
        oracle = self._oracle_seconds() - self._oracle
        return {"seconds": round(time.perf_counter() - self._wall, 3), "cpu_seconds": round(max(own, 0.0)
                                                                                           + max(oracle, 0.0), 3)}
