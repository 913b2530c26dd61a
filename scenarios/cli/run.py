"""`meshsim run SCENARIO`: run a scenario file and show, with rich, who sent which rows where and when.

Big arrays print as their edges and shape (numpy's summary) unless `--full`; a run that lasts longer than
a second shows a spinner in a terminal; `--json` prints every element for scripts.
"""

from __future__ import annotations

import argparse
import itertools
import sys

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

import scenarios
import sim
from scenarios import ProgramResult, Provenance, ScenarioResult
from scenarios.cli import _explore, _sanitize
from scenarios.cli._faces import refuse_saved
from scenarios.cli._limits import add_allow_code, add_budget, add_timeout, budget_of
from scenarios.cli._script import check_path, run_script
from scenarios.cli.render import (
    DEVICE_EDGE,
    KEPT,
    THRESHOLD,
    LazyStatus,
    array_lines,
    colour,
    edges,
    summarised,
    terminal_console,
    write_json,
)
from scenarios.cli.render import seconds as _seconds
from scenarios.cli.render import span as _span
from sim.record import counted

_MESSAGE_EDGE = 50  # a table of more than twice this many messages shows this many at each end, unless --full
_RUN_EDGE = 10  # a device's "rows ... from device ..." lines: beyond twice this many, this many at each end


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `run` subparser to `commands`, with `execute` as what it runs."""
    run = commands.add_parser("run", help="run a scenario file: results, provenance of every row, messages, time")
    run.add_argument("scenario", metavar="SCENARIO",
                     help="a scenario file (TOML, or a Python script), e.g. scenarios/library/moe_dispatch.toml")
    run.add_argument("--json", action="store_true",
                     help="print the whole result (every element) as JSON, without colours, for scripts")
    run.add_argument("--full", action="store_true",
                     help=f"print every element of big arrays, every device and every message (by default "
                          f"arrays of more than {THRESHOLD} elements show their edges and shape, a mesh of more "
                          f"than {2 * DEVICE_EDGE} devices its first and last {DEVICE_EDGE}, and a table of more "
                          f"than {2 * _MESSAGE_EDGE} messages its first and last {_MESSAGE_EDGE})")
    _sanitize.add_argument(run)
    _explore.add_arguments(run)
    add_allow_code(run)
    add_timeout(run)
    add_budget(run)
    run.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    """Load and run the scenario at `args.scenario`, print it (rich, or JSON with `--json`), return the exit code.

    Returns:
        0 on success; with `--sanitize`, 1 when the run met a violation (see `scenarios.cli._sanitize`);
        with `--explore-orders`, 0 or 1 (see `scenarios.cli._explore`).

    Raises:
        UsageError: `--explore-seed` without `--explore-orders`, or `--explore-orders` with `--sanitize`.
        ScenarioError: the file is unreadable, is part of meshsim's own code, is a saved run, carries code
            (a `[program]` source, a Python script) without `--allow-code`, breaks the format, asks for
            `--json` of a Python script, or the simulator rejects its inputs (`main` prints the message,
            naming file, field and line, and exits 2).
    """
    path = args.scenario
    _explore.check_arguments(args)
    check_path(path)
    refuse_saved(path, "run")
    limit, max_messages = budget_of(args)
    if args.explore_orders:  # arrival-order exploration prints its own report and exit code
        return _explore.execute(args)
    if path.endswith(".py"):  # a scenario that is a script (the layout guide's compile-then-call flow)
        if args.sanitize:
            _sanitize.refuse_script(path)
        return run_script(path, args.json, args.allow_code, limit)
    console = terminal_console(highlight=False)
    with LazyStatus(console, f"loading {path}", enabled=not args.json and console.is_terminal) as status:
        scenario = scenarios.load(path, allow_code=args.allow_code, max_memory_bytes=limit,
                                  max_messages=max_messages)
        status.update(f"simulating {path} on {scenario.mesh.size} devices")
        result = _sanitize.run(scenario) if args.sanitize else scenarios.run(scenario)
    if args.sanitize:
        return _sanitize.show(console, result, args.json, lambda shown: _shown_result(console, shown, args.full))
    if args.json:
        write_json(result, sys.stdout, args.full)
    elif isinstance(result, ProgramResult):
        _show_program(console, result)
    else:
        _show(console, result, args.full)
    return 0


def _shown_result(console: Console, result: ScenarioResult | ProgramResult, full: bool) -> None:
    """A program's or a collective's result, as `meshsim run` prints it."""
    if isinstance(result, ProgramResult):
        _show_program(console, result)
    else:
        _show(console, result, full)


def _show_program(console: Console, result: ProgramResult) -> None:
    """The program's source, its typed listing, and the transposed programs with their communication."""
    scenario = result.scenario
    console.rule(Text(scenario.title, style="bold"))
    console.print(Text(scenario.path, style="dim"))
    if scenario.description:
        console.print(Text(scenario.description))
    console.print(Text(scenario.source.strip(), style="bold"))
    passes = [("forward", result.forward), ("transposed", result.transposed), ("transposed twice", result.twice)]
    for name, one in passes:
        if one is None:
            continue
        console.print(Text.assemble(("\n" + name, "bold"), f": {one.traffic}, simulated time ",
                                    _seconds(one.end_time_s)), soft_wrap=True)
        console.print(Text(str(one.program)))
    if result.twice is not None:
        verdict = "the original program, op for op" if result.no_growth else "a different program"
        console.print(Text.assemble(("\ntransposing twice gives ", "bold"), verdict))
        lhs, rhs = result.adjoint
        console.print(f"adjoint identity: <f(x), ybar> = {lhs:.6g}, <x, t(f)(ybar)> = {rhs:.6g}")


def _show(console: Console, result: ScenarioResult, full: bool) -> None:
    """Header, each device's inputs and colour-coded result, the messages, the simulated time."""
    _header(console, result)
    shown = edges(result.scenario.mesh.devices, full, DEVICE_EDGE, "devices")
    devices = [d for d in shown if not isinstance(d, Text)]
    bounds = _landing_bounds(result, set(devices))
    kept = False
    for device in shown:
        if isinstance(device, Text):
            console.print()
            console.print(device)
            continue
        kept |= _device(console, result, device, bounds[device], full)
    if any(p is not None for p in result.provenance):
        console.print(_legend(devices, kept))
    console.print()
    console.print(_messages(result, full))
    console.print(Text.assemble(("simulated time: ", "bold"), _seconds(result.end_time_s)))


def _header(console: Console, result: ScenarioResult) -> None:
    """The title, file, mesh, network and the call as it would read in JAX."""
    scenario = result.scenario
    mesh, network = scenario.mesh, scenario.mesh.network
    axes = ", ".join(f"{name}={size}" for name, size in mesh.shape.items())
    params = ", ".join(f"{key}={value!r}" for key, value in scenario.params.items())
    console.rule(Text(scenario.title, style="bold"))
    console.print(Text(scenario.path, style="dim"))
    console.print(f"mesh {axes} ({counted(mesh.size, 'device')}); network {network.describe()}, latency "
                  f"{_seconds(network.latency_s)}, bandwidth {network.bandwidth_bytes_per_s / 1e9:g} GB/s",
                  markup=False, soft_wrap=True)
    console.print(Text(f"{scenario.op}({params})", style="bold"))
    if result.algorithm is not None:
        definition = scenario.definition
        asked = definition.algorithm(scenario.params.get("algorithm", definition.param("algorithm").default))
        console.print(Text(f"algorithm: {result.algorithm}" + (" (picked by 'auto')" if asked.auto else ""),
                           style="bold"))
    if scenario.description:
        console.print(Text(" ".join(scenario.description.split()), style="italic"))


def _device(console: Console, result: ScenarioResult, device: int, bounds: set[int], full: bool) -> bool:
    """One device: its inputs, its result coloured by sender, and which sender wrote which rows.

    Returns whether some of its result's rows were kept from `output` (no message wrote them).
    """
    coords = ", ".join(f"{name}={i}" for name, i in result.scenario.mesh.coords(device).items())
    console.print()
    console.print(Text.assemble((f"device {device}", "bold underline"), (f"  ({coords})", "dim")))
    inputs = result.inputs[device]
    width = max(len(name) for name in [*inputs, "result"])
    for name, array in inputs.items():
        _print_array(console, name, array, None, width, full)
    provenance = result.provenance[device]
    _print_array(console, "result", result.outputs[device], provenance, width, full)
    if provenance is None:
        return False
    runs = _runs(provenance, bounds)
    indent = Text(" " * (width + 4))
    for line in _edges(runs, full):
        line = line if isinstance(line, Text) else _written_by(result, provenance.axis, line)
        console.print(indent + line, soft_wrap=True)
    return any(k is None for _, _, k in runs)


def _edges(runs: list[tuple[int, int, int | None]], full: bool) -> list[tuple[int, int, int | None] | Text]:
    """`runs`, or (unless `full`) beyond `2 * _RUN_EDGE` of them only as many at each end: a device of a
    1,000-device gather has 1,000 runs of rows, and every device printing all of them is a million lines."""
    return edges(runs, full, _RUN_EDGE, "runs of rows")


def _print_array(console: Console, label: str, array: np.ndarray, provenance: Provenance | None, width: int,
                 full: bool) -> None:
    """`label` and the array's text, continuation lines indented under the first; a summarised array's
    first line gives its shape and dtype."""
    if sim.memory.is_abstract(array):  # payload = "abstract": a shape and a dtype, no values
        dtype = sim.memory.logical_dtype(array.dtype)
        console.print(Text.assemble((f"  {label:<{width}}  ", "bold" if label == "result" else ""),
                                    (f"abstract {dtype}{list(array.shape)} (no values)", "dim")), soft_wrap=True)
        return
    lines = array_lines(array, provenance, full)
    if summarised(array, full):
        lines.insert(0, Text(f"shape {array.shape} {array.dtype} (edges shown; --full prints every element)",
                             style="dim"))
    for i, line in enumerate(lines):
        prefix = (f"  {label if i == 0 else '':<{width}}  ", "bold" if label == "result" else "")
        console.print(Text.assemble(prefix, line), soft_wrap=True)


def _written_by(result: ScenarioResult, axis: int, run: tuple[int, int, int | None]) -> Text:
    """The line of one run of rows written by one message (or by none), e.g. `rows 0:1 from device 0, slice 0`."""
    what = "rows" if axis == 0 else f"axis {axis} indices"
    start, stop, k = run
    if k is None:
        return Text(f"{what} {start}:{stop} kept from output", style=KEPT)
    message = result.trace[k]
    origin = f"{what} {start}:{stop} from device {message.src}"
    if "slice" in message.detail:
        origin += f", slice {message.detail['slice']}"
    if "src_rows" in message.detail:
        origin += f" (its operand rows {_span(message.detail['src_rows'])})"
    return Text(origin, style=colour(message.src))


def _landing_bounds(result: ScenarioResult, devices: set[int]) -> dict[int, set[int]]:
    """Per device of `devices`, the ends of the row ranges messages wrote into it: the only places its writer
    can change."""
    rows, present = result.trace.detail_numbers("rows", 2)
    dst = result.trace.column("dst")
    shown = np.zeros(max(devices, default=-1) + 1, bool)
    shown[list(devices)] = True
    landed = present & shown[np.minimum(dst, len(shown) - 1)] & (dst < len(shown))
    ends = rows[landed].ravel()
    span = int(ends.max(initial=0)) + 1
    keys = np.unique(np.repeat(dst[landed], 2) * span + ends)  # one int per (device, end): a plain sort
    bounds: dict[int, set[int]] = {device: set() for device in devices}
    for device, end in zip((keys // span).tolist(), (keys % span).tolist()):
        bounds[device].add(end)
    return bounds


def _runs(provenance: Provenance, bounds: set[int]) -> list[tuple[int, int, int | None]]:
    """Maximal runs of rows written by one message (or none) as (start, stop, message index).

    The writer is constant between neighbouring `bounds`, so this looks at one row per range, not at
    every row: a result of millions of rows costs as much as its messages.
    """
    length = len(provenance.messages)
    edges = sorted({0, length} | {b for b in bounds if 0 < b < length})
    runs: list[tuple[int, int, int | None]] = []
    for start, stop in itertools.pairwise(edges):
        k = provenance.messages[start]
        if runs and runs[-1][2] == k:
            runs[-1] = (runs[-1][0], stop, k)
        else:
            runs.append((start, stop, k))
    return runs


def _legend(devices: list[int], kept: bool) -> Text:
    """Which colour stands for which of the shown `devices` (and for rows `kept` from `output`, when there are
    some)."""
    legend = Text("\ncolours: ")
    for device in devices:
        legend.append(f"device {device}", style=colour(device)).append("  ")
    if kept:
        legend.append("kept from output", style=KEPT)
    return legend


_LOCATED = ("slice", "rows", "src_rows", "axis")  # the message detail the slice and rows columns show


def _messages(result: ScenarioResult, full: bool) -> Table:
    """Every message and local copy step: who to whom, size, when posted and when done, what it carried.

    Beyond `2 * _MESSAGE_EDGE` rows, only as many at each end show (unless `full`); the caption says how
    many are left out.
    Where a message lands (slice and rows) has columns of its own; any other detail the collective's
    messages carry (a ring's phase, step and chunk, a ppermute's pair) goes in one `detail` column. On any
    network but the fully connected one, a `hops` column gives the number of links each message crossed.
    """
    trace = result.trace
    traffic = sim.record.Traffic.of(trace)
    copies = traffic.copies
    table = Table(title=Text(str(traffic)), title_justify="left")
    other = bool(trace.detail_keys("message") - set(_LOCATED))
    located = not other or bool(trace.detail_keys() & set(_LOCATED))
    src_rows = located and "src_rows" in trace.detail_keys()  # a tiled all_to_all has none
    hops = result.scenario.mesh.network.topology != "fully_connected"
    columns = ("#",) + (("kind",) if copies else ()) + ("src", "dst", "bytes", "sent", "arrived") \
        + (("hops",) * hops) \
        + (("slice", "rows at dst") if located else ()) + (("src rows",) if src_rows else ()) \
        + (("detail",) if other else ())
    rows = []
    for k in _shown(len(result.trace), full):
        if k is None:
            rows.append((["..."] * len(columns), KEPT))
            table.caption = f"{len(result.trace) - 2 * _MESSAGE_EDGE} rows left out (--full shows every one)"
            continue
        message = result.trace[k]
        detail = message.detail
        spanned = _span(detail.get("rows")) + (f" (axis {detail['axis']})" if detail.get("axis") else "")
        kind = (message.kind,) if copies else ()
        where = ((str(detail.get("slice", "")), spanned) if located else ()) \
            + ((_span(detail.get("src_rows")),) if src_rows else ())
        rest = (", ".join(f"{key}={value}" for key, value in detail.items() if key not in _LOCATED),) if other else ()
        rows.append(([str(k), *kind, str(message.src), str(message.dst), str(message.size_bytes),
                      _seconds(message.send_time_s), _seconds(message.arrival_time_s),
                      *((str(len(message.route)),) * hops), *where, *rest], colour(message.src)))
    for i, column in enumerate(columns):
        # every column but detail keeps the width of its widest cell; detail, the widest, folds into the rest
        widest = max([len(column), *(len(cells[i]) for cells, _ in rows)])
        table.add_column(column, justify="right" if column in ("#", "src", "dst", "bytes", "hops") else "left",
                         no_wrap=column != "detail", overflow="fold", min_width=None if column == "detail" else widest)
    for cells, style in rows:
        table.add_row(*cells, style=style)
    return table


def _shown(count: int, full: bool) -> list[int | None]:
    """The message indices the table shows, None where the left-out middle goes."""
    if full or count <= 2 * _MESSAGE_EDGE:
        return list(range(count))
    return [*range(_MESSAGE_EDGE), None, *range(count - _MESSAGE_EDGE, count)]
