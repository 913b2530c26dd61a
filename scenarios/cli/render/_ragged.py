"""The ragged_all_to_all steps of `meshsim explain`: offsets, the exchange of output_offsets, sends, rules.

Each step is a title and a list of rich renderables. The sends come from the run's trace (each message's
detail holds `slice`, `rows` and `src_rows`); when the simulator refused the call there is no trace, so
they are read from the inputs, as the docs' pseudocode would make them, and the broken rules are named.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

from scenarios import Scenario, ScenarioResult
from scenarios.cli.render._arrays import colour as _colour
from scenarios.cli.render._protocols import array_text
from scenarios.cli.render._units import seconds as _seconds
from scenarios.cli.render._units import span as _span

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


@dataclass(frozen=True)
class Slice:
    """One slice of the exchange: sender `src` sends its slice `i` to `dst`, which receives it as slice `j`."""

    src: int
    i: int
    dst: int
    j: int
    src_rows: tuple[int, int]
    rows: tuple[int, int]
    recv_size: int | None


def steps(scenario: Scenario, result: ScenarioResult | None, violations: Sequence[str]) -> list[Step]:
    """The ragged walkthrough's steps, from the run (`result`) or, when it was refused, the inputs alone."""
    slices = _slices(scenario)
    told = [("Offsets and sizes on each device", [_offsets_table(scenario), _offsets_note(scenario)]),
            ("Why each sender holds the receiver's output_offsets", _why_offsets(scenario, slices))]
    if result is None:
        told.append(("The sends the inputs ask for (the simulator sent none)", _planned(scenario, slices)))
        told.append(("The undefined cases this input hits", _hits(violations)))
        return told
    told += [("SEND -> RECEIVE: each slice's rows", _sends(result)),
             ("What stays from output", _kept(result)),
             ("The undefined cases this input avoids", _avoided(slices))]
    return told


def _per(scenario: Scenario, device: int) -> tuple[tuple[int, ...], int]:
    """The members of `device`'s group and the number of slices per member."""
    members = scenario.mesh.group(device, scenario.params["axis_name"],
                                  scenario.params.get("axis_index_groups")).members
    return members, max(1, len(scenario.inputs[device]["send_sizes"]) // len(members))


def _slices(scenario: Scenario) -> list[Slice]:
    """Every slice the inputs describe, sender by sender, as the docs' pseudocode reads them."""
    found = []
    for src in scenario.mesh.devices:
        a = {name: scenario.inputs[src][name].tolist() for name in _INDEX}
        members, per = _per(scenario, src)
        for i, (offset, size) in enumerate(zip(a["input_offsets"], a["send_sizes"])):
            dst = members[min(i // per, len(members) - 1)]
            j = members.index(src) * per + i % per
            recv = scenario.inputs[dst]["recv_sizes"].tolist()
            at = a["output_offsets"][i] if i < len(a["output_offsets"]) else 0
            found.append(Slice(src, i, dst, j, (offset, offset + size), (at, at + size),
                               recv[j] if j < len(recv) else None))
    return found


def _offsets_table(scenario: Scenario) -> Table:
    """One row per device and index array, one column per slice (headed by the device it goes to)."""
    width = max(len(scenario.inputs[d]["send_sizes"]) for d in scenario.mesh.devices)
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("device", justify="right")
    table.add_column("array")
    for i in range(width):
        table.add_column(f"slice {i}", justify="right")
    for device in scenario.mesh.devices:
        members, per = _per(scenario, device)
        targets = [f"-> {members[min(i // per, len(members) - 1)]}" for i in range(width)]
        table.add_row(str(device), Text("goes to / comes from", style="dim"), *targets, style=_colour(device))
        for name in _INDEX:
            values = scenario.inputs[device][name].tolist()
            table.add_row("", name, *(str(v) for v in values), end_section=name == _INDEX[-1])
    return table


def _offsets_note(scenario: Scenario) -> Text:
    """How to read the table, with each device's operand and output."""
    lines = ["Slice i of a device goes to group member i // (slices per member). input_offsets and send_sizes "
             "pick the rows it sends from its operand; output_offsets says where they land on the receiver; "
             "recv_sizes[j] is how many rows it receives as its slice j."]
    for d in scenario.mesh.devices:
        inputs = scenario.inputs[d]
        lines.append(f"device {d}: operand {array_text(inputs['operand'])}, output {array_text(inputs['output'])}")
    return Text("\n".join(lines))


def _why_offsets(scenario: Scenario, slices: Sequence[Slice]) -> list[Any]:
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
    for s in sorted(slices, key=lambda s: (s.dst, s.j)):
        size = s.recv_size if s.recv_size is not None else "?"
        rows = _span((s.rows[0], s.rows[0] + s.recv_size)) if s.recv_size is not None else "?"
        table.add_row(str(s.dst), str(s.j), str(s.src), f"[{s.i}] = {s.rows[0]}", str(size), rows,
                      style=_colour(s.src))
    return [text, table]


def _sends(result: ScenarioResult) -> list[Any]:
    """Each message of the trace as a sentence: operand rows and values -> the receiver's output rows."""
    lines = []
    for m in result.trace:
        if m.kind != "message" or "src_rows" not in m.detail:
            continue
        start, stop = m.detail["src_rows"]
        values = array_text(result.inputs[m.src]["operand"][start:stop])
        lines.append(Text(
            f"SEND device {m.src} slice {m.detail['slice']}: operand rows {start}:{stop} = {values} -> "
            f"RECEIVE device {m.dst} at output rows {_span(m.detail['rows'])}; {m.size_bytes} bytes, sent "
            f"{_seconds(m.send_time_s)}, arrived {_seconds(m.arrival_time_s)}"
            + (" (to itself: a local copy)" if m.src == m.dst else ""), style=_colour(m.src)))
    empty = [f"device {s.src} slice {s.i}" for s in _slices(result.scenario) if s.src_rows[0] == s.src_rows[1]]
    if empty:
        lines.append(Text(f"Empty slices send no message: {', '.join(empty)}.", style="dim"))
    return lines


def _kept(result: ScenarioResult) -> list[Any]:
    """Each device's result, coloured by sender, and the output rows no slice wrote."""
    lines = []
    for d in result.scenario.mesh.devices:
        sources = result.provenance[d].sources
        kept = [i for i, s in enumerate(sources) if s is None]
        runs = ", ".join(_span(r) for r in _ranges(kept)) or "none"
        lines.append(Text.assemble(f"device {d}: result ", array_text(result.outputs[d], sources),
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


def _avoided(slices: Sequence[Slice]) -> list[Any]:
    """Each rule the docs leave undefined when broken, and that this input keeps."""
    lines = [Text("The docs leave the result undefined when a call breaks one of these rules; the simulator "
                  "checks all of them before any message moves. This input keeps every one:")]
    lines += [Text(f"  ok  {name}: {rule}", style="green") for name, _, rule in RULES]
    sent = [s for s in slices if s.src_rows[0] < s.src_rows[1]]
    shared = {(s.src, s.src_rows) for s in sent if any(t.src == s.src and t.i != s.i and t.src_rows[0] < s.src_rows[1]
                                                        and s.src_rows[0] < t.src_rows[1] for t in sent)}
    if shared:
        lines.append(Text("Send slices may overlap (they are only read): " + ", ".join(
            f"device {src} rows {_span(rows)}" for src, rows in sorted(shared)), style="dim"))
    return lines


def _planned(scenario: Scenario, slices: Sequence[Slice]) -> list[Any]:
    """The slices as the inputs describe them, since the refused call sent nothing."""
    lines = []
    for s in slices:
        size = s.src_rows[1] - s.src_rows[0]
        recv = "?" if s.recv_size is None else s.recv_size
        lines.append(Text(f"device {s.src} slice {s.i}: operand rows {_span(s.src_rows)} ({size} rows) -> device "
                          f"{s.dst} slice {s.j}: output rows {_span(s.rows)}, recv_sizes[{s.j}]={recv}"
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

