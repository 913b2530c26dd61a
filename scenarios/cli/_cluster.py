"""The options `meshsim sweep` and `meshsim campaign` share: where their jobs run, and counts given on the
command line."""

from __future__ import annotations

import argparse

from scenarios import ScenarioError


def add_cluster(parser: argparse.ArgumentParser) -> None:
    """Add `--workers N` (the local cluster's size) and `--scheduler tcp://HOST:PORT` (a running cluster)."""
    parser.add_argument("--workers", metavar="N", default=None,
                        help="worker processes of the local cluster (default: one per core), each bound to a core "
                             "of its own while there are no more workers than cores")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT", default=None,
                        help="run on the Dask cluster of this scheduler instead of a local one")


def local_workers(args: argparse.Namespace, jobs: str) -> int | None:
    """The local cluster's workers `args` ask for (None: one per core), checked; `jobs` names what they run.

    Raises:
        ScenarioError: `--workers` is not a positive integer, or comes with `--scheduler`.
    """
    workers = None if args.workers is None else integer("--workers", args.workers, minimum=1)
    if workers is not None and args.scheduler is not None:
        raise ScenarioError(f"--workers={workers} applies to a local cluster; with --scheduler the cluster's own "
                            f"workers run the {jobs}: give one of them")
    return workers


def integer(option: str, text: str, minimum: int) -> int:
    """`text` as an integer of at least `minimum`, else a ScenarioError naming `option` and the rule."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        rule = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ScenarioError(f"{option}={text!r} must be {rule}, e.g. {option} {max(minimum, 1) * 10}")
    return value
