"""`meshsim campaign --timeout`: a job still running after SECONDS is stopped on its worker and is a record
without a verdict (`scenarios/cli/_campaign_timeout.py`), which the results file takes and --resume reruns."""

from __future__ import annotations

import time

import pytest
from timer_child import in_child

from scenarios._fields import InText
from scenarios.cli import main
from scenarios.cli._campaign_files import check_record
from scenarios.cli._campaign_timeout import bounded, run_bounded
from scenarios.fleet import Job


def _forever(op: str, count: int, seed: int) -> dict:
    while True:
        time.sleep(0.001)


def _quick(op: str, count: int, seed: int, kind: str) -> dict:
    return {"op": op, "kind": kind, "seed": seed, "cases": count, "agree": count, "known": {}, "findings": []}


def test_a_job_past_its_timeout_is_an_error_record_the_results_file_takes():
    """A job that never ends, bounded to 0.2 s, returns within seconds an error record naming --timeout, with
    no cases and no finding, that `check_record` accepts; its oracles are ended so the next job starts afresh."""
    in_child(__file__, "_job_past_its_timeout")


def _job_past_its_timeout() -> None:
    import scenarios.cli._campaign_timeout as timeout

    ended: list = []
    timeout._end_oracles = lambda: ended.append(True)
    start = time.perf_counter()
    record = run_bounded(_forever, 0.2, ("psum", 5, 123))
    assert time.perf_counter() - start < 10 and ended == [True]
    assert record["error"].startswith("stopped after --timeout 0.2 s: the job had not finished")
    assert (record["op"], record["kind"], record["cases"], record["agree"], record["findings"]) == \
        ("psum", "forward", 0, 0, [])
    check_record(InText("results.jsonl", "", "", line=1), {**record, "key": "psum-seed0-chunk0-5cases"})


def test_a_job_in_time_keeps_its_record_and_no_timeout_keeps_the_job():
    """Within its seconds a job's own record comes back unchanged; without --timeout the job is not wrapped."""
    assert run_bounded(_quick, 30, ("all_gather", 3, 7, "vmap"))["cases"] == 3
    job = Job("k", _quick, ("psum", 1, 0, "forward"))
    assert bounded(job, None) is job
    wrapped = bounded(job, 5.0)
    assert wrapped.key == "k" and wrapped.fn is run_bounded and wrapped.args == (_quick, 5.0, job.args)


@pytest.mark.parametrize("value", ["0", "-2", "x"])
def test_a_bad_campaign_timeout_is_a_usage_error(capsys, value):
    """`meshsim campaign --timeout` takes a positive number of seconds; anything else exits 2."""
    with pytest.raises(SystemExit) as stopped:
        main(["campaign", "--timeout", value])
    assert stopped.value.code == 2
    assert f"--timeout={value!r} must be a positive number of seconds" in capsys.readouterr().err
