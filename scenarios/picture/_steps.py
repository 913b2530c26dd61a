"""The steps of a run, one per message in time order, as the data the page's stepper shows.

Each step names the message (its index in the trace), its sender and receiver, its bytes and times, the
operand rows it carries and the result rows it wrote (where its collective's messages say so), the offsets
entries that steered it (a ragged exchange: the sender's `input_offsets[i]`, `send_sizes[i]`,
`output_offsets[i]`, and on the receiver entry j of the all_to_all of `output_offsets` and `recv_sizes[j]`),
where the timeline's cursor goes, and a caption in words. Everything comes from the run's trace and the
scenario's arguments here, so the page's script only moves highlights.

Time order is by the time the sender posted the message, then when its first link began to carry it, then
its arrival, then its place in the trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from scenarios.picture._svg import plural, source_spans
from sim.record import Timeline, seconds, time_order

if TYPE_CHECKING:
    from scenarios._load import Scenario
    from scenarios._runner import ScenarioResult

RAGGED = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")
RECEIVED = "received_output_offsets"  # the all_to_all of output_offsets: where each receiver writes


def order(result: ScenarioResult, first: int | None = None) -> list[int]:
    """The trace's indices in time order (posted, first carried, arrived, then trace order), or the `first`
    of them (`sim.record.time_order`)."""
    return time_order(result.trace, first).tolist()


def steps(result: ScenarioResult, scale: Timeline, first: int | None = None) -> list[dict[str, Any]]:
    """One step per message of `result` in time order (the `first` messages only, when given); `scale`
    places the timeline cursor."""
    return steps_of(result, order(result, first), scale)


def steps_of(result: ScenarioResult, ordered: list[int], scale: Timeline) -> list[dict[str, Any]]:
    """The steps of the messages at the indices `ordered`, in that order."""
    spans = source_spans(result, ordered) if any(p is not None for p in result.provenance) else {}
    ragged = result.scenario.definition.drawing.slices
    return [_step(result, k, spans.get(k), ragged, scale) for k in ordered]


def _step(result: ScenarioResult, k: int, src_rows: tuple[int, int] | None, ragged: bool,
          scale: Timeline) -> dict[str, Any]:
    """The step of message `k`: `message` (its index in the trace), `src`, `dst`, `src_rows` and `rows` (the
    operand rows it carries and the result rows it wrote, or None), `entries` (offsets entries as
    [device, array, index]), `cursor` (the timeline x of its start and arrival) and `caption`."""
    m = result.trace[k]
    rows = m.detail.get("rows")
    step = {"message": k, "src": m.src, "dst": m.dst,
            "src_rows": list(src_rows) if src_rows is not None and rows is not None else None,
            "rows": list(rows) if rows is not None else None, "entries": [],
            "cursor": [round(scale.x(m.start_time_s), 1), round(scale.x(m.arrival_time_s), 1)]}
    if ragged and "slice" in m.detail and rows is not None:
        i, j = m.detail["slice"], receiver_slot(result.scenario, m.src, m.detail["slice"])
        step["entries"] = [[m.src, name, i] for name in RAGGED[:3]] + [[m.dst, RECEIVED, j], [m.dst, RAGGED[3], j]]
        return step | {"caption": _ragged_caption(result, k, i, j)}
    if rows is not None and src_rows is not None:
        return step | {"caption": _rows_caption(result, k, src_rows)}
    return step | {"caption": _generic_caption(result, k)}


def receiver_slot(scenario: Scenario, src: int, i: int) -> int:
    """The slot j at which the receiver of sender `src`'s slice `i` takes it (its `recv_sizes[j]` and entry j
    of the all_to_all of `output_offsets`): `src`'s place in the group times the slices per member, plus
    `i % per`, as the docs' pseudocode numbers them."""
    members, per = slices_per_member(scenario, src)
    return members.index(src) * per + i % per


def received_offsets(result: ScenarioResult, device: int) -> list[int]:
    """The all_to_all of `output_offsets` as `device` receives it: entry j is `output_offsets[r * per + j % per]`
    of group member j // per, r being `device`'s place in the group (tiled, split along axis 0)."""
    members, per = slices_per_member(result.scenario, device)
    r = members.index(device)
    return [int(result.inputs[members[j // per]]["output_offsets"][r * per + j % per])
            for j in range(per * len(members))]


def slices_per_member(scenario: Scenario, device: int) -> tuple[tuple[int, ...], int]:
    """The members of `device`'s group and the slices each member gets (at least one)."""
    members = scenario.mesh.group(device, scenario.params["axis_name"],
                                  scenario.params.get("axis_index_groups")).members
    return members, max(1, len(scenario.inputs[device]["send_sizes"]) // len(members))


def _ragged_caption(result: ScenarioResult, k: int, i: int, j: int) -> str:
    """A ragged slice in words: which rows, which offsets, where it lands, how many bytes and when."""
    m = result.trace[k]
    sender, receiver = result.inputs[m.src], result.inputs[m.dst]
    start, stop = m.detail["rows"]
    whose = "its own" if m.src == m.dst else f"device {m.src}'s"
    moves = (f"device {m.src} keeps its slice {i} (a copy to itself)" if m.src == m.dst
             else f"device {m.src} sends its slice {i} to device {m.dst}")
    return (f"{moves}: operand rows {_rows(m.detail.get('src_rows'))} (input_offsets[{i}] = "
            f"{int(sender['input_offsets'][i])}, send_sizes[{i}] = {int(sender['send_sizes'][i])}). "
            f"Device {m.dst} got {whose} output_offsets[{i}] = {int(sender['output_offsets'][i])} as entry {j} "
            f"of the all_to_all of output_offsets, so {_count(stop - start, 'row')} land{'s' * (stop - start == 1)} "
            f"at its output rows {start}:{stop} (recv_sizes[{j}] = {int(receiver['recv_sizes'][j])}). {_moved(m)}")


def _rows_caption(result: ScenarioResult, k: int, src_rows: tuple[int, int]) -> str:
    """A message that lands on rows, in words: the sender's rows, the receiver's rows, bytes and times."""
    m = result.trace[k]
    axis = m.detail.get("axis", 0)
    slice_ = f" slice {m.detail['slice']}" if "slice" in m.detail else ""
    moves = (f"device {m.src} keeps its{slice_ or ' block'} (a copy to itself)" if m.src == m.dst
             else f"device {m.src} sends{slice_ or ' its block'} to device {m.dst}")
    return (f"{moves}: operand rows {_rows(src_rows)} become result rows {_rows(m.detail['rows'])} "
            f"along axis {axis}. {_moved(m)}")


def _generic_caption(result: ScenarioResult, k: int) -> str:
    """Any other message or copy in words: its ends, its collective and call, what its detail says."""
    m = result.trace[k]
    detail = ", ".join(f"{key} {_plain(value)}" for key, value in m.detail.items())
    about = f"{m.collective} call {m.call}" + (f": {detail}" if detail else "")
    if m.kind != "message":
        return f"device {m.src} copies {_count(m.size_bytes, 'byte')} locally ({m.kind}, {about}); {_when(m)}"
    if m.src == m.dst:
        return f"device {m.src} sends {_count(m.size_bytes, 'byte')} to itself ({about}). {_moved(m)}"
    return f"device {m.src} sends {_count(m.size_bytes, 'byte')} to device {m.dst} ({about}). {_moved(m)}"


def _moved(m: Any) -> str:
    """Bytes and times of a message."""
    return f"{_count(m.size_bytes, 'byte')}; {_when(m)}"


def _when(m: Any) -> str:
    """When a message was posted, began to move and arrived."""
    return (f"posted at {seconds(m.send_time_s)}, on the wire from {seconds(m.start_time_s)}, arrived at "
            f"{seconds(m.arrival_time_s)}.")


def _count(n: int, noun: str) -> str:
    """`n` and the noun, plural unless one: `_count(1, 'row')` is `1 row`."""
    return f"{n} {plural(n, noun)}"


def _rows(rows: Any) -> str:
    """`(start, stop)` as `start:stop`."""
    return "?" if rows is None else f"{rows[0]}:{rows[1]}"


def _plain(value: Any) -> str:
    """A detail value as short text (numpy scalars as numbers, tuples as `a:b`)."""
    if isinstance(value, tuple) and len(value) == 2:
        return _rows(value)
    return str(value.item() if isinstance(value, np.generic) else value)
