"""`meshsim run --explore-orders N`: run a scenario under N seeded arrival orders and print what changes.

Exit 0 when every order gives the default order's result (the program is order-independent over the
orders tried), 1 when some order gives another result (each printed with the output, devices, rows, values
and the two orders), 2 when the scenario cannot run at all.
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.text import Text

import scenarios
import sim
from scenarios import ScenarioError
from scenarios.cli._limits import UsageError, budget_of
from scenarios.cli.render import terminal_console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--explore-orders N` and `--explore-seed S` to the `run` subparser."""
    parser.add_argument("--explore-orders", type=_positive, default=0, metavar="N",
                        help="also run under N seeded perturbations of message timing and arrival order and "
                             "report any result that changes (exit 1 if one does); ragged slices that land on "
                             "the same rows are then written in arrival order instead of refused")
    parser.add_argument("--explore-seed", type=_non_negative, default=None, metavar="S",
                        help="the first seed of --explore-orders, which it needs (seeds S to S + N - 1; default 0)")


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse `--explore-seed` without `--explore-orders`, and `--explore-orders` with `--sanitize`.

    Raises:
        UsageError: the options do not go together (`main` prints run's usage and exits 2).
    """
    if args.explore_seed is not None and not args.explore_orders:
        raise UsageError(f"--explore-seed {args.explore_seed} needs --explore-orders N, the number of orders "
                         f"whose seeds start there (e.g. --explore-orders 8 --explore-seed {args.explore_seed})")
    if args.explore_orders and args.sanitize:
        raise UsageError("--sanitize cannot go with --explore-orders: --sanitize reports every rule the run breaks, "
                         "while --explore-orders compares the results of runs that break none (ragged slices "
                         "landing on the same rows are written in arrival order instead of refused); run with "
                         "--sanitize first, then with --explore-orders")


def execute(args: argparse.Namespace) -> int:
    """Explore `args.scenario` over `args.explore_orders` orders; print the report (JSON with `--json`).

    Returns:
        0 when the result is order-independent over the orders tried, 1 when it changed.

    Raises:
        ScenarioError: the file is unreadable, breaks the format, is a Python script, or its default-order
            run fails.
    """
    if args.scenario.endswith(".py"):
        raise ScenarioError(f"{args.scenario}: --explore-orders needs a scenario file (TOML); a Python script "
                            "runs its own code and can call sim.explore itself")
    limit, max_messages = budget_of(args)
    scenario = scenarios.load(args.scenario, allow_code=args.allow_code, max_memory_bytes=limit,
                              max_messages=max_messages)
    report = scenarios.explore(scenario, args.explore_orders, args.explore_seed or 0)
    if args.json:
        json.dump({"scenario": scenario.path, **report.to_dict()}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _show(terminal_console(highlight=False), scenario.path, report)
    return 0 if report.independent else 1


def _show(console: Console, path: str, report: sim.OrderReport) -> None:
    """The verdict, then each other result: the two orders, and per output the devices, rows and values."""
    console.print(Text(path, style="dim"))
    lines = str(report).splitlines()
    console.print(Text(lines[0], style="bold green" if report.independent else "bold red"))
    for line in lines[1:]:
        console.print(Text(line), soft_wrap=True)


def _positive(text: str) -> int:
    value = int(text) if text.strip().lstrip("-").isdigit() else None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"--explore-orders={text!r} must be a whole number >= 1")
    return value


def _non_negative(text: str) -> int:
    value = int(text) if text.strip().lstrip("-").isdigit() else None
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"--explore-seed={text!r} must be a whole number >= 0")
    return value
