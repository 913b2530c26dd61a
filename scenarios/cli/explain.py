"""`meshsim explain SCENARIO`: a step-by-step walkthrough of a scenario for learners.

Every collective's walkthrough reads its `Definition` (the docstring's summary, parameters, variance rule)
and the run's trace (messages grouped by step), so a newly registered collective is explained without a
line here; ragged_all_to_all, all_to_all, all_gather, the reductions and ppermute have words of their own.
A call the simulator refuses is explained too: the rules it breaks, then exit 2 as `meshsim run` would.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

import scenarios
import sim
from scenarios import ProgramScenario, Scenario, ScenarioError, ScenarioResult
from scenarios.cli._faces import is_saved, program_steps, saved_steps
from scenarios.cli._limits import add_allow_code, add_timeout
from scenarios.cli.render import (
    DEVICE_EDGE,
    LINE_EDGE,
    _protocols,
    _ragged,
    brief,
    edges,
    fill,
    message_table,
    printable,
    step_groups,
    terminal_console,
)
from scenarios.cli.render import colour as _colour
from scenarios.cli.render import seconds as _seconds
from scenarios.cli.render import span as _span
from sim.record import Traffic, counted

Step = tuple[str, list[Any]]


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `explain` subparser to `commands`, with `execute` as what it runs."""
    explain = commands.add_parser("explain", help="walk through a scenario step by step: inputs, protocol, "
                                                  "messages, result, timeline")
    explain.add_argument("scenario", metavar="SCENARIO",
                         help="a TOML scenario file, e.g. scenarios/library/ragged_docs_example.toml, or a run "
                              "saved with Run.save (a .json file, e.g. of a simulate_jax run)")
    explain.add_argument("--step", action="store_true",
                         help="wait for Enter between steps (when stdin is a terminal; ignored otherwise)")
    explain.add_argument("--full", action="store_true",
                         help=f"show every device, message and slice (default: past {2 * DEVICE_EDGE} devices or "
                              f"{2 * LINE_EDGE} messages, the first and last few and how many are left out)")
    add_allow_code(explain, scripts=False)
    add_timeout(explain)
    explain.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    """Explain the scenario at `args.scenario`, one step after another.

    Returns:
        0 when the scenario ran; 2 when the simulator refused its call (the broken rules are explained on
        stdout first) or the file is unreadable or breaks the format (ScenarioError, reported by `main`).
    """
    if args.scenario.endswith(".py"):
        raise ScenarioError(f"{args.scenario}: explain takes TOML scenario files; run a Python scenario with "
                            f"`python {args.scenario}` or `meshsim run --allow-code {args.scenario}`")
    scenario = None if is_saved(args.scenario) else scenarios.load(args.scenario, allow_code=args.allow_code)
    if getattr(scenario, "payload", "bytes") == "abstract":  # the walk shows values; an abstract run has none
        raise ScenarioError(f"{args.scenario}: explain walks through values and payload='abstract' has none; explain "
                            f"the scenario with payload = \"bytes\" at a small shape, or `meshsim run` / `trace` it")
    console = terminal_console(highlight=False, markup=False)  # brackets are array text
    pause = args.step and sys.stdin.isatty()
    if args.step and not pause:
        print("meshsim: --step ignored: stdin is not a terminal", file=sys.stderr)
    if scenario is None:
        walkthrough, refusal = saved_steps(args.scenario, args.full), None
    elif isinstance(scenario, ProgramScenario):
        walkthrough, refusal = program_steps(scenario, args.full), None
    else:
        walkthrough, refusal = _collective_steps(scenario, args.full)
    try:
        _show(console, walkthrough, pause)
    except KeyboardInterrupt:
        print("\nmeshsim: interrupted; explain stopped before its last step", file=sys.stderr)
        return 130
    if refusal is not None:
        print(f"meshsim: error: {printable(str(refusal).splitlines()[0])} (the broken rules are explained above)",
              file=sys.stderr)
        return 2
    return 0


def _show(console: Console, walkthrough: Sequence[Step], pause: bool) -> None:
    """Print each step under a numbered rule; with `pause`, wait for Enter before every step after the first."""
    for n, (title, body) in enumerate(walkthrough, 1):
        if pause and n > 1:
            try:
                console.input(Text(f"-- Enter for step {n} of {len(walkthrough)} --", style="dim"))
            except EOFError:  # the terminal closed its input: show the rest without waiting
                pause = False
        console.rule(Text(f"step {n} of {len(walkthrough)}: {title}", style="bold"), align="left")
        for renderable in body:
            console.print(renderable)
        console.print()


def _collective_steps(scenario: Scenario, full: bool = False) -> tuple[list[Step], ScenarioError | None]:
    """The walkthrough of a `[collective]` scenario, and the simulator's refusal if it refused the call; past
    `2 * DEVICE_EDGE` devices or `2 * LINE_EDGE` messages only the ends show, unless `full`."""
    try:
        result, refusal = scenarios.run(scenario), None
    except ScenarioError as error:
        cause = error.__cause__
        if not isinstance(cause, sim.MeshError):
            raise
        result, refusal = None, error
    violations = list(getattr(refusal.__cause__, "violations", [str(refusal.__cause__)])) if refusal else []
    walkthrough = [("The call", _call(scenario, result, full)),
                   ("What each device holds", [_holdings(scenario, full)])]
    group = scenario.mesh.group(0, scenario.params["axis_name"], scenario.params.get("axis_index_groups"))
    told = _protocols.protocol(scenario.definition, scenario.params, group.size)
    walkthrough.append(("The protocol", [Text(p) for p in told + _picked(scenario, result)]))
    # The slice walkthrough reads offsets and sizes as one number per slice: a vector on each device.
    slices = scenario.definition.drawing.slices and all(
        arrays[name].ndim == 1 for arrays in scenario.inputs for name in scenario.definition.index_arrays)
    if slices:
        walkthrough += _ragged.steps(scenario, result, violations, full)
    elif result is None:
        walkthrough.append(("The rules this input breaks", _broken(violations)))
    if result is not None:
        # ragged's own SEND -> RECEIVE step already lists every message
        walkthrough += [] if slices else _message_steps(result.trace, full)
        walkthrough += [("The result", [_results(result, full)]), ("The timeline", _timeline(result, full))]
    return walkthrough, refusal


def _call(scenario: Scenario, result: ScenarioResult | None, full: bool) -> list[Any]:
    """Title, description, mesh and network, the call as it reads in Python and the algorithm it ran (as
    `meshsim run` says it); past `2 * DEVICE_EDGE` groups or members of a group only the ends, unless `full`."""
    mesh, network = scenario.mesh, scenario.mesh.network
    axes = ", ".join(f"{name}={size}" for name, size in mesh.shape.items())
    told: list[Any] = [Text(scenario.title, style="bold"), Text(scenario.path, style="dim")]
    if scenario.description:
        told.append(Text(" ".join(scenario.description.split()), style="italic"))
    told.append(Text(f"mesh {axes}: {counted(mesh.size, 'device')}; network {network.describe()}, latency "
                     f"{_seconds(network.latency_s)}, bandwidth {network.bandwidth_bytes_per_s / 1e9:g} GB/s"))
    told.append(Text(_protocols.call_text(scenario.op, scenario.params), style="bold"))
    if result is not None and result.algorithm is not None:
        told.append(Text(f"algorithm: {result.algorithm}" + (" (picked by 'auto')" if _asked_auto(scenario) else ""),
                         style="bold"))
    groups = {scenario.mesh.group(d, scenario.params["axis_name"], scenario.params.get("axis_index_groups")).members
              for d in mesh.devices}
    shown = [g if isinstance(g, Text) else _members(g, full)
             for g in edges(sorted(groups), full, DEVICE_EDGE, "groups")]
    told.append(Text(f"groups of devices that take part together: {', '.join(str(g) for g in shown)}"))
    return told


def _asked_auto(scenario: Scenario) -> bool:
    """Whether the call asks for 'auto', leaving the algorithm to the cost model."""
    definition = scenario.definition
    return definition.algorithm(scenario.params.get("algorithm", definition.param("algorithm").default)).auto


def _picked(scenario: Scenario, result: ScenarioResult | None) -> list[str]:
    """For a call that asks for 'auto': the algorithm the run picked (each, when groups picked differently),
    with its paragraph."""
    if result is None or result.algorithm is None or not _asked_auto(scenario):
        return []
    names = {a.name for a in scenario.definition.algorithms}
    picks = [name for name in result.algorithm.split(", ") if name in names]
    return [f"This run's pick: {result.algorithm}."] + [
        f"Algorithm {scenario.definition.algorithm(name).text}" for name in picks]


def _holdings(scenario: Scenario, full: bool) -> Table:
    """One row per device: its coordinates and every input array."""
    names = list(scenario.definition.arrays)
    table = Table(show_edge=False, pad_edge=False)
    for column in ("device", "coords", *names):
        table.add_column(column)

    def add(d: int) -> None:
        coords = ", ".join(f"{a}={i}" for a, i in scenario.mesh.coords(d).items())
        table.add_row(str(d), coords, *(brief(scenario.inputs[d][n], full, typed=True) if n in scenario.inputs[d] else
                                        Text("(the same as its group's first device)", style="dim")
                                        for n in names), style=_colour(d))
    fill(table, scenario.mesh.devices, full, DEVICE_EDGE, "devices", add)
    return table


def _broken(violations: Sequence[str]) -> list[Any]:
    """The simulator's list of broken rules, for a collective without words of its own for them."""
    return [Text(f"The simulator refused the call: {counted(len(violations), 'broken rule')}.", style="bold red"),
            *(Text(f"  {v}") for v in violations)]


def _message_steps(trace: sim.Trace, full: bool) -> list[Step]:
    """One step per group of messages (a ring's or recursive doubling's steps; otherwise by send time); past
    `2 * LINE_EDGE` groups or messages in a group only the ends, unless `full`."""
    groups = step_groups(trace)
    if not groups:
        copies = int(np.count_nonzero(trace.column("kind") != "message"))
        return [("The messages", [Text("No message is sent: each device computes its result locally"
                                       + (f" ({counted(copies, 'local copy')})." if copies else "."))])]
    arrivals = trace.column("arrival_time_s")
    told: list[Step] = []
    for group in edges(groups, full, LINE_EDGE, "steps of messages"):
        if isinstance(group, Text):
            told.append(("More steps of messages", [group]))
            continue
        label, ks = group
        note = Text(f"{Traffic.of(trace, ks)}; the last arrives at {_seconds(float(arrivals[ks].max()))}",
                    style="dim")
        shown = edges(ks, full, LINE_EDGE, "messages")
        left_out = [item for item in shown if isinstance(item, Text)]
        told.append((f"Messages: {label}", [message_table(trace, [k for k in shown if not isinstance(k, Text)]),
                                            *left_out, note]))
    return told


def _results(result: ScenarioResult, full: bool) -> Table:
    """Each device's result, coloured by the sender that wrote each index where the messages say so."""
    located = any(p is not None for p in result.provenance)
    table = Table(show_edge=False, pad_edge=False)
    for column in ("device", "result", *(("written by",) if located else ())):
        table.add_column(column)

    def add(d: int) -> None:
        provenance = result.provenance[d]
        sources = provenance.sources if provenance is not None and provenance.axis == 0 else None
        writers = (_writers(provenance, full),) if located else ()
        table.add_row(str(d), brief(result.outputs[d], full, sources, typed=True), *writers)
    fill(table, result.scenario.mesh.devices, full, DEVICE_EDGE, "devices", add)
    return table


def _members(group: tuple[int, ...], full: bool) -> str:
    """`[0, 1, 2, 3]`, or past `2 * DEVICE_EDGE` members (unless `full`) `[0, ..., 7, ... 984 more ..., 999]`."""
    if full or len(group) <= 2 * DEVICE_EDGE:
        return str(list(group))
    return (f"[{', '.join(map(str, group[:DEVICE_EDGE]))}, ... {len(group) - 2 * DEVICE_EDGE} more ..., "
            f"{', '.join(map(str, group[-DEVICE_EDGE:]))}]")


def _writers(provenance: scenarios.Provenance | None, full: bool) -> Text:
    """`0:1 device 0, 1:2 device 1, 2:4 kept` for a result whose messages say where they land; past
    `2 * DEVICE_EDGE` runs only the ends, unless `full`."""
    if provenance is None:
        return Text("")
    runs, start = [], 0
    sources = provenance.sources
    for i in range(1, len(sources) + 1):
        if i == len(sources) or sources[i] != sources[start]:
            runs.append((start, i, sources[start]))
            start = i
    return Text("  ").join(run if isinstance(run, Text) else _writer(*run)
                           for run in edges(runs, full, DEVICE_EDGE, "runs"))


def _writer(start: int, stop: int, source: int | None) -> Text:
    """`0:1 device 0`, or `2:4 kept` where no message wrote the rows, in the sender's colour."""
    who, style = ("kept", "dim") if source is None else (f"device {source}", _colour(source))
    return Text(f"{_span((start, stop))} {who}", style=style)


def _timeline(result: ScenarioResult, full: bool) -> list[Any]:
    """Per device, its messages to and from other devices and when; the run's messages in all; the last message
    to arrive and the local copies that run after it; then the simulated end time."""
    trace = result.trace
    kinds, arrivals = trace.column("kind"), trace.column("arrival_time_s")
    sent = kinds == "message"
    traffic = Traffic.of(trace)
    told: list[Any] = [_exchanged(result, full), Text(
        f"In all: {traffic}." + (" The table counts the messages between devices: a device's message to itself "
                                 "crosses no link and arrives at once." if traffic.between < traffic.messages else ""))]
    if sent.any():
        last_one = trace[int(np.flatnonzero(sent)[np.argmax(arrivals[sent])])]
        told.append(Text(f"The last message to arrive: device {last_one.src} -> device {last_one.dst}, "
                         f"{counted(last_one.size_bytes, 'byte')}, at {_seconds(last_one.arrival_time_s)} (latency "
                         f"{_seconds(result.scenario.mesh.network.latency_s)} plus bytes / bandwidth)."))
        later = ~sent & (arrivals > last_one.arrival_time_s)
        if later.any():
            told.append(Text(f"After it, {counted(int(later.sum()), 'local copy')} "
                             f"({', '.join(sorted(set(kinds[later].tolist())))}) still run on the devices; the last "
                             f"ends at {_seconds(float(arrivals[later].max()))}."))
    told.append(Text.assemble(("simulated end time: ", "bold"), _seconds(result.end_time_s)))
    return told


def _exchanged(result: ScenarioResult, full: bool) -> Table:
    """One row per device: the messages it sent to other devices (their bytes, when the first was posted) and
    those it received from them (their bytes, when the last arrived)."""
    trace, n = result.trace, result.scenario.mesh.size
    src, dst = trace.column("src"), trace.column("dst")
    between = (trace.column("kind") == "message") & (src != dst)
    src, dst, size = src[between], dst[between], trace.column("size_bytes")[between]
    posted, arrived = trace.column("send_time_s")[between], trace.column("arrival_time_s")[between]
    count_out, bytes_out = np.bincount(src, minlength=n), np.bincount(src, size, minlength=n)
    count_in, bytes_in = np.bincount(dst, minlength=n), np.bincount(dst, size, minlength=n)
    first, last = np.full(n, np.inf), np.full(n, -np.inf)
    np.minimum.at(first, src, posted)
    np.maximum.at(last, dst, arrived)
    table = Table(show_edge=False, pad_edge=False)
    for column in ("device", "sent to others", "first sent", "received from others", "last arrival"):
        table.add_column(column, justify="right")

    def add(d: int) -> None:
        table.add_row(str(d), f"{count_out[d]} ({int(bytes_out[d])} B)",
                      _seconds(float(first[d])) if count_out[d] else "-", f"{count_in[d]} ({int(bytes_in[d])} B)",
                      _seconds(float(last[d])) if count_in[d] else "-", style=_colour(d))
    fill(table, result.scenario.mesh.devices, full, DEVICE_EDGE, "devices", add)
    return table
