"""The ragged_all_to_all steps of `meshsim explain`: offsets, the exchange of output_offsets, sends, rules.

Each step is a title and a list of rich renderables. The sends come from the run's trace (each message's
detail holds `slice`, `rows` and `src_rows`); when the simulator refused the call there is no trace, so
they are read from the inputs, as the docs' pseudocode would make them, and the broken rules are named.
The slices are read as columns (`_slices.Slices`) and only those shown become records, so what a step costs
grows with what it prints, not with the million slices of a 1,000-device exchange (unless `full`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.table import Table
from rich.text import Text

from scenarios import Scenario, ScenarioResult
from scenarios.cli.render._arrays import colour as _colour
from scenarios.cli.render._brief import brief
from scenarios.cli.render._edges import DEVICE_EDGE, LINE_EDGE, edges, fill
from scenarios.cli.render._slices import Slices, overlapping, slices_of
from scenarios.cli.render._units import seconds as _seconds
from scenarios.cli.render._units import span as _span
from scenarios.picture import slices_per_member
from sim.record import counted

Step = tuple[str, list[Any]]
_INDEX = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")
# The undefined cases, each with the words the simulator's violations use for it.
RULES = (
    ("sizes agree", "send_sizes must equal the all_to_all of recv_sizes",
     "each sender's send_sizes[i] equals the receiver's recv_sizes for that slice "
     "(send_sizes == all_to_all(recv_sizes, tiled=True))"),
    ("sends in bounds", "outside operand rows", "every sent slice lies inside the sender's operand rows"),
    ("receives in bounds", "outside output rows", "every received slice lies inside the receiver's output rows"),
    ("no overlaps", "overlap", "no two slices a device receives write the same output rows"),
    ("sizes not negative", ">= 0", "no send or receive size is negative"),
    ("shapes agree", "every device in the group must agree",
     "every member has the same operand dtype and trailing shape, output shape and number of slices"),
)


def steps(scenario: Scenario, result: ScenarioResult | None, violations: Sequence[str],
          full: bool = False) -> list[Step]:
    """The ragged walkthrough's steps, from the run (`result`) or, when it was refused, the inputs alone; past
    `2 * DEVICE_EDGE` devices or slices, or `2 * LINE_EDGE` sends, only the ends show unless `full`."""
    slices = slices_of(scenario)
    told = [("Offsets and sizes on each device", [_offsets_table(scenario, full), _offsets_note(scenario, full)]),
            ("Why each sender holds the receiver's output_offsets", _why_offsets(scenario, slices, full))]
    if result is None:
        told.append(("The sends the inputs ask for (the simulator sent none)", _planned(scenario, slices, full)))
        told.append(("The undefined cases this input hits", _hits(violations)))
        return told
    told += [("SEND -> RECEIVE: each slice's rows", _sends(result, slices, full)),
             ("What stays from output", _kept(result, full)),
             ("The undefined cases this input avoids", _avoided(slices, full))]
    return told


def _offsets_table(scenario: Scenario, full: bool) -> Table:
    """One row per device and index array, one column per slice (headed by the device it goes to); past
    `2 * DEVICE_EDGE` devices or slices only the ends, unless `full`."""
    width = max(len(scenario.inputs[d]["send_sizes"]) for d in scenario.mesh.devices)
    columns = edges(range(width), full, DEVICE_EDGE // 2, "slices")
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("device", justify="right")
    table.add_column("array")
    for i in columns:
        table.add_column("..." if isinstance(i, Text) else f"slice {i}", justify="right")

    def add(device: int) -> None:
        members, per = slices_per_member(scenario, device)
        targets = ["..." if isinstance(i, Text) else f"-> {members[min(i // per, len(members) - 1)]}"
                   for i in columns]
        table.add_row(str(device), Text("goes to / comes from", style="dim"), *targets, style=_colour(device))
        for name in _INDEX:
            values = scenario.inputs[device][name].tolist()
            table.add_row("", name, *("..." if isinstance(i, Text) else str(values[i]) if i < len(values) else ""
                                      for i in columns), end_section=name == _INDEX[-1])
    fill(table, scenario.mesh.devices, full, DEVICE_EDGE, "devices", add)
    cut = [i.plain for i in columns if isinstance(i, Text)]
    if cut:
        table.caption = "; ".join(filter(None, [table.caption, *cut]))
    return table


def _offsets_note(scenario: Scenario, full: bool) -> Text:
    """How to read the table, with each device's operand and output (the ends only past `2 * DEVICE_EDGE`
    devices, unless `full`)."""
    lines = ["Slice i of a device goes to group member i // (slices per member). input_offsets and send_sizes "
             "pick the rows it sends from its operand; output_offsets says where they land on the receiver; "
             "recv_sizes[j] is how many rows it receives as its slice j."]
    for d in edges(scenario.mesh.devices, full, DEVICE_EDGE, "devices"):
        if isinstance(d, Text):
            lines.append(d.plain)
            continue
        inputs = scenario.inputs[d]
        lines.append(f"device {d}: operand {brief(inputs['operand'], full)}, output {brief(inputs['output'], full)}")
    return Text("\n".join(lines))


def _why_offsets(scenario: Scenario, slices: Slices, full: bool) -> list[Any]:
    """The docs' point: output_offsets are the receiver's positions, exchanged by an all_to_all."""
    text = Text(
        "A device's output_offsets do not say where its own result is written: output_offsets[i] says where "
        "slice i lands in the output of the device it is sent to. Only the sender knows how many rows it "
        "sends and where the receiver wants them, so the receiver's write positions are the all_to_all of "
        "the senders' output_offsets (tiled, split and concatenated along axis 0): on device r, entry j is "
        "output_offsets[r * per + j % per] of group member j // per. The simulator carries that number in "
        "each message's header, which is the same exchange without a separate message.\n")
    table = Table(show_edge=False, pad_edge=False, title="all_to_all(output_offsets): where each device writes",
                  title_justify="left")
    for column in ("device", "receives slice j", "from device", "its output_offsets[i]", "recv_sizes[j]",
                   "so writes rows"):
        table.add_column(column, justify="right")

    def add(k: int) -> None:
        s = slices[k]
        size = s.recv_size if s.recv_size is not None else "?"
        rows = _span((s.rows[0], s.rows[0] + s.recv_size)) if s.recv_size is not None else "?"
        table.add_row(str(s.dst), str(s.j), str(s.src), f"[{s.i}] = {s.rows[0]}", str(size), rows,
                      style=_colour(s.src))
    fill(table, slices.by_receiver(), full, LINE_EDGE, "slices", add)
    return [text, table]


def _sends(result: ScenarioResult, slices: Slices, full: bool) -> list[Any]:
    """Each message of the trace as a sentence: operand rows and values -> the receiver's output rows."""
    lines: list[Any] = []
    trace = result.trace
    sent = np.flatnonzero(trace.detail_numbers("src_rows", 2)[1] & (trace.column("kind") == "message"))
    for k in edges(sent, full, LINE_EDGE, "messages"):
        if isinstance(k, Text):
            lines.append(k)
            continue
        m = trace[int(k)]
        start, stop = m.detail["src_rows"]
        values = brief(result.inputs[m.src]["operand"][start:stop], full)
        lines.append(Text(
            f"SEND device {m.src} slice {m.detail['slice']}: operand rows {start}:{stop} = {values} -> "
            f"RECEIVE device {m.dst} at output rows {_span(m.detail['rows'])}; {counted(m.size_bytes, 'byte')}, sent "
            f"{_seconds(m.send_time_s)}, arrived {_seconds(m.arrival_time_s)}"
            + (" (to itself: a local copy)" if m.src == m.dst else ""), style=_colour(m.src)))
    empty = slices.empty()
    if len(empty):
        named = (k.plain if isinstance(k, Text) else f"device {slices.src[k]} slice {slices.i[k]}"
                 for k in edges(empty, full, LINE_EDGE, "empty slices"))
        lines.append(Text(f"Empty slices send no message ({len(empty)}): {', '.join(named)}.", style="dim"))
    return lines


def _kept(result: ScenarioResult, full: bool) -> list[Any]:
    """Each device's result, coloured by sender, and the output rows no slice wrote."""
    lines: list[Any] = []
    for d in edges(result.scenario.mesh.devices, full, DEVICE_EDGE, "devices"):
        if isinstance(d, Text):
            lines.append(d)
            continue
        sources = result.provenance[d].sources
        kept = [i for i, s in enumerate(sources) if s is None]
        runs = ", ".join(_span(r) for r in _ranges(kept)) or "none"
        lines.append(Text.assemble(f"device {d}: result ", brief(result.outputs[d], full, sources),
                                   f"; rows kept from output: {runs}"))
    lines.append(Text("Rows no slice writes keep the value `output` had (dim above): the result starts as a copy "
                      "of output and each arrival overwrites its rows.", style="dim"))
    return lines


def _ranges(indices: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive indices as (start, stop) ranges."""
    ranges: list[tuple[int, int]] = []
    for i in indices:
        if ranges and ranges[-1][1] == i:
            ranges[-1] = (ranges[-1][0], i + 1)
        else:
            ranges.append((i, i + 1))
    return ranges


def _avoided(slices: Slices, full: bool) -> list[Any]:
    """Each rule the docs leave undefined when broken, and that this input keeps; the send slices that overlap
    (past `2 * LINE_EDGE` only the ends, unless `full`)."""
    lines = [Text("The docs leave the result undefined when a call breaks one of these rules; the simulator "
                  "checks all of them before any message moves. This input keeps every one:")]
    lines += [Text(f"  ok  {name}: {rule}", style="green") for name, _, rule in RULES]
    sends = slices.size > 0
    src, start, stop = slices.src[sends], slices.start[sends], slices.start[sends] + slices.size[sends]
    found = overlapping(src, start, stop)
    shared = np.unique(np.stack([src[found], start[found], stop[found]], axis=1), axis=0)
    if len(shared):
        named = (k.plain if isinstance(k, Text) else f"device {k[0]} rows {_span((k[1], k[2]))}"
                 for k in edges(shared, full, LINE_EDGE, "overlapping slices"))
        lines.append(Text("Send slices may overlap (they are only read): " + ", ".join(named), style="dim"))
    return lines


def _planned(scenario: Scenario, slices: Slices, full: bool) -> list[Any]:
    """The slices as the inputs describe them, since the refused call sent nothing: those whose sizes disagree
    first, then the rest (past `2 * LINE_EDGE` slices only the ends, unless `full`)."""
    lines: list[Any] = []
    for k in edges(slices.disagreeing_first(), full, LINE_EDGE, "slices"):
        if isinstance(k, Text):
            lines.append(k)
            continue
        s = slices[k]
        size = s.src_rows[1] - s.src_rows[0]
        recv = "?" if s.recv_size is None else s.recv_size
        lines.append(Text(f"device {s.src} slice {s.i}: operand rows {_span(s.src_rows)} ({counted(size, 'row')}) "
                          f"-> device {s.dst} slice {s.j}: output rows {_span(s.rows)}, recv_sizes[{s.j}]={recv}"
                          + ("" if s.recv_size == size else "  <- sizes disagree"), style=_colour(s.src)))
    return lines


def _hits(violations: Sequence[str]) -> list[Any]:
    """Each broken rule with the simulator's own words for every violation of it."""
    lines = [Text(f"The simulator refused the call: {len(violations)} broken rule(s). The docs leave the result "
                  f"of such a call undefined, so no result is shown.", style="bold red")]
    for name, words, rule in RULES:
        found = [v for v in violations if words in v]
        mark = ("BROKEN", "red") if found else ("ok", "green")
        lines.append(Text(f"  {mark[0]}  {name}: {rule}", style=mark[1]))
        lines += [Text(f"        {v}") for v in found]
    other = [v for v in violations if not any(words in v for _, words, _ in RULES)]
    lines += [Text(f"  BROKEN  {v}", style="red") for v in other]
    return lines

