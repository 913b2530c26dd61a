"""A run explained in words, call by call: what `Run.explain()` and `meshsim explain RUN.json` print.

Each call of the program (`ProgramCall`) says where it was made, its algorithm and groups, when it began,
met and ended, and its messages. Big runs stay readable: past `2 * EDGE` calls, members of a group or
messages of a call, the first and last `EDGE` show and a line says how many were left out (`full` shows
everything).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.record._escape import printable
from sim.record._html import seconds
from sim.record._program_calls import ProgramCall, program_calls
from sim.record._runfile import Faced
from sim.record._traffic import Traffic
from sim.record._words import counted, plural

EDGE = 4


def explain_run(faced: Faced, full: bool = False) -> str:
    """The run as text: one line for the whole, then a paragraph per call (bounded unless `full`)."""
    calls = program_calls(faced.trace, faced.calls)
    lines = [_headline(faced, calls)]
    for shown in _ends(calls, full, "call"):
        lines.append("")
        lines += [shown] if isinstance(shown, str) else _call(faced, shown, len(calls), full)
    return "\n".join(lines) + "\n"


def _headline(faced: Faced, calls: list[ProgramCall]) -> str:
    """One line for the whole run: mesh, calls, messages, bytes over the network, local copies, end time."""
    axes = ", ".join(f"{printable(name)}={n}" for name, n in faced.mesh_shape.items())
    return (f"{printable(faced.title)}: mesh {axes} ({counted(len(faced.devices), 'device')}); "
            f"{counted(len(calls), 'call')}, {Traffic.of(faced.trace)}; simulated end time {seconds(faced.end_time_s)}")


def _call(faced: Faced, call: ProgramCall, total: int, full: bool) -> list[str]:
    """The paragraph of one call (the text a file gave, its collective, label and algorithm, escaped as
    `printable` escapes it: a label's newline or escape sequence shows as `\\x0a`, `\\x1b`)."""
    lines = [f"call {call.number} of {total}: {printable(call.collective)}"
             + (f" at {printable(call.label)}" if call.label else " (where it was made is not recorded)")]
    sizes = sorted({len(g) for g in call.groups})
    members = _members(call.groups[0], full)
    groups = (f"{counted(len(call.groups), 'group')} of {counted(sizes[0], 'device')}" if len(sizes) == 1 else
              f"{counted(len(call.groups), 'group')} of {', '.join(map(str, sizes))} devices")
    lines.append(f"  {'algorithm ' + printable(call.algorithm) + '; ' if call.algorithm else ''}{groups}"
                 + (f" ({members})" if len(call.groups) == 1 else f", the first {members}"))
    lines.append(f"  entered from {seconds(call.enter_s)}, every group met by {seconds(call.met_s)}, "
                 f"ended by {seconds(call.exit_s)}")
    if len(set(call.met_by_group)) > 1:  # groups that met at different times: when each did
        lines += ["    " + (g if isinstance(g, str) else f"group {_members(g[0], full)} met at {seconds(g[1])}")
                  for g in _ends(list(zip(call.groups, call.met_by_group)), full, "group")]
    trace = faced.trace
    ks = call.messages
    kinds = trace.column("kind")[ks] if len(ks) else np.zeros(0, object)
    sent = ks[kinds == "message"]
    lines.append(f"  {Traffic.of(trace, ks)}")
    lines += ["    " + (k if isinstance(k, str) else _message(trace[int(k)])) for k in _ends(list(sent), full,
                                                                                                   "message")]
    return lines


def _message(m: object) -> str:
    """One message in a line: ends, bytes, where it landed, when it was sent and arrived."""
    rows = m.detail.get("rows")
    where = f", rows {rows[0]}:{rows[1]}" if rows is not None else ""
    return (f"device {m.src} -> device {m.dst}: {counted(m.size_bytes, 'byte')}{where}, sent "
            f"{seconds(m.send_time_s)}, arrived {seconds(m.arrival_time_s)}")


def _members(group: tuple[int, ...], full: bool) -> str:
    """A group's members, or past `2 * EDGE` of them (unless `full`) the ends and how many between."""
    if full or len(group) <= 2 * EDGE:
        return str(list(group))
    return (f"[{', '.join(map(str, group[:EDGE]))}, ... {len(group) - 2 * EDGE} more ..., "
            f"{', '.join(map(str, group[-EDGE:]))}]")


def _ends(items: Sequence, full: bool, noun: str) -> list:
    """`items`, or past `2 * EDGE` of them (unless `full`) the first and last `EDGE` around a line saying how
    many were left out."""
    if full or len(items) <= 2 * EDGE:
        return list(items)
    left = len(items) - 2 * EDGE
    return [*items[:EDGE], f"... {left} more {plural(left, noun)} (--full for all) ...", *items[-EDGE:]]
