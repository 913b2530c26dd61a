"""`meshsim sweep SWEEP.toml`: a grid of collective timings, each point a simulation run on Dask, with results
as JSON lines and CSV, a table in nccl-tests' layout, and an optional plot."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from scenarios import read_rows
from scenarios.cli._cluster import add_cluster, announce_dashboard, dashboard_address, local_workers
from scenarios.cli._limits import add_budget, add_job_timeout, budget_of
from scenarios.cli.render import nccl_table, printable, terminal_console
from scenarios.fleet import check_dask, fleet
from scenarios.sweep import RESULTS, TABLE, Point, Sweep, check_output, finish, load_sweep, pending, plot, run_points
from sim.record import counted


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `sweep` subparser to `commands`, with `execute` as what it runs."""
    sweep = commands.add_parser("sweep", help="time collectives over a grid of sizes, meshes, networks and "
                                              "algorithms on Dask workers; nccl-tests-style table, CSV, plot")
    sweep.add_argument("sweep", metavar="SWEEP", help="a sweep file (TOML), e.g. scenarios/sweeps/"
                                                      "psum_ring_vs_switch.toml")
    sweep.add_argument("-o", "--output", metavar="DIR",
                       help="where results.jsonl and results.csv go (default: sweep-<file name> here)")
    add_cluster(sweep)
    sweep.add_argument("--resume", action="store_true",
                       help="keep the points already in DIR/results.jsonl and run only the others")
    sweep.add_argument("--plot", metavar="FILE", help="draw time and busbw against size to FILE.svg or FILE.png")
    sweep.add_argument("--json", action="store_true", help="print every row as JSON instead of the table")
    add_budget(sweep, "each point")
    add_job_timeout(sweep, "a point", "it is an error row, and the sweep goes on")
    sweep.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    """Run the sweep at `args.sweep` and report it; see docs/reference/sweep.md.

    Returns:
        0 once every point has a row (a point the simulator rejected, one over `--max-memory` or
        `--max-messages`, one stopped by `--timeout` and one that failed on its worker have their message
        as their row); 130 when
        interrupted (Ctrl-C), the finished points kept for --resume.

    Raises:
        ScenarioError: the sweep file breaks a rule, --plot has another suffix than .svg/.png, --workers goes
            with --scheduler or is below 1, the results file holds rows and --resume was not given.
        FleetError: the scheduler cannot be reached, or a point was lost with every worker that ran it.
    """
    output = check_output(args.plot) if args.plot else None
    workers = local_workers(args, "points")
    sweep = load_sweep(args.sweep)
    directory = Path(args.output or f"sweep-{Path(args.sweep).stem}")
    _, todo = pending(sweep, directory, args.resume)
    start = time.perf_counter()
    if todo:
        try:
            _run(args, todo, directory, workers)
        except KeyboardInterrupt:
            kept = len(read_rows(directory / RESULTS))
            print(f"meshsim: interrupted; {directory / RESULTS} keeps {kept} finished points: run the same command "
                  f"with --resume to finish the sweep", file=sys.stderr)
            return 130
    rows = finish(sweep, directory)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        _report(sweep, rows, directory, len(todo), time.perf_counter() - start)
    if output is not None:
        plot(rows, output, printable(sweep.title))  # SVG and PNG text: no control characters either
        if not args.json:
            print(f"wrote {output}")
    return 0


def _run(args: argparse.Namespace, todo: list[Point], directory: Path, workers: int | None) -> None:
    """Run the points on the cluster the arguments ask for, with a transient progress bar in a terminal."""
    check_dask("meshsim sweep")
    console = terminal_console()
    dashboard = dashboard_address(args)
    with fleet(workers, args.scheduler, dashboard) as client:
        announce_dashboard(client, dashboard)
        _progress(client, todo, directory, console, enabled=console.is_terminal and not args.json,
                  budget=budget_of(args), timeout_s=args.job_timeout_s)


def _progress(client: Any, todo: list[Point], directory: Path, console: Console, enabled: bool,
              budget: tuple[int | None, int | None] = (None, None), timeout_s: float | None = None) -> None:
    """Run the points with a transient progress bar on `console` when `enabled`, each point within `budget`
    (`--max-memory` bytes, `--max-messages`; None for the defaults) and `timeout_s` (`--timeout`)."""
    workers = len(client.scheduler_info().get("workers", {})) or "?"
    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True, disable=not enabled) as progress:
        task = progress.add_task(f"sweep on {workers} worker(s)", total=len(todo))
        run_points(client, todo, directory, on_row=lambda row: progress.advance(task), max_memory_bytes=budget[0],
                   max_messages=budget[1], timeout_s=timeout_s)


def _report(sweep: Sweep, rows: list[dict[str, Any]], directory: Path, ran: int, wall_s: float) -> None:
    """The nccl-tests table, then one line of counts, time and where the files are."""
    print(f"# {printable(sweep.title)}")
    for line in nccl_table(rows):
        print(printable(line))
    rejected = sum(1 for row in rows if row["error"])
    print(f"{counted(len(rows), 'point')}: {ran} run now, {len(rows) - ran} from {RESULTS}; {rejected} rejected by the "
          f"simulator; {wall_s:.1f} s. Results: {os.path.join(directory, RESULTS)}, "
          f"{os.path.join(directory, TABLE)}")
