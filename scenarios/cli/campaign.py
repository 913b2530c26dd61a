"""`meshsim campaign`: generated cases of every collective, simulator against spec against real JAX, on Dask.

The jobs (`scenarios.campaign._campaign`) run on a local cluster (one worker per core by default) or on the running
scheduler of `--scheduler`; each result is appended to DIR/results.jsonl as it arrives, a shrunk
disagreement is saved as DIR/findings/NAME.toml (a `[collective]` scenario `meshsim check` replays), and
the report counts cases, agreements and findings per collective. `--resume` skips the jobs whose keys
the results file already holds. `--kinds transpose vmap` adds JAX's own rules (`scenarios.campaign._rules_jobs`):
JAX's transposes against meshsim's and `jax.vmap` against a per-batch loop (`vma`: JAX's device-variance
types of jax.lax's primitives, `--ops` naming primitives; `partial_manual`: shard_map manual over part of the
mesh against the fully manual program), disagreements that
FINDINGS.md explains counted as known, a new one shrunk and saved as DIR/findings/NAME.txt.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

import collectives
from scenarios import ScenarioError
from scenarios.campaign import KINDS
from scenarios.cli._campaign_files import Results
from scenarios.cli._campaign_timeout import bounded
from scenarios.cli._cluster import add_cluster, announce_dashboard, dashboard_address, integer, local_workers
from scenarios.cli._limits import add_job_timeout
from scenarios.cli.render import terminal_console

MAX_CASES = 100_000  # per collective: 10,000 jobs each, a plan of about 150 MB over every collective and kind

NO_VERDICT = 4  # the exit code when some jobs' oracle failed twice and nothing else disagreed


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `campaign` subparser to `commands`, with `execute` as what it runs."""
    campaign = commands.add_parser("campaign", help="check generated cases of every collective against the "
                                                    "executable spec and real JAX, spread over Dask workers")
    campaign.add_argument("--cases", metavar="N", default="100",
                          help=f"generated cases per collective (default 100, at most {MAX_CASES:,})")
    campaign.add_argument("--ops", metavar="NAME", nargs="+", default=None,
                          help="the collectives to check (default: every registered collective)")
    campaign.add_argument("--kinds", metavar="KIND", nargs="+", default=["forward"], choices=list(KINDS),
                          help="what to check: forward (simulator == spec == JAX; the default), transpose "
                               "(JAX's vjp/grad/linear_transpose == meshsim's transposes, linear collectives), "
                               "vmap (jax.vmap == a per-batch loop), jvp (jax.jvp and jax.linearize == float64 finite "
                               "differences and JAX's vjp), compose (vmap of grad, grad of vmap, jvp of vmap == "
                               "per-batch loops), control_flow (scan, fori_loop, while_loop, cond, checkpoint, "
                               "nested shard_map == the unrolled program), vma (the device-variance types of "
                               "jax.lax's primitives, --ops names them), partial_manual (shard_map manual over part "
                               "of the mesh == fully manual); see FINDINGS.md for what JAX gets wrong")
    add_cluster(campaign)
    campaign.add_argument("-o", "--output", metavar="DIR", default="campaign",
                          help="where results.jsonl and findings/ go (default ./campaign)")
    campaign.add_argument("--resume", action="store_true", help="continue the campaign in DIR: skip the jobs "
                                                                "results.jsonl already holds (but rerun those "
                                                                "whose oracle failed)")
    campaign.add_argument("--seed", metavar="S", default="0", help="the campaign's seed (default 0): the same "
                                                                   "seed checks the same cases")
    campaign.add_argument("--json", action="store_true", help="print the report as JSON")
    add_job_timeout(campaign, "a job", "it has no verdict (an error record, which --resume runs again)")
    campaign.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    """Run the campaign `args` describes, print its report, and return the exit code.

    Returns:
        0 when every case agrees; 1 when a disagreement was found (and saved); `NO_VERDICT` (4) when no
        disagreement was found but some jobs have none: their oracle failed on both attempts (error
        records, which `--resume` runs again); 130 when interrupted (the jobs done are saved); 2 (through
        `main`) on bad input: an unknown collective, a count that is not a positive integer, an unreachable
        scheduler, a results file that exists without `--resume`, a worker without jax.
    """
    from scenarios.campaign import plan

    ops, cases, seed, workers = _checked(args)
    kinds = list(dict.fromkeys(args.kinds))
    jobs = plan(ops, cases, seed, kinds=kinds)
    results = Results(Path(args.output), resume=args.resume)
    pending = [job for job in jobs if "error" in results.done.get(job.key, {"error": None})]
    console = terminal_console(stderr=True, highlight=False)
    start = time.perf_counter()
    try:
        if pending:
            _run(pending, results, workers, args, console)
    except KeyboardInterrupt:
        console.print(f"meshsim: interrupted; {len(results.added)} job(s) saved in {results.path}: run the same "
                      "command with --resume to continue", markup=False, highlight=False, soft_wrap=True)
        return 130
    report = _report(ops, kinds, jobs, results, len(jobs) - len(pending), time.perf_counter() - start)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _show(terminal_console(highlight=False), report)
    return 1 if report["findings"] else NO_VERDICT if report["errors"] else 0


def _run(jobs: list[Any], results: Results, workers: int | None, args: argparse.Namespace, console: Console) -> None:
    """Run `jobs` on the cluster `args` name under a progress bar, saving each job's record as it arrives."""
    from scenarios.fleet import fleet, run_jobs

    dashboard = dashboard_address(args)
    with fleet(workers, args.scheduler, dashboard) as client, _progress(console) as progress:
        announce_dashboard(client, dashboard)
        task = progress.add_task("cases", total=sum(job.args[1] for job in jobs))

        planned = {job.key: job for job in jobs}

        def done(job: Any, record: dict[str, Any]) -> None:
            results.add(job.key, record)
            progress.advance(task, planned[job.key].args[1])

        run_jobs(client, [bounded(job, args.job_timeout_s) for job in jobs], done)


def _checked(args: argparse.Namespace) -> tuple[list[str], int, int, int | None]:
    """The collectives, cases per collective, seed and local workers asked for, each checked."""
    names = list(dict.fromkeys([*collectives.REGISTRY, *(n for kind in args.kinds for n in KINDS[kind])]))
    ops = list(args.ops) if args.ops else [n for n in names if any(n in KINDS[kind] for kind in args.kinds)]
    unknown = [op for op in ops if op not in names]
    if unknown:  # the vma kind checks jax.lax primitives: their names are ops too
        raise ScenarioError(f"--ops {unknown[0]!r} is not a registered collective; it must be one of "
                            + ", ".join(names))
    cases = integer("--cases", args.cases, minimum=1)
    if cases > MAX_CASES:
        raise ScenarioError(f"--cases={args.cases!r} must be at most {MAX_CASES} cases per collective (the plan of "
                            f"jobs alone grows with it); run several campaigns with other --seed values instead")
    seed = integer("--seed", args.seed, minimum=0)
    workers = local_workers(args, "jobs")
    return list(dict.fromkeys(ops)), cases, seed, workers


def _progress(console: Console) -> Progress:
    """A progress bar of cases checked, on stderr, shown on a terminal only."""
    return Progress(TextColumn("[bold]campaign"), BarColumn(), MofNCompleteColumn(), TextColumn("cases"),
                    TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal)


def _report(ops: list[str], kinds: list[str], jobs: list[Any], results: Results, resumed: int,
            wall_s: float) -> dict[str, Any]:
    """Counts per collective and kind over the campaign's jobs, the findings' files, and the run's timing."""
    rows = {(op, kind): {"op": op, "kind": kind, "cases": 0, "agree": 0, "known": 0, "findings": 0, "errors": 0,
                         "jobs": 0, "known_ids": {}} for kind in kinds for op in ops if op in KINDS[kind]}
    findings: dict[str, str] = {}
    errors: dict[str, str] = {}
    checked = 0
    for job in jobs:
        record = results.done[job.key]
        row = rows[record["op"], record.get("kind", "forward")]
        row["jobs"] += 1
        row["cases"] += record["cases"]
        row["agree"] += record["agree"]
        if "error" in record:  # the oracle failed on both attempts: no verdict, no finding
            row["errors"] += 1
            errors[job.key] = record["error"]
        for name, n in record.get("known", {}).items():
            row["known"] += n
            row["known_ids"][name] = row["known_ids"].get(name, 0) + n
        for found in record["findings"]:  # jobs that shrink to the same case save one file: counted once
            path = str(results.findings / found["name"])
            row["findings"] += path not in findings
            findings[path] = found["replay"]
        checked += record["cases"] if job.key in results.added else 0
    return {"rows": list(rows.values()), "findings": findings, "errors": errors, "jobs": len(jobs),
            "resumed_jobs": resumed,
            "results": str(results.path), "wall_seconds": round(wall_s, 3),
            "cases_per_second": round(checked / wall_s, 2) if checked and wall_s > 0 else None}


def _show(console: Console, report: dict[str, Any]) -> None:
    """The report as a table, then the findings and how to replay them."""
    table = Table(title="campaign: simulator == spec == JAX (forward); JAX's rules == meshsim's (transpose, vmap), "
                        "== finite differences, loops, unrolled programs (jvp, compose, control_flow), == the typing "
                        "rule and each device's result (vma), == the fully manual program (partial_manual)",
                  title_justify="left")
    counted = ("cases", "agree", "known", "findings", "errors")
    for column in ("collective", "kind", *counted):
        table.add_column(column, justify="left" if column in ("collective", "kind") else "right")
    for row in report["rows"]:
        style = "bold red" if row["findings"] else None
        table.add_row(Text(row["op"]), Text(row["kind"]), *(str(row[k]) for k in counted), style=style)
    totals = [sum(row[k] for row in report["rows"]) for k in counted]
    table.add_row("total", "", *map(str, totals), style="bold")
    console.print(table)
    resumed = f"; {report['resumed_jobs']} job(s) were already in the results file" if report["resumed_jobs"] else ""
    rate = f", {report['cases_per_second']} cases/s" if report["cases_per_second"] else ""
    console.print(f"{report['jobs']} jobs in {report['wall_seconds']} s{rate}{resumed}; results in "
                  f"{report['results']}")
    for path, replay in report["findings"].items():
        if path.endswith(".toml"):
            console.print(Text.assemble(("finding", "bold red"), f" {path} (replayed: {replay}); replay it with: "
                                        f"meshsim check {path}"))
        else:
            console.print(Text.assemble(("finding", "bold red"), f" {path}: a new disagreement with JAX's rule, "
                                        "shrunk; read it"))
    met: dict[str, int] = {}
    for row in report["rows"]:
        for name, n in row["known_ids"].items():
            met[name] = met.get(name, 0) + n
    if met:
        console.print(Text("known: disagreements FINDINGS.md explains (JAX's rules), by id: "
                           + ", ".join(f"{name} x{n}" for name, n in met.items())))
    for key, reason in report["errors"].items():
        first = reason.splitlines()[0] if reason else "(no reason given)"
        console.print(Text.assemble(("no verdict", "bold yellow"), f" {key}: {first}"), soft_wrap=True)
    if report["errors"]:
        console.print(f"{len(report['errors'])} job(s) have no verdict (the oracle failed twice; not findings): "
                      "add --resume to run them again")
    elif not report["findings"]:
        console.print("[bold green]all agree[/]" if not met else "[bold green]nothing new[/]")
