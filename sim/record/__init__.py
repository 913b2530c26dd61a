"""What a run records: the messages, copies and calls of its trace (and their Perfetto export), the typed
equations each device executed, and the rules a call broke. Imports nothing else of `sim` but its errors."""

from sim.record._equations import Const, Equation, Program, Var, vma_str
from sim.record._perfetto import trace_events
from sim.record._trace import CallRecord, CopyRecord, MessageRecord, Trace
from sim.record._violation import Violation, grouped, skipped_str

__all__ = [
    "CallRecord", "Const", "CopyRecord", "Equation", "MessageRecord", "Program", "Trace", "Var", "Violation",
    "grouped", "skipped_str", "trace_events", "vma_str",
]
