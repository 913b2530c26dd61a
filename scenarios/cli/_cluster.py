"""The options `meshsim sweep` and `meshsim campaign` share: where their jobs run, and counts given on the
command line."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from scenarios import ScenarioError

DASHBOARD = "127.0.0.1:8787"  # `--dashboard` without an address (Dask takes a free port when 8787 is taken)
_ADDRESS = re.compile(r"(?P<host>[A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[0-9]{1,5}))?")


def add_cluster(parser: argparse.ArgumentParser) -> None:
    """Add `--workers N` (the local cluster's size) and `--scheduler tcp://HOST:PORT` (a running cluster)."""
    parser.add_argument("--workers", metavar="N", default=None,
                        help="worker processes of the local cluster (default: one per core), each bound to a core "
                             "of its own while there are no more workers than cores")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT", default=None,
                        help="run on the Dask cluster of this scheduler instead of a local one (Dask has no "
                             "authentication: see docs/reference/clusters.md before you open one to a network)")
    parser.add_argument("--dashboard", metavar="ADDRESS", nargs="?", const=DASHBOARD, default=None,
                        help=f"serve the local cluster's Dask dashboard on ADDRESS (HOST:PORT, HOST or :PORT; default "
                             f"{DASHBOARD}) and print its URL; off unless given. Everything else listens on "
                             "127.0.0.1 only")


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


def dashboard_address(args: argparse.Namespace) -> str | None:
    """`--dashboard`'s address as HOST:PORT (host 127.0.0.1 and port 8787 where not given), or None when off.

    Raises:
        ScenarioError: the address is not HOST, HOST:PORT or :PORT with a port below 65536, or it comes with
            `--scheduler` (a running scheduler serves its own dashboard).
    """
    text = args.dashboard
    if text is None:
        return None
    if args.scheduler is not None:
        raise ScenarioError(f"--dashboard applies to a local cluster; the scheduler at --scheduler={args.scheduler!r} "
                            "serves its own (`dask scheduler --dashboard-address HOST:PORT`)")
    match = _ADDRESS.fullmatch(text)
    if match is None or text.endswith((".toml", ".py")) or int(match["port"] or 0) > 65535:
        raise ScenarioError(f"--dashboard={text!r} must be an address, HOST:PORT, HOST or :PORT (e.g. --dashboard "
                            f"{DASHBOARD}); to give no address, put --dashboard after the other arguments")
    default_host, default_port = DASHBOARD.split(":")
    return f"{match['host'] or default_host}:{match['port'] or default_port}"


def announce_dashboard(client: Any, address: str | None) -> None:
    """Print the dashboard's URL on stderr when one was asked for (`address` not None)."""
    if address is not None:
        print(f"meshsim: Dask dashboard at {client.dashboard_link}", file=sys.stderr, flush=True)


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
