"""`meshsim trace SCENARIO -o FILE`: run a scenario (or read a saved run) and write its timeline as Chrome /
Perfetto trace-event JSON.

A run of more than `RECORDS` messages and copies is summarised unless `--full`: the first `RECORDS` in time
order in full, the rest as a summary span per device and counters of what is in flight (see
`sim.record.trace_events`), so the file and the time to write it stay small whatever the run's size.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import scenarios
import sim
from scenarios import ProgramScenario, ScenarioError, run_forward
from scenarios.cli._faces import is_saved, saved_runs
from scenarios.cli._limits import add_allow_code, add_timeout
from scenarios.cli._output import check_writable
from sim.record import counted

_VIEWERS = "open it in https://ui.perfetto.dev (Open trace file) or chrome://tracing (Load)"
RECORDS = 2048  # past this many records, a trace is summarised unless --full


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `trace` subparser to `commands`, with `execute` as what it runs."""
    trace = commands.add_parser("trace", help="write a scenario's timeline (devices, links, messages) for Perfetto")
    trace.add_argument("scenario", metavar="SCENARIO",
                       help="a TOML scenario file, [collective] or [program] (e.g. scenarios/library/psum_ring.toml), "
                            "or a run saved with Run.save (a .json file)")
    trace.add_argument("-o", "--output", metavar="FILE", required=True,
                       help="where to write the trace-event JSON, e.g. trace.json")
    trace.add_argument("--full", action="store_true",
                       help=f"every message in full, however many (past {RECORDS:,} messages and copies the "
                            f"default writes the first {RECORDS:,} in time order and a summary of the rest)")
    add_allow_code(trace, scripts=False)
    add_timeout(trace)
    trace.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    """Run the scenario at `args.scenario` (or read the run saved there), write its trace events to
    `args.output`, print a summary.

    A `[program]` scenario's forward run is traced (its transposes are separate runs).

    Returns:
        0 on success.

    Raises:
        ScenarioError: the scenario is a Python script, is a `[program]` without `--allow-code`, cannot be
            loaded or run, the saved run is not one or the file holds several, or `args.output` cannot be
            written (checked before the run, so a bad path costs no simulation).
    """
    path, output = args.scenario, Path(args.output)
    if path.endswith(".py"):
        raise ScenarioError(f"{path}: meshsim trace takes TOML scenarios ([collective] or [program]); a Python "
                            "scenario writes its own timeline with sim.Run.to_perfetto(path)")
    check_writable(output, "trace.json")
    run = _saved(path) if is_saved(path) else _simulate(scenarios.load(path, allow_code=args.allow_code)).faced()
    events = sim.record.trace_events(run.trace, run.calls, len(run.devices), None if args.full else RECORDS)
    try:
        sim.record.write_trace_events(events, output)
    except OSError as error:
        raise ScenarioError(f"-o {output}: cannot write the trace: {error.strerror or error}") from None
    print(_summary(output, events, run))
    return 0


def _saved(path: str) -> sim.record.Faced:
    """The one run saved at `path`."""
    runs = saved_runs(path)
    if len(runs) != 1:
        raise ScenarioError(f"{path}: holds {len(runs)} runs; meshsim trace writes the timeline of one: save the "
                            f"run to trace on its own (Run.save), or draw or explain them all")
    return runs[0]


def _simulate(scenario: scenarios.Scenario | ProgramScenario) -> sim.Run:
    """The simulator's run of `scenario`: its collective call, or its program's forward pass."""
    if not isinstance(scenario, ProgramScenario):
        result = scenarios.run(scenario)
        assert result.run is not None, "scenarios.run keeps the simulator's run"
        return result.run
    return run_forward(scenario)


def _summary(output: Path, events: dict, run: sim.record.Faced) -> str:
    """One line: what was written (events, devices, the links messages crossed, messages, simulated time), what
    was summarised, how to open it."""
    count, devices = len(events["traceEvents"]), len(run.devices)
    links = len(sim.record.trace_links(run.trace))
    summarised = events["otherData"].get("summarised")
    said = (f"; the first {summarised['in_full']:,} of {summarised['records']:,} messages and copies in time order "
            f"in full, the rest summarised per device and in flight (--full writes every one)") if summarised else ""
    return (f"wrote {output}: {count} trace events, {counted(devices, 'device')}, {counted(links, 'link')}, "
            f"{sim.record.Traffic.of(run.trace)}, simulated time {_seconds(run.end_time_s)}{said}; {_VIEWERS}")


def _seconds(t: float) -> str:
    """`t` seconds in the largest unit that keeps it >= 1 (ASCII 'us' so any terminal encoding works)."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(t) >= scale:
            return f"{t / scale:.6g} {unit}"
    return f"{t / 1e-9:.6g} ns" if t else "0 s"
