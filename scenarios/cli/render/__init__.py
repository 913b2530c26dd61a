"""What the command line shows: arrays coloured by the device that sent each row, protocol walkthroughs and
message tables (rich), the SVG picture and the HTML page of a run, the nccl-tests table of a sweep, the
JSON of a result, a spinner for long runs, units, and text from files made safe for a terminal."""

from scenarios.cli.render._arrays import EDGEITEMS, KEPT, PALETTE, THRESHOLD, array_lines, colour, summarised
from scenarios.cli.render._brief import brief
from scenarios.cli.render._edges import DEVICE_EDGE, LINE_EDGE, edges, fill
from scenarios.cli.render._json import write_json
from scenarios.cli.render._nccl import nccl_table
from scenarios.cli.render._progress import LazyStatus
from scenarios.cli.render._protocols import array_text, call_text, message_table, protocol, step_groups
from scenarios.cli.render._text import printable, terminal_console
from scenarios.cli.render._units import seconds, span
from scenarios.picture import page, picture, timeline
from sim.record import PALETTE_HEX

__all__ = [
    "DEVICE_EDGE", "EDGEITEMS", "KEPT", "LINE_EDGE", "PALETTE", "PALETTE_HEX", "THRESHOLD", "LazyStatus",
    "array_lines", "array_text", "call_text", "colour", "edges", "fill", "message_table", "nccl_table", "page",
    "picture", "printable", "protocol", "seconds", "span", "step_groups", "summarised", "terminal_console",
    "timeline", "write_json",
]
__all__ += ["brief"]  # arrays in one line for walkthroughs
