"""How the file fuzz (`test_fuzz_files.py`, `benchmarks/fuzz.py`) runs `meshsim` and judges what it did: in this
process, under a time limit, with the Dask cluster replaced by a loop (`stand_in`) and a campaign's jobs by
`stub_job`; an outcome is whole (exit 0, or 1 / 4 for a campaign as its report says) or a clear exit 2."""

from __future__ import annotations

import contextlib
import io
import json
import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import currently_in_test_context, event
from test_fuzz import Hang, time_limit

import scenarios.fleet
import scenarios.sweep._sweep_run
from scenarios.campaign import _campaign
from scenarios.cli import main
from scenarios.cli import sweep as sweep_command
from scenarios.sweep import load_sweep


class _Client:
    """Stands in for a `distributed.Client`: a sweep asks it how many workers it has."""

    def scheduler_info(self) -> dict[str, Any]:
        return {"workers": {"in-process": {}}}


@contextlib.contextmanager
def _fleet(*args: Any, **kwargs: Any) -> Iterator[_Client]:
    """Stands in for `scenarios.fleet.fleet` (whatever cluster options it is given)."""
    yield _Client()


def _run_jobs(client: Any, jobs: list, done: Any) -> None:
    for job in jobs:
        done(job, job.fn(*job.args))


def stub_job(op: str, count: int, seed: int, kind: str = "forward") -> dict[str, Any]:
    """A campaign job's record without running it: every case agrees, but 1 job in 13 has a finding and 1 in
    17 an error (its oracle failed twice), chosen by the job's seed."""
    record = {"op": op, "kind": kind, "seed": seed, "cases": count, "agree": count, "known": {}, "findings": [],
              "attempts": 1, "seconds": 0.001, "cpu_seconds": 0.001, "worker": "in-process"}
    if seed % 13 == 0:
        record["agree"] -= 1
        record["findings"] = [{"name": f"{op}-{seed % 4096:03x}.toml", "scenario": "# a finding\n",
                               "differences": ["device 0 differs"], "replay": "differs"}]
    elif seed % 17 == 1:
        record.update(cases=0, agree=0, attempts=2, error="the oracle failed on all 2 attempts: OracleFailure")
    return record


def stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweeps and campaigns run their jobs in this process; a campaign's jobs are `stub_job`."""
    monkeypatch.setattr(sweep_command, "fleet", _fleet)
    monkeypatch.setattr(scenarios.sweep._sweep_run, "run_jobs", _run_jobs)
    monkeypatch.setattr(scenarios.fleet, "fleet", _fleet)
    monkeypatch.setattr(scenarios.fleet, "run_jobs", _run_jobs)
    monkeypatch.setattr(_campaign, "run_chunk", stub_job)
    monkeypatch.setattr(_campaign, "run_rules_chunk", stub_job)


@dataclass
class Outcome:
    """What `meshsim ARGV` did in this process: the exit code and its two streams."""

    code: int
    out: str
    err: str


def run(argv: list[str], seconds: float = 20.0, shown: str = "") -> Outcome:
    """`meshsim *argv` in this process under a time limit; an exception escaping `main` fails the case, and a
    hang raises `Hang` naming the command line and `shown` (a file's text)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            with time_limit(seconds):
                code = main(argv)
        except SystemExit as stop:  # argparse's own errors
            code = stop.code if isinstance(stop.code, int) else 2
        except Hang as hang:
            raise Hang(f"meshsim {' '.join(argv)}: {hang}\n{shown}") from None
        except Exception:
            pytest.fail(f"meshsim {argv} raised:\n{traceback.format_exc()}")
    return Outcome(code, out.getvalue(), err.getvalue())


def _event(text: str) -> None:
    """Hypothesis's `event` inside a property (its statistics count outcomes); nothing in a fixed case."""
    if currently_in_test_context():
        event(text)


def check_error(outcome: Outcome) -> None:
    """Exit 2 with one `meshsim: error:` line (or argparse's usage and its `meshsim COMMAND: error:` line)."""
    lines = outcome.err.splitlines()
    assert "Traceback" not in outcome.err, outcome.err
    assert outcome.code == 2, f"exit {outcome.code}\n{outcome.err}"
    if lines and lines[0].startswith("usage: "):
        assert re.match(r"meshsim( campaign| sweep)?: error: ", lines[-1]), outcome.err
        return
    assert lines and lines[0].startswith("meshsim: error: ") and len(lines[0]) > 25, outcome.err


def check_sweep(outcome: Outcome, path: Path) -> None:
    """Exit 0 with one JSON row per point of the sweep file, its time a number or None and its error a
    message or None; or a clear exit 2."""
    _event(f"sweep exit {outcome.code}")
    assert "Traceback" not in outcome.err + outcome.out
    assert outcome.code != 3, f"exit 3 (an unexpected exception):\n{outcome.err}"
    if outcome.code != 0:
        check_error(outcome)
        return
    rows = json.loads(outcome.out)
    points = load_sweep(path).points
    assert [row["key"] for row in rows] == [point.key for point in points]
    for row in rows:
        assert row["error"] is None or isinstance(row["error"], str), row
        assert row["time_s"] is None or (isinstance(row["time_s"], float) and row["time_s"] >= 0), row


def check_campaign(outcome: Outcome) -> None:
    """Exit 0, 1 or 4 as the report's findings and errors say, with counts that are whole numbers and jobs
    that add up; or a clear exit 2."""
    _event(f"campaign exit {outcome.code}")
    assert "Traceback" not in outcome.err + outcome.out
    assert outcome.code != 3, f"exit 3 (an unexpected exception):\n{outcome.err}"
    if outcome.code == 2:
        check_error(outcome)
        return
    report = json.loads(outcome.out)
    expected = 1 if report["findings"] else 4 if report["errors"] else 0
    assert outcome.code == expected, (outcome.code, report["findings"], report["errors"])
    for row in report["rows"]:
        assert all(isinstance(row[k], int) and row[k] >= 0 for k in ("cases", "agree", "findings", "errors")), row
        assert row["jobs"] >= 1, row
    assert sum(row["jobs"] for row in report["rows"]) == report["jobs"]
