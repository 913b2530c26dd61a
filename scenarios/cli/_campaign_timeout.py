"""`meshsim campaign --timeout SECONDS`: each job bounded on its worker, a job past it a record without a
verdict.

`bounded(job, seconds)` wraps a campaign job so that its worker runs it under `scenarios.sweep.deadline`;
a job still running after `seconds` is stopped there, its worker's oracle processes (the JAX worker and the
rules worker, which may be in the middle of an answer) are ended so that the next job starts them afresh,
and its record is an error record: no cases, no agreement, no finding, the reason naming `--timeout`.
`--resume` runs such a job again, as it does a job whose oracle failed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scenarios.fleet import Job
from scenarios.sweep._deadline import PastDeadline, deadline


def bounded(job: Job, seconds: float | None) -> Job:
    """`job` run for at most `seconds` on its worker (`job` itself when None)."""
    if seconds is None:
        return job
    return Job(job.key, run_bounded, (job.fn, seconds, job.args))


def run_bounded(fn: Callable[..., dict[str, Any]], seconds: float, args: tuple) -> dict[str, Any]:
    """`fn(*args)`'s record, or the error record of a job stopped after `seconds` (see the module)."""
    try:
        with deadline(seconds):
            return fn(*args)
    except PastDeadline:
        _end_oracles()
        kind = args[3] if len(args) > 3 else "forward"
        return {"op": args[0], "kind": kind, "seed": args[2], "cases": 0, "agree": 0, "known": {}, "findings": [],
                "attempts": 1, "error": f"stopped after --timeout {seconds:g} s: the job had not finished, so "
                                        f"nothing of it was checked; raise --timeout, or run fewer cases per job"}


def _end_oracles() -> None:
    """End this worker's oracle processes; the next job's requests start new ones."""
    from scenarios.campaign._campaign import worker_oracle
    from scenarios.campaign._rules_jobs import WORKER

    worker_oracle().close()
    WORKER.stop()
