"""`meshsim check SCENARIO`: the simulator's results against the executable spec and real JAX, device by device.

Each output is compared bit for bit: dtype, shape and the array's row-major bytes (so NaN payloads and
-0.0 count). Scenario files carry no layouts, so the bytes compared are those of the row-major arrays, not
of device buffers in another layout. Only `[collective]` scenarios have independent answers: a `[program]`
or a Python script is refused with exit 2. Past `2 * DEVICE_EDGE` devices the table lists the devices at
both ends and every device that disagrees (`--full` lists every one), so a 1,000-device check prints a
screenful.
"""

from __future__ import annotations

import argparse

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

import oracles
import scenarios
from oracles import Call, Comparison, Difference, Report
from scenarios import Scenario, ScenarioError
from scenarios.cli._faces import refuse_saved
from scenarios.cli._limits import add_timeout, load_collective
from scenarios.cli.render import DEVICE_EDGE, terminal_console

_AGREE, _DIFFER, _SKIPPED = ("agree", "green"), ("DIFFER", "bold red"), ("skipped", "dim")


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `check` subparser to `commands`, with `execute` as what it runs."""
    check = commands.add_parser("check", help="compare the simulator with the executable spec and real JAX, "
                                              "bit for bit, on every device")
    check.add_argument("scenario", metavar="SCENARIO",
                       help="a [collective] scenario file (TOML), e.g. scenarios/library/moe_dispatch.toml")
    check.add_argument("--no-jax", action="store_true", help="compare with the executable spec only")
    check.add_argument("--full", action="store_true",
                       help=f"a row for every device (past {2 * DEVICE_EDGE} devices the table lists those at "
                            f"both ends and every one that disagrees)")
    add_timeout(check)
    check.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    """Run the scenario at `args.scenario` on the simulator, compare it, print the verdicts, return the exit code.

    Returns:
        0 when every answer agrees; 1 on any disagreement; 2 (through `main`) when the file is unreadable,
        breaks the format, is not a `[collective]` scenario (a saved run included), or the JAX worker dies.
    """
    scenario = _collective_scenario(args.scenario)
    result = scenarios.run(scenario)
    call = call_of(scenario)
    skipped = "--no-jax given; checked against the spec only" if args.no_jax else oracles.jax_unavailable(call)
    oracle = None if skipped else oracles.shared_oracle()
    report = oracles.check(call, list(result.outputs), oracle, jax_skipped=skipped)
    show(terminal_console(highlight=False), scenario, report, args.full)
    return 0 if report.agree else 1


def _collective_scenario(path: str) -> Scenario:
    """The `[collective]` scenario at `path`; anything else is a ScenarioError saying what `check` supports."""
    refuse_saved(path, "check")
    limit = ("check supports [collective] scenarios (TOML): the spec and JAX answer one collective call; "
             "use `meshsim run` to see it")
    scenario = load_collective(path, f"a Python script gives no collective call to compare; {limit}",
                               "a [program] has no independent answer (the spec and the JAX oracle run "
                               f"collectives, not a program's source); {limit}")
    if scenario.payload == "abstract":  # nothing to compare: the run has shapes and dtypes, no values
        raise ScenarioError(f"{path}: payload='abstract' has no values to check against the spec and JAX; check the "
                            f"same scenario with payload = \"bytes\" (its trace and times are the same)")
    return scenario


def call_of(scenario: Scenario) -> Call:
    """The scenario's collective call as the oracles take it: per-device arrays in argument order."""
    devices = scenario.mesh.devices
    args = tuple(tuple(scenario.inputs[d][name] for d in devices) for name in scenario.definition.arrays)
    return Call(scenario.op, dict(scenario.mesh.shape), args, dict(scenario.params))


def show(console: Console, scenario: Scenario, report: Report, full: bool = False) -> None:
    """The header, one table per output, and the final line: "all agree" or "N disagreements" (`full`: a
    row for every device, see the module's docstring)."""
    call = report.call
    params = ", ".join(f"{key}={value!r}" for key, value in call.params.items())
    console.rule(Text(scenario.title, style="bold"))
    console.print(Text(scenario.path, style="dim"))
    console.print(Text(f"{call.op}({params}) on {call.devices} devices", style="bold"), soft_wrap=True)
    if oracles.bit_for_bit(call):
        console.print("compared bit for bit: dtype, shape and each array's row-major bytes (NaN payloads and "
                      "-0.0 count)")
    else:
        console.print(f"algorithm={call.params['algorithm']!r} adds in its own documented order: compared "
                      "within the rounding bound of that order (same dtype and shape; see oracles._reordered)")
    console.print(_jax_line(report), soft_wrap=True)
    console.print(_table(report, full))
    verdict = report.disagreements
    console.print(Text("all agree", style="bold green") if not verdict else
                  Text(f"{verdict} disagreement{'s' if verdict > 1 else ''}", style="bold red"))


def _jax_line(report: Report) -> Text:
    """Whether JAX ran, by which path, or why not."""
    if report.jax_rejected is not None:
        error = report.jax_rejected
        return Text(f"JAX rejected the call the simulator ran: {error.kind}: {error.message}", style="bold red")
    if report.jax.skipped:
        return Text(f"JAX skipped: {report.jax.skipped}", style="yellow")
    path = report.jax_path or "real"
    return Text(f"JAX path: {path} ({oracles.path_text(report.call.op, path)})")


def _table(report: Report, full: bool) -> Table:
    """One row per device: the output's aval, both verdicts and the first difference (past `2 * DEVICE_EDGE`
    devices, unless `full`, those at both ends and every one that disagrees, a `...` row for each gap)."""
    table = Table(title=Text("result", style="bold"), title_justify="left")
    for column in ("device", "array", "simulator vs spec", "simulator vs JAX", "first difference"):
        table.add_column(column, justify="right" if column == "device" else "left", overflow="fold")
    simulator = report.answers["simulator"]
    devices = report.call.devices
    shown = _shown(report, devices, full)
    for before, d in zip([-1, *shown], shown):
        if d > before + 1:
            table.add_row(*("...",) * len(table.columns))
        found = [*report.spec.on(d), *report.jax.on(d)]
        array = _aval(simulator[d]) if d < len(simulator) else ""
        table.add_row(str(d), array, _verdict(report.spec, d), _verdict(report.jax, d),
                      _first(found[0], "spec" if found[0] in report.spec.differences else "JAX") if found else "")
    if len(shown) < devices:
        table.caption = (f"{devices - len(shown)} devices that agree are not listed (--full shows every one)")
    return table


def _shown(report: Report, devices: int, full: bool) -> list[int]:
    """The devices the table lists: all of them, or those at both ends and every one that disagrees."""
    if full or devices <= 2 * DEVICE_EDGE:
        return list(range(devices))
    differing = {d.device for comparison in (report.spec, report.jax) for d in comparison.differences}
    if None in differing:  # a difference of the whole answer concerns every device
        return list(range(devices))
    ends = set(range(DEVICE_EDGE)) | set(range(devices - DEVICE_EDGE, devices))
    return sorted(ends | {d for d in differing if 0 <= d < devices})


def _aval(x: np.ndarray) -> str:
    """`dtype[shape]`, e.g. 'int32[2, 3]'."""
    return f"{x.dtype}[{', '.join(map(str, x.shape))}]"


def _verdict(comparison: Comparison, device: int) -> Text:
    """'agree', 'DIFFER' or 'skipped' for one device."""
    if comparison.skipped:
        return Text(*_SKIPPED)
    return Text(*(_DIFFER if comparison.on(device) else _AGREE))


def _first(difference: Difference, reference: str) -> Text:
    """The first difference of a device: avals, or the first differing element's values and bits."""
    d = difference
    if d.kind == "devices":
        return Text(f"simulator answered for {d.actual} devices, {reference} for {d.expected}", style="red")
    if d.kind == "tree":
        return Text(f"simulator's leaves {d.actual}, {reference}'s {d.expected}", style="red")
    if d.kind == "aval":
        return Text(f"simulator {_aval(d.actual)}, {reference} {_aval(d.expected)}",
                    style="red")
    want, got = d.first_values()
    want_bits, got_bits = d.first_bits()
    index = ", ".join(map(str, d.first_index))
    return Text(f"[{index}]: simulator {got} ({got_bits}), {reference} {want} ({want_bits}); "
                f"{d.count} element{'s' if d.count > 1 else ''} differ", style="red")
