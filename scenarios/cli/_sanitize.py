"""`meshsim run --sanitize`: run a scenario to the end where it can and report every broken rule.

Exit codes: 0 when the run met no violation, 1 when it met some (the report lists them), 2 when the
scenario cannot be run at all (a `ScenarioError`, as without `--sanitize`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

import scenarios
import sim
from scenarios import Pass, ProgramResult, ProgramScenario, ScenarioError, ScenarioResult
from scenarios._program import failed_at
from sim.record import grouped, skipped_str


@dataclass(frozen=True)
class Sanitized:
    """A sanitized run of a scenario: the result to show (None when the run stopped early) and the run."""

    result: ScenarioResult | ProgramResult | None
    run: sim.Run


def add_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--sanitize` to the `run` subparser."""
    parser.add_argument("--sanitize", action="store_true",
                        help="run the whole program, skipping broken slices, and report every violation of every "
                             "call by device, call and rule (exit 1 if any, 0 if none); not with --explore-orders")


def refuse_script(path: str) -> None:
    """A Python scenario runs its own `shard_map`s: it asks for sanitize itself (`sanitize=True`)."""
    raise ScenarioError(f"{path}: --sanitize needs a TOML scenario; a Python scenario passes sanitize=True to "
                        f"sim.shard_map itself")


def run(scenario: Any) -> Sanitized:
    """Run `scenario` sanitized: a collective scenario through `scenarios.run`, a program scenario's forward
    pass only (its transposes are not defined where the forward pass broke a rule)."""
    if isinstance(scenario, ProgramScenario):
        mapped = scenario.function
        function = sim.shard_map(mapped.f, mesh=mapped.mesh, in_specs=mapped.in_specs, out_specs=mapped.out_specs,
                                 check_vma=mapped.check_vma, sanitize=True)
        try:
            with scenarios.address_space_limit(mapped.mesh.max_memory_bytes, scenario.path):
                outcome = function.run(*scenario.args)
        except ScenarioError:  # out of memory, said in one line
            raise
        except Exception as error:  # the program is the file's own code: its failures are the file's errors
            raise ScenarioError(f"{failed_at(scenario.path, error)}: [program] source failed: "
                                f"{type(error).__name__}: {error}") from error
        result = None if outcome.stopped is not None else ProgramResult(scenario, Pass.of(outcome))
        return Sanitized(result, outcome)
    result = scenarios.run(scenario, sanitize=True)
    outcome = result.run
    return Sanitized(None if outcome.stopped is not None else result, outcome)


def show(console: Console, sanitized: Sanitized, json_output: bool, show_result: Callable[[Any], None]) -> int:
    """Print the result (when the run finished) with `show_result`, then the violations; returns the exit
    code: 1 if the run met any violation or stopped early, else 0."""
    outcome = sanitized.run
    if json_output:
        json.dump({"violations": [v.to_dict() for v in outcome.violations], "stopped": outcome.stopped},
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        if sanitized.result is not None:
            show_result(sanitized.result)
        console.print()
        _report(console, outcome)
    return 1 if outcome.violations or outcome.stopped is not None else 0


def _report(console: Console, outcome: sim.Run) -> None:
    """The violations as a table grouped by device, call and rule; then where the run stopped."""
    violations = outcome.violations
    if not violations and outcome.stopped is None:
        console.print(Text("sanitize: no violations", style="bold green"))
        return
    table = Table(title=Text(f"sanitize: {len(violations)} violation(s)", style="bold red"), title_justify="left")
    for column in ("device", "call", "rule", "rows", "skipped", "violation"):
        table.add_column(column, no_wrap=column in ("device", "rows"), overflow="fold")
    for (device, _, rule), found in grouped(violations).items():
        for k, v in enumerate(found):
            rows = "" if v.rows is None else f"{v.rows[0]}:{v.rows[1]}"
            call = f"{v.collective} #{v.call} on {list(v.members)}"
            where = ("group" if device is None else str(device), call, rule) if k == 0 else ("", "", "")
            table.add_row(*map(Text, where), rows, skipped_str(v), Text(v.message))
    console.print(table)
    if outcome.stopped is not None:
        console.print(Text.assemble(("the run stopped at this error, so later calls were not checked: ", "bold"),
                                    outcome.stopped), soft_wrap=True)
