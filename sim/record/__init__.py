"""What a run records: the messages, copies and calls of its trace (and their Perfetto export), the typed
equations each device executed, the rules a call broke, and the trace as HTML (a timeline and a message
table). Imports nothing else of `sim` but its errors."""

from sim.record._compute import ComputeRecord
from sim.record._draw_run import draw_page, draw_svg
from sim.record._equations import Const, Equation, Program, Var, vma_str
from sim.record._escape import printable, xml_text
from sim.record._faces import Faces, SavedRun, draw_runs, load_run, load_runs, save_runs
from sim.record._html import (
    PALETTE_HEX,
    Timeline,
    colour,
    message_table,
    number,
    run_html,
    seconds,
    summary,
    svg,
    tag,
    text,
    timeline,
)
from sim.record._labels import call_label, located
from sim.record._order import time_order
from sim.record._perfetto import links as trace_links
from sim.record._perfetto import trace_events
from sim.record._perfetto import write as write_trace_events
from sim.record._program_calls import ProgramCall, program_calls
from sim.record._runfile import Faced
from sim.record._trace import CallRecord, CopyRecord, MessageRecord, Trace
from sim.record._traffic import Traffic
from sim.record._violation import Violation, grouped, skipped_str
from sim.record._words import counted, plural

__all__ = [
    "PALETTE_HEX", "CallRecord", "ComputeRecord", "Const", "CopyRecord", "Equation", "MessageRecord", "Program",
    "Timeline", "Trace", "Var", "Violation", "colour", "grouped", "message_table", "number", "printable", "run_html",
    "seconds", "skipped_str", "summary", "svg", "tag", "text", "time_order", "timeline", "trace_events", "trace_links",
    "vma_str", "write_trace_events", "xml_text",
]
__all__ += [  # the faces of a run; where calls were made; counts in words
    "Faced", "Faces", "ProgramCall", "SavedRun", "Traffic", "call_label", "counted", "draw_page", "draw_runs",
    "draw_svg", "load_run", "load_runs", "located", "plural", "program_calls", "save_runs",
]
