"""`meshsim report [ID ...] [--all] [--out DIR]`: each finding of FINDINGS.md as an issue for JAX's tracker.

The text is rendered from the finding's folder, `oracles/jax_fixes/findings/<id>/` (`oracles.jax_fixes.report`):
the reproducer for stock JAX, expected against actual, how the expected answer is known, the faulty source
lines, the patch, the GPU/TPU note and whether the fault is still upstream. Without an id or `--all` it lists
the findings. `--out DIR` writes `DIR/<id>.md` for each (and, with `--all`, `DIR/index.md`, the list with the
site's table of contents: `meshsim report --all --out docs/findings` makes the site's pages).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from oracles.jax_fixes import report
from scenarios import ScenarioError
from scenarios.cli.render import printable


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `report` subparser to `commands`, with `execute` as what it runs."""
    parser = commands.add_parser("report", help="write a finding of FINDINGS.md as an issue for JAX's tracker: "
                                                 "reproducer, expected vs actual, source lines, patch")
    parser.add_argument("ids", nargs="*", metavar="ID",
                        help="a finding's id, e.g. untiled-all-to-all-transpose (none: list the findings)")
    parser.add_argument("--all", action="store_true", help="every finding (with --out, also index.md)")
    parser.add_argument("--out", metavar="DIR", help="write DIR/<id>.md for each report instead of printing it")
    parser.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    """Print or write the reports `args` asks for; return 0.

    Raises:
        ScenarioError: ids and `--all` together, or `--out` with neither (exit 2 through `main`).
        report.ReportError: an id that is no finding's, or a finding's folder that breaks the format (exit 2).
    """
    if args.all and args.ids:
        raise ScenarioError(f"report: give finding ids or --all, not both (ids={args.ids!r})")
    if args.out is not None and not (args.all or args.ids):
        raise ScenarioError(f"report: --out={args.out!r} needs finding ids or --all")
    findings = report.load_all() if args.all else tuple(report.load(name) for name in args.ids)
    if not (args.all or args.ids):
        sys.stdout.write(printable(report.render_index(report.load_all(), site=False), multiline=True))
        return 0
    pages = {f"{finding.id}.md": report.render(finding) for finding in findings}
    if args.all:
        pages["index.md"] = report.render_index(findings)
    if args.out is None:
        sys.stdout.write(printable("\n".join(text for name, text in pages.items() if name != "index.md"),
                                   multiline=True))
        return 0
    _write(Path(args.out), pages)
    return 0


def _write(out: Path, pages: dict[str, str]) -> None:
    """Write each page into `out` (made if missing), one line per file written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in pages.items():
            (out / name).write_text(text)
            print(f"wrote {printable(out / name)}")
    except OSError as error:
        raise ScenarioError(f"report: cannot write into --out={str(out)!r}: {error.strerror}") from None
