"""`meshsim draw SCENARIO -o FILE.svg|FILE.html`: a picture of who sends which rows where, or a page around it.

The page steps through the exchange (see `DESCRIPTION`, which `meshsim draw --help` prints).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import scenarios
import sim
from scenarios import ProgramScenario, ScenarioError, ScenarioResult
from scenarios.cli._faces import is_saved, program_run, saved_runs
from scenarios.cli._limits import add_allow_code, add_timeout
from scenarios.cli._output import check_writable
from scenarios.cli.render import page, picture

_FORMATS = {".svg": picture, ".html": page}
DESCRIPTION = """\
Draw a scenario, or a saved run.

A [program] scenario (run with --allow-code) or a run saved with Run.save (a .json file: a sim.Run, or a
simulate_jax run's `.run`) is drawn call by call: a timeline of the calls with a lane per device, and a
panel per call saying where the program made it (its source line, and JAX's name stack for a simulate_jax
run), its algorithm, groups, messages, bytes and times, with a sender x receiver matrix of the bytes it
moved. Past 32 devices the timeline shows the first lanes, past 16 devices a matrix cell is a block of
devices, and past 16 calls the first and last 8 get panels; --full draws everything. FILE.html puts the
picture above the run's message timeline and table.

A [collective] scenario: FILE.svg is the picture: each device's operand (left) and result (right) as
strips of rows coloured by the sending device, an arrow from the rows each message carries to the rows it
writes; rows kept from `output` hatched, operand rows no slice sends grey, empty slices dashed. Collectives
whose messages do not land on rows (the reductions, ppermute) get a box per device and an arrow per sender
and receiver.

FILE.html is one self-contained page (everything inline, no network) with the picture, a stepper, a
timeline and tables, and it steps through the exchange one message at a time in time order (posted, then
first carried, then arrived). The controls are first, back, play/pause, forward and last; the keys are the
right and left arrows, Home, End and the space bar. Each step highlights the sender and receiver, the
operand rows the message carries and the result rows it writes, its arrow, its timeline bar (a cursor
marks its flight) and its table row, and a caption says it in words: sender, receiver, rows, bytes, when
it was posted, started and arrived. For ragged_all_to_all a step also lights the sender's
input_offsets[i], send_sizes[i] and output_offsets[i] and, on the receiver, entry j of the all_to_all of
output_offsets (where it writes) and recv_sizes[j]. The steps are computed from the run's trace and the
scenario's arguments and written into the page as JSON. Big meshes stay usable: past 16 devices the
picture is a sender x receiver matrix, past 32 pairs the timeline draws each message on its sender's lane,
the tables list their first rows, and a big ragged mesh's offsets table shows the current step's two
devices; the page lists each of these above the picture. Big runs stay small and quick to draw: past 4,096
messages the stepper goes through the first 4,096 in time order, past 64 devices or 4,096 messages the SVG
is the matrix, past 128 devices a matrix cell is a block of devices, and past 64 devices a ragged page
leaves its offsets table out; --full draws and steps through everything, however big.
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the `draw` subparser to `commands`, with `execute` as what it runs."""
    draw = commands.add_parser("draw", help="draw a scenario: an SVG picture, or an HTML page that steps through "
                                            "its messages, with a timeline and tables",
                               description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    draw.add_argument("scenario", metavar="SCENARIO",
                      help="a scenario file (TOML) with a [collective] (e.g. scenarios/library/moe_dispatch.toml) "
                           "or a [program] (with --allow-code), or a run saved with Run.save (a .json file, e.g. "
                           "of a simulate_jax run)")
    draw.add_argument("-o", "--output", metavar="FILE", required=True,
                      help="where to write: FILE.svg (the picture) or FILE.html (a self-contained page)")
    draw.add_argument("--full", action="store_true",
                      help="draw every band and step through every message, however many (past 4,096 messages "
                           "or 64 devices the default bounds the picture and the stepper)")
    add_allow_code(draw, scripts=False)
    add_timeout(draw)
    draw.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    """Run the scenario at `args.scenario` (or read the run saved there) and write its picture or page to
    `args.output`.

    Returns:
        0 once the file is written.

    Raises:
        ScenarioError: the output is a directory, or in one that does not exist or refuses writing (checked
            first), its extension is neither .svg nor .html, the scenario is unreadable, breaks
            the format, is a script, is a program without --allow-code, or the simulator rejects it, the saved
            run is not one, or the output cannot be written.
    """
    output = Path(args.output)
    check_writable(output, "picture.svg")
    suffix = output.suffix.lower()
    if suffix not in _FORMATS:
        raise ScenarioError(f"-o {args.output}: unknown extension {output.suffix or '(none)'!r}; "
                            f"the output must end in .svg (a picture) or .html (a page)")
    loaded = _load(args.scenario, args.allow_code)
    if isinstance(loaded, ScenarioResult):
        drawn = _FORMATS[suffix](loaded, full=args.full)
    else:
        drawn = (sim.record.draw_svg if suffix == ".svg" else sim.record.draw_page)(loaded, args.full)
    try:
        output.write_text(drawn, encoding="utf-8")
    except OSError as error:
        raise ScenarioError(f"-o {args.output}: cannot write the file: {error.strerror}") from error
    print(f"wrote {args.output}")
    return 0


def _load(path: str, allow_code: bool) -> ScenarioResult | sim.record.Faced | tuple[sim.record.Faced, ...]:
    """What to draw: a `[collective]` scenario's result (drawn row by row), or the runs saved in a file or a
    `[program]` scenario's run, titled with its title (drawn call by call)."""
    if is_saved(path):
        return saved_runs(path)
    if path.endswith(".py"):
        raise ScenarioError(f"{path}: draw takes a TOML scenario with a [collective] or [program] table, not a "
                            f"script")
    scenario = scenarios.load(path, allow_code=allow_code)  # a [program] without consent is refused here, unrun
    if isinstance(scenario, ProgramScenario):
        return dataclasses.replace(program_run(scenario).faced(), title=scenario.title)
    return scenarios.run(scenario)
