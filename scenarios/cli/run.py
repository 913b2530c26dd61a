"""`meshsim run SCENARIO`: run a scenario file and show, with rich, who sent which rows where and when."""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from collections.abc import Sequence

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

import scenarios
from layouts import MeshError
from scenarios import ProgramResult, Provenance, ScenarioResult

# One colour per sending device (cycled on big meshes); rows no message wrote are dim.
_PALETTE = ("bright_cyan", "bright_magenta", "bright_green", "yellow", "bright_blue", "bright_red",
            "cyan", "magenta", "green", "bright_yellow", "blue", "red")
_KEPT = "dim"


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `run` subparser to `commands`, with `execute` as what it runs."""
    run = commands.add_parser("run", help="run a scenario file: results, provenance of every row, messages, time")
    run.add_argument("scenario", metavar="SCENARIO",
                     help="a scenario file (TOML, or a Python script), e.g. scenarios/library/moe_dispatch.toml")
    run.add_argument("--json", action="store_true", help="print the same as JSON, without colours, for scripts")
    run.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    """Load and run the scenario at `args.scenario`, print it (rich, or JSON with `--json`), return the exit code.

    Returns:
        0 on success; 2 when the file is unreadable, breaks the format, or the simulator rejects its inputs
        (the message, naming file, field and line, goes to stderr).
    """
    path = args.scenario
    if path.endswith(".py"):  # a scenario that is a script (the layout guide's compile-then-call flow)
        runpy.run_path(path, run_name="__main__")
        return 0
    try:
        result = scenarios.run(scenarios.load(path))
    except MeshError as error:
        print(f"meshsim: error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    elif isinstance(result, ProgramResult):
        _show_program(Console(highlight=False), result)
    else:
        _show(Console(highlight=False), result)
    return 0


def _show_program(console: Console, result: ProgramResult) -> None:
    """The program's source, its typed listing, and the transposed programs with their communication."""
    scenario = result.scenario
    console.rule(f"[bold]{scenario.title}")
    console.print(scenario.path, style="dim")
    if scenario.description:
        console.print(scenario.description)
    console.print(Text(scenario.source.strip(), style="bold"))
    passes = [("forward", result.forward), ("transposed", result.transposed), ("transposed twice", result.twice)]
    for name, one in passes:
        if one is None:
            continue
        console.print(Text.assemble(("\n" + name, "bold"), f": {one.messages} messages, "
                                    f"{one.network_bytes} bytes across the network, simulated time ",
                                    _seconds(one.end_time_s)))
        console.print(Text(str(one.program)))
    if result.twice is not None:
        verdict = "the original program, op for op" if result.no_growth else "a different program"
        console.print(Text.assemble(("\ntransposing twice gives ", "bold"), verdict))
        lhs, rhs = result.adjoint
        console.print(f"adjoint identity: <f(x), ybar> = {lhs:.6g}, <x, t(f)(ybar)> = {rhs:.6g}")


def _show(console: Console, result: ScenarioResult) -> None:
    """Header, each device's inputs and colour-coded result, the messages, the simulated time."""
    _header(console, result)
    for device in result.scenario.mesh.devices:
        _device(console, result, device)
    if any(p is not None for p in result.provenance):
        console.print(_legend(result))
    console.print()
    console.print(_messages(result))
    console.print(Text.assemble(("simulated time: ", "bold"), _seconds(result.end_time_s)))


def _header(console: Console, result: ScenarioResult) -> None:
    """The title, file, mesh, network and the call as it would read in JAX."""
    scenario = result.scenario
    mesh, network = scenario.mesh, scenario.mesh.network
    axes = ", ".join(f"{name}={size}" for name, size in mesh.shape.items())
    params = ", ".join(f"{key}={value!r}" for key, value in scenario.params.items())
    console.rule(Text(scenario.title, style="bold"))
    console.print(Text(scenario.path, style="dim"))
    console.print(f"mesh {axes} ({mesh.size} devices); network {network.topology}, latency "
                  f"{_seconds(network.latency_s)}, bandwidth {network.bandwidth_bytes_per_s / 1e9:g} GB/s",
                  markup=False, soft_wrap=True)
    console.print(Text(f"{scenario.op}({params})", style="bold"))
    if scenario.description:
        console.print(Text(" ".join(scenario.description.split()), style="italic"))


def _device(console: Console, result: ScenarioResult, device: int) -> None:
    """One device: its inputs, its result coloured by sender, and which sender wrote which rows."""
    coords = ", ".join(f"{name}={i}" for name, i in result.scenario.mesh.coords(device).items())
    console.print()
    console.print(Text.assemble((f"device {device}", "bold underline"), (f"  ({coords})", "dim")))
    inputs = result.inputs[device]
    width = max(len(name) for name in [*inputs, "result"])
    for name, array in inputs.items():
        _print_array(console, name, array, None, width)
    provenance = result.provenance[device]
    _print_array(console, "result", result.outputs[device], provenance, width)
    indent = Text(" " * (width + 4))
    for line in _written_by(result, provenance):
        console.print(indent + line, soft_wrap=True)


def _print_array(console: Console, label: str, array: np.ndarray, provenance: Provenance | None, width: int) -> None:
    """`label` and the array's text, continuation lines indented under the first."""
    lines = _array_lines(_cells(array), _styles(array.shape, provenance))
    for i, line in enumerate(lines):
        prefix = (f"  {label if i == 0 else '':<{width}}  ", "bold" if label == "result" else "")
        console.print(Text.assemble(prefix, line), soft_wrap=True)


def _cells(array: np.ndarray) -> np.ndarray:
    """Each element as text, right-aligned to a common width; floats in their dtype's shortest form."""
    if array.dtype.kind == "f":
        texts = [np.format_float_positional(v, precision=4, unique=True, trim="0") for v in array.flat]
    else:
        texts = [str(v) for v in array.flat]
    width = max((len(t) for t in texts), default=0)
    return np.array([t.rjust(width) for t in texts], dtype=object).reshape(array.shape)


def _styles(shape: tuple[int, ...], provenance: Provenance | None) -> np.ndarray:
    """Each element's colour: its sender's along the provenance axis, dim where no message wrote."""
    styles = np.full(shape, "", dtype=object)
    if provenance is not None:
        for i, source in enumerate(provenance.sources):
            styles[(slice(None),) * provenance.axis + (i,)] = _KEPT if source is None else _colour(source)
    return styles


def _array_lines(cells: np.ndarray, styles: np.ndarray) -> list[Text]:
    """Nested-list text of an array (`[1, 3, 0, 0]`), one line per innermost row, each cell in its style."""
    if cells.ndim == 0:
        return [Text(cells.item(), style=styles.item())]
    if cells.ndim == 1:
        line = Text("[")
        for i, (cell, style) in enumerate(zip(cells, styles)):
            line.append(", " if i else "")
            line.append(cell, style=style)
        return [line + Text("]")]
    lines: list[Text] = []
    for i, (sub_cells, sub_styles) in enumerate(zip(cells, styles)):
        sub = _array_lines(sub_cells, sub_styles)
        sub[-1].append("," if i < len(cells) - 1 else "")
        lines += sub
    if not lines:
        return [Text("[]")]
    lines = [Text("[" if i == 0 else " ") + line for i, line in enumerate(lines)]
    lines[-1].append("]")
    return lines


def _written_by(result: ScenarioResult, provenance: Provenance | None) -> list[Text]:
    """One line per run of rows written by one message (or by none), e.g. `rows 0:1 from device 0, ...`."""
    if provenance is None:
        return []
    what = "rows" if provenance.axis == 0 else f"axis {provenance.axis} indices"
    lines = []
    for start, stop, k in _runs(provenance.messages):
        if k is None:
            lines.append(Text(f"{what} {start}:{stop} kept from output", style=_KEPT))
            continue
        message = result.trace[k]
        origin = f"{what} {start}:{stop} from device {message.src}"
        if "slice" in message.detail:
            origin += f", slice {message.detail['slice']}"
        if "src_rows" in message.detail:
            origin += f" (its operand rows {_span(message.detail['src_rows'])})"
        lines.append(Text(origin, style=_colour(message.src)))
    return lines


def _runs(values: Sequence) -> list[tuple[int, int, object]]:
    """Maximal runs of equal neighbours as (start, stop, value)."""
    runs, start = [], 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[start]:
            runs.append((start, i, values[start]))
            start = i
    return runs


def _legend(result: ScenarioResult) -> Text:
    """Which colour stands for which sending device."""
    legend = Text("\ncolours: ")
    for device in result.scenario.mesh.devices:
        legend.append(f"device {device}", style=_colour(device)).append("  ")
    if any(None in p.sources for p in result.provenance if p is not None):
        legend.append("kept from output", style=_KEPT)
    return legend


_LOCATED = ("slice", "rows", "src_rows", "axis")  # the message detail the slice and rows columns show


def _messages(result: ScenarioResult) -> Table:
    """Every message and local copy step: who to whom, size, when posted and when done, what it carried.

    Where a message lands (slice and rows) has columns of its own; any other detail the collective's
    messages carry (a ring's phase, step and chunk, a ppermute's pair) goes in one `detail` column.
    """
    network_bytes = sum(m.size_bytes for m in result.trace if m.src != m.dst)
    sent = sum(m.kind == "message" for m in result.trace)
    copies = len(result.trace) - sent
    title = f"{sent} messages, {network_bytes} bytes across the network" + (f", {copies} copy steps" if copies else "")
    table = Table(title=Text(title), title_justify="left")
    other = any(set(m.detail) - set(_LOCATED) for m in result.trace if m.kind == "message")
    located = not other or any(key in m.detail for m in result.trace for key in _LOCATED)
    columns = ("#",) + (("kind",) if copies else ()) + ("src", "dst", "bytes", "sent", "arrived") \
        + (("slice", "rows at dst", "src rows") if located else ()) + (("detail",) if other else ())
    for column in columns:
        table.add_column(column, justify="right" if column in ("#", "src", "dst", "bytes") else "left", no_wrap=True)
    for k, message in enumerate(result.trace):
        detail = message.detail
        rows = _span(detail.get("rows")) + (f" (axis {detail['axis']})" if detail.get("axis") else "")
        kind = (message.kind,) if copies else ()
        where = (str(detail.get("slice", "")), rows, _span(detail.get("src_rows"))) if located else ()
        rest = (", ".join(f"{key}={value}" for key, value in detail.items() if key not in _LOCATED),) if other else ()
        table.add_row(str(k), *kind, str(message.src), str(message.dst), str(message.size_bytes),
                      _seconds(message.send_time_s), _seconds(message.arrival_time_s), *where, *rest,
                      style=_colour(message.src))
    return table


def _span(rows: Sequence[int] | None) -> str:
    """`(start, stop)` as `start:stop`; empty when absent."""
    return "" if rows is None else f"{rows[0]}:{rows[1]}"


def _seconds(t: float) -> str:
    """`t` seconds in the largest unit that keeps it >= 1 (ASCII 'us' so any terminal encoding works)."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(t) >= scale:
            return f"{t / scale:.6g} {unit}"
    return f"{t / 1e-9:.6g} ns" if t else "0 s"


def _colour(device: int) -> str:
    """The colour of rows sent by `device`."""
    return _PALETTE[device % len(_PALETTE)]

