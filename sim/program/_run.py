"""`Run`: what one simulated call of a mapped function gives: outputs, the trace, the end time, each device's
typed program and calls, and its faces (repr, notebook view, Perfetto)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.engine._engine import Simulation, gc_paused
from sim.record import _html, _perfetto
from sim.record._equations import Program
from sim.record._faces import Faces  # explain, draw, save
from sim.record._trace import CallRecord, Trace
from sim.record._violation import Violation, report

if TYPE_CHECKING:
    from sim.program import _explore


@dataclass(frozen=True)
class Run(Faces):
    """The outcome of one simulated call: outputs, the message trace, the simulated end time and the typed
    program each device executed.

    A sanitized run also has `violations`; `stopped` says why it ended early (a call it could not run),
    and then `outputs` is None. In a terminal a run is one line (`repr`: devices, messages, bytes over the
    network, calls, end time); in a notebook it shows that line, the timeline of its messages and their
    table (`_repr_html_`, the first 1,000 bars and 200 rows of a big run, saying what it left out)."""

    outputs: Any
    trace: Trace
    end_time_s: float
    simulation: Simulation
    stopped: str | None = None
    order_report: _explore.OrderReport | None = None  # set by `shard_map(..., explore_orders=N)`

    def __repr__(self) -> str:
        """One line: devices, messages, bytes over the network, calls, the end time (and why it stopped)."""
        said = _html.summary(self.trace, self.simulation.mesh.size, self.end_time_s, self.calls)
        violations = len(self.simulation.violations)
        return (f"Run({said}" + (f", {violations} violations" if violations else "")
                + (f", stopped: {self.stopped}" if self.stopped else "") + ")")

    def _repr_html_(self) -> str:
        """The run in a notebook: its summary line, the timeline of its messages and their table (bounded:
        see `sim.record.run_html`)."""
        return _html.run_html(self.trace, range(self.simulation.mesh.size), self.end_time_s, calls=self.calls)

    @property
    def violations(self) -> list[Violation]:
        """Every broken rule of every call a sanitized run met (`sim.Violation`: device, call, rule, rows)."""
        return self.simulation.violations

    def report(self) -> str:
        """The violations grouped by device, call and rule, with their rows; where the run stopped."""
        return report(self.violations, self.stopped)

    @property
    def programs(self) -> list[Program]:
        return self.simulation.programs

    def program(self, device: int = 0) -> Program:
        """What `device` executed, as typed equations; `print` it to see `{V:...}` annotations."""
        return self.simulation.programs[device]

    @property
    def calls(self) -> list[CallRecord]:
        """Each device's part in each collective call: when it reached the call, met its group, finished."""
        return self.simulation.calls

    def link_busy_s(self) -> dict[tuple, float]:
        """Seconds each link (by its id, see `sim.Mesh.route`) carried this run's messages at its full
        bandwidth: the bytes that crossed it over its bandwidth. Links no message crossed are left out."""
        return self.simulation.links.busy_s(self.trace)

    def trace_events(self, limit: int | None = None) -> dict:
        """The run as Chrome / Perfetto trace-event JSON (a dict): a track per device and per link, spans for
        calls, waits, sends, transfers, receives and local copies, a flow from each send to its receive.
        See `sim.record._perfetto` for the tracks; the same run gives the same dict. With `limit`, a run of
        more records exports its first `limit` in time order in full and summarises the rest, as `meshsim
        trace` does past 2,048 (a million messages in full are five million events and a gigabyte).

        Raises:
            InvalidTypeError: `limit` is neither None nor an int (a bool is not one).
            InvalidArgumentError: `limit` is negative.
        """
        return _perfetto.trace_events(self.trace, self.simulation.calls, self.simulation.mesh.size, limit)

    def to_perfetto(self, path: str | Path, limit: int | None = None) -> dict:
        """Write `trace_events(limit)` to `path` (open it in ui.perfetto.dev or chrome://tracing); returns the
        dict.

        Raises:
            InvalidTypeError: `limit` is neither None nor an int (a bool is not one).
            InvalidArgumentError: `limit` is negative (both before anything is written).
            OSError: `path` cannot be written.
        """
        with gc_paused():  # a big run's timeline is many small acyclic objects
            events = self.trace_events(limit)
            _perfetto.write(events, path)
        return events
