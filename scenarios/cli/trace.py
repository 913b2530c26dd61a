"""`meshsim trace SCENARIO -o FILE`: run a scenario and write its timeline as Chrome / Perfetto trace-event JSON."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import scenarios
import sim
from scenarios import ProgramScenario, ScenarioError, run_forward
from scenarios.cli._limits import add_allow_code, add_timeout

_VIEWERS = "open it in https://ui.perfetto.dev (Open trace file) or chrome://tracing (Load)"


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `trace` subparser to `commands`, with `execute` as what it runs."""
    trace = commands.add_parser("trace", help="write a scenario's timeline (devices, links, messages) for Perfetto")
    trace.add_argument("scenario", metavar="SCENARIO",
                       help="a TOML scenario file, [collective] or [program], e.g. scenarios/library/psum_ring.toml")
    trace.add_argument("-o", "--output", metavar="FILE", required=True,
                       help="where to write the trace-event JSON, e.g. trace.json")
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
    try:
        events = run.to_perfetto(output)
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
    """One line: what was written (events, devices, links, simulated time) and how to open it."""
    links = {(m.src, m.dst) for m in run.trace.sent if m.src != m.dst}
    count, devices = len(events["traceEvents"]), run.simulation.mesh.size
    return (f"wrote {output}: {count} trace events, {devices} devices, {len(links)} links, "
            f"{len(run.trace.sent)} messages, simulated time {_seconds(run.end_time_s)}; {_VIEWERS}")


def _seconds(t: float) -> str:
    """`t` seconds in the largest unit that keeps it >= 1 (ASCII 'us' so any terminal encoding works)."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(t) >= scale:
            return f"{t / scale:.6g} {unit}"
    return f"{t / 1e-9:.6g} ns" if t else "0 s"
