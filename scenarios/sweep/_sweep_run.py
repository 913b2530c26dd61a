"""A sweep run on Dask: each point that is not yet in `DIR/results.jsonl` becomes a `Job` of `measure`, and each
row is appended to the file the moment its point completes, then `DIR/results.csv` holds them all.

    sweep = load_sweep("scenarios/sweeps/psum_ring_vs_switch.toml")
    done, todo = pending(sweep, Path("out"), resume=False)
    with fleet(workers=2) as client:
        run_points(client, todo, Path("out"))
    rows = finish(sweep, Path("out"))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scenarios._errors import ScenarioError
from scenarios._results import append_row, open_for_append, read_rows, write_csv
from scenarios.fleet import Job, run_jobs
from scenarios.sweep._measure import COLUMNS, measure, refused
from scenarios.sweep._sweep import Point, Sweep
from scenarios.sweep._sweep_values import check_row

RESULTS = "results.jsonl"
TABLE = "results.csv"


def pending(sweep: Sweep, directory: Path, resume: bool) -> tuple[dict[str, dict[str, Any]], list[Point]]:
    """The rows already in `directory`'s results of this sweep's points (by key), and the points still to run.

    Raises:
        ScenarioError: the results file holds rows and `resume` is false (so nothing is overwritten), or it
            cannot be read.
    """
    path = directory / RESULTS
    rows = read_rows(path, check_row)
    if rows and not resume:
        raise ScenarioError(f"{path} already holds {len(rows)} results; pass --resume to keep them and run the "
                            f"rest, or choose another -o DIR")
    keys = {point.key for point in sweep.points}
    done = {row["key"]: row for row in rows if row["key"] in keys}
    return done, [point for point in sweep.points if point.key not in done]


def run_points(client: Any, points: Sequence[Point], directory: Path,
               on_row: Callable[[dict[str, Any]], None] | None = None, max_memory_bytes: int | None = None,
               max_messages: int | None = None, timeout_s: float | None = None) -> None:
    """Run every point as a job on `client`'s workers, appending each row to `directory/results.jsonl` (and
    calling `on_row` with it) as it completes, in completion order.

    Each point is checked against the budget first (`max_memory_bytes`, `max_messages`: None for the
    defaults, as for `meshsim run`): a point over it, or one the simulator rejects, gets its error row at
    once and is not submitted. A point that fails on its worker (out of memory, say) is an error row too, and
    so is one still running after `timeout_s` seconds (None: no limit), stopped on its worker.

    Raises:
        FleetError: a point was lost with every worker that ran it.
        ScenarioError: the results file cannot be written.
    """
    with open_for_append(directory / RESULTS) as stream:
        def done(job: Job | None, row: dict[str, Any]) -> None:
            append_row(stream, row)
            if on_row is not None:
                on_row(row)

        jobs = []
        for point in points:
            row = refused(point, max_memory_bytes, max_messages)
            if row is not None:
                done(None, row)
            else:
                jobs.append(Job(point.key, measure, (point, max_memory_bytes, max_messages, timeout_s)))
        run_jobs(client, jobs, done)


def finish(sweep: Sweep, directory: Path) -> list[dict[str, Any]]:
    """Every point's row, in the sweep's order, read back from `results.jsonl`; also written as `results.csv`.

    Raises:
        ScenarioError: a point has no row (the sweep did not finish), or a file cannot be read or written.
    """
    found = {row["key"]: row for row in read_rows(directory / RESULTS, check_row)}
    missing = [point.key for point in sweep.points if point.key not in found]
    if missing:
        raise ScenarioError(f"{directory / RESULTS}: {len(missing)} of {len(sweep.points)} points have no result "
                            f"(first key {missing[0]}); run again with --resume to finish them")
    rows = [{column: found[point.key].get(column) for column in COLUMNS} for point in sweep.points]
    write_csv(directory / TABLE, rows, COLUMNS)
    return rows
