"""`meshsim draw SCENARIO -o FILE.svg|FILE.html`: a picture of who sends which rows where, or a page around it."""

from __future__ import annotations

import argparse
from pathlib import Path

import scenarios
from scenarios import ScenarioError, ScenarioResult
from scenarios.cli._limits import add_timeout, load_collective
from scenarios.cli.render import page, picture

_FORMATS = {".svg": picture, ".html": page}


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `draw` subparser to `commands`, with `execute` as what it runs."""
    draw = commands.add_parser("draw", help="draw a scenario: an SVG picture, or an HTML page with a timeline "
                                            "and tables")
    draw.add_argument("scenario", metavar="SCENARIO",
                      help="a [collective] scenario file (TOML), e.g. scenarios/library/moe_dispatch.toml")
    draw.add_argument("-o", "--output", metavar="FILE", required=True,
                      help="where to write: FILE.svg (the picture) or FILE.html (a self-contained page)")
    add_timeout(draw)
    draw.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    """Run the scenario at `args.scenario` and write its picture or page to `args.output`.

    Returns:
        0 once the file is written.

    Raises:
        ScenarioError: the output's extension is neither .svg nor .html, the scenario is unreadable, breaks
            the format, is a program or a script, or the simulator rejects it, or the output cannot be written.
    """
    output = Path(args.output)
    render = _FORMATS.get(output.suffix.lower())
    if render is None:
        raise ScenarioError(f"-o {args.output}: unknown extension {output.suffix or '(none)'!r}; "
                            f"the output must end in .svg (a picture) or .html (a page)")
    result = _result(args.scenario)
    try:
        output.write_text(render(result), encoding="utf-8")
    except OSError as error:
        raise ScenarioError(f"-o {args.output}: cannot write the file: {error.strerror}") from error
    print(f"wrote {args.output}")
    return 0


def _result(path: str) -> ScenarioResult:
    """The run of the `[collective]` scenario at `path`; programs and scripts have no rows to draw."""
    return scenarios.run(load_collective(
        path, "draw takes a TOML scenario with a [collective] table, not a script",
        f"draw takes a scenario with a [collective] table; this one has [program] (use `meshsim run --allow-code "
        f"{path}`)"))
