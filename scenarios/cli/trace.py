"""`meshsim trace SCENARIO -o FILE`: run a scenario and write its timeline as Chrome / Perfetto trace-event JSON.

A run of more than `RECORDS` messages and copies is summarised unless `--full`: the first `RECORDS` in time
order in full, the rest as a summary span per device and counters of what is in flight (see
`sim.record.trace_events`), so the file and the time to write it stay small whatever the run's size.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

import scenarios
import sim
from scenarios import ProgramScenario, ScenarioError, run_forward
from scenarios.cli._limits import add_allow_code, add_timeout

_VIEWERS = "open it in https://ui.perfetto.dev (Open trace file) or chrome://tracing (Load)"
RECORDS = 2048  # past this many records, a trace is summarised unless --full


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `trace` subparser to `commands`, with `execute` as what it runs."""
    trace = commands.add_parser("trace", help="write a scenario's timeline (devices, links, messages) for Perfetto")
    trace.add_argument("scenario", metavar="SCENARIO",
                       help="a TOML scenario file, [collective] or [program], e.g. scenarios/library/psum_ring.toml")
    trace.add_argument("-o", "--output", metavar="FILE", required=True,
                       help="where to write the trace-event JSON, e.g. trace.json")
    trace.add_argument("--full", action="store_true",
                       help=f"every message in full, however many (past {RECORDS:,} messages and copies the "
                            f"default writes the first {RECORDS:,} in time order and a summary of the rest)")
    add_allow_code(trace)
    add_timeout(trace)
    trace.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    """Run the scenario at `args.scenario`, write its trace events to `args.output`, print a summary.

    A `[program]` scenario's forward run is traced (its transposes are separate runs).

    Returns:
        0 on success.

    Raises:
        ScenarioError: the scenario is a Python script, is a `[program]` without `--allow-code`, cannot be
            loaded or run, or `args.output` cannot be
            written (checked before the run, so a bad path costs no simulation).
    """
    path, output = args.scenario, Path(args.output)
    if path.endswith(".py"):
        raise ScenarioError(f"{path}: meshsim trace takes TOML scenarios ([collective] or [program]); a Python "
                            "scenario writes its own timeline with sim.Run.to_perfetto(path)")
    _check_writable(output)
    run = _simulate(scenarios.load(path, allow_code=args.allow_code))
    events = sim.record.trace_events(run.trace, run.simulation.calls, run.simulation.mesh.size,
                                     None if args.full else RECORDS)
    try:
        sim.record.write_trace_events(events, output)
    except OSError as error:
        raise ScenarioError(f"-o {output}: cannot write the trace: {error.strerror or error}") from None
    print(_summary(output, events, run))
    return 0


def _check_writable(output: Path) -> None:
    """Raise `ScenarioError` unless a file can be written at `output`."""
    folder = output.parent if str(output.parent) else Path(".")
    if output.is_dir():
        raise ScenarioError(f"-o {output}: is a directory; give a file name such as {output / 'trace.json'}")
    if not folder.is_dir():
        raise ScenarioError(f"-o {output}: the directory {folder} does not exist")
    if not os.access(folder, os.W_OK) or (output.exists() and not os.access(output, os.W_OK)):
        raise ScenarioError(f"-o {output}: permission denied")


def _simulate(scenario: scenarios.Scenario | ProgramScenario) -> sim.Run:
    """The simulator's run of `scenario`: its collective call, or its program's forward pass."""
    if not isinstance(scenario, ProgramScenario):
        result = scenarios.run(scenario)
        assert result.run is not None, "scenarios.run keeps the simulator's run"
        return result.run
    return run_forward(scenario)


def _summary(output: Path, events: dict, run: sim.Run) -> str:
    """One line: what was written (events, devices, links, simulated time), what was summarised, how to open it."""
    kinds, src, dst = (run.trace.column(name) for name in ("kind", "src", "dst"))
    apart = (kinds == "message") & (src != dst)
    count, devices = len(events["traceEvents"]), run.simulation.mesh.size
    links = _distinct(src[apart] * devices + dst[apart], devices * devices)
    summarised = events["otherData"].get("summarised")
    said = (f"; the first {summarised['in_full']:,} of {summarised['records']:,} messages and copies in time order "
            f"in full, the rest summarised per device and in flight (--full writes every one)") if summarised else ""
    return (f"wrote {output}: {count} trace events, {devices} devices, {links} links, "
            f"{int((kinds == 'message').sum())} messages, simulated time {_seconds(run.end_time_s)}{said}; {_VIEWERS}")


def _distinct(keys: np.ndarray, size: int) -> int:
    """How many distinct values `keys` (each in range(size)) holds: a bitmap when it is small, else a sort."""
    if size > 1 << 26:
        return len(np.unique(keys))
    seen = np.zeros(size, bool)
    seen[keys] = True
    return int(seen.sum())


def _seconds(t: float) -> str:
    """`t` seconds in the largest unit that keeps it >= 1 (ASCII 'us' so any terminal encoding works)."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(t) >= scale:
            return f"{t / scale:.6g} {unit}"
    return f"{t / 1e-9:.6g} ns" if t else "0 s"
