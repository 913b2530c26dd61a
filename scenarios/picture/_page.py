"""The page `meshsim draw -o FILE.html` writes: self-contained HTML with the picture, a stepper, a timeline
and the tables; and the smaller fragment a scenario result shows in a notebook.

Everything is inline (SVG, CSS, JSON, JavaScript), so the page opens without a network. Hovering a message
anywhere (arrow, timeline bar, table row) highlights it everywhere; the stepper (`_stepper`) goes through
the messages one at a time in time order, from the steps `_steps` computes. Big runs stay usable: the
timeline aggregates what does not fit (`sim.record.timeline`), the tables list their first rows, the offsets
table of a big mesh shows only the current step's sender and receiver, and the page says each of these.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

import numpy as np

from scenarios.picture import _stepper
from scenarios.picture._matrix import BLOCKS, SIDE_BLOCKS, matrix
from scenarios.picture._steps import RAGGED, RECEIVED, order, received_offsets, steps_of
from scenarios.picture._svg import SVG_DEVICES, SVG_MESSAGES, colour, picture
from sim.record import Timeline, Traffic, counted, message_table, seconds, xml_text
from sim.record import timeline as trace_timeline

if TYPE_CHECKING:
    from scenarios._runner import ScenarioResult

PAGE_MESSAGES, PAGE_DEVICES, OFFSETS_DEVICES = 512, 64, 16  # rows the page's tables list; full offsets table
PAGE_STEPS = 4096  # past this many messages, the stepper goes through the first ones in time order
PICTURE_DEVICES = 16  # past this, the page draws who sends to whom as a matrix
SHOWN_DEVICES, SHOWN_MESSAGES, SHOWN_PICTURE = 16, 100, 16  # what a result shows of itself in a notebook
_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.85em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
td.num { text-align: right; } pre { margin: 0; font-size: 0.95em; }
.lit { outline: 2px solid #000; } path.lit { stroke-width: 4; } tr.lit { background: #ffe9a8; }
.swatch { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.3em; opacity: 0.7; }
.note { color: #8a4b00; } .wide { overflow-x: auto; }
"""
_HOVER = """
(function () {
  function light(k, on) {
    document.querySelectorAll('[data-message]').forEach(function (e) {
      if (e.getAttribute('data-message') === k) { e.classList.toggle('lit', on); }
    });
  }
  document.querySelectorAll('[data-message]').forEach(function (e) {
    var k = e.getAttribute('data-message');
    e.addEventListener('mouseenter', function () { light(k, true); });
    e.addEventListener('mouseleave', function () { light(k, false); });
  });
  document.body.setAttribute('data-ready', 'yes');
})();
"""


def page(result: ScenarioResult, full: bool = False) -> str:
    """The whole HTML page of `result`, with its stepper.

    Past `PAGE_STEPS` messages (unless `full`), the stepper goes through the first `PAGE_STEPS` in time
    order, the timeline draws those, and a ragged mesh of more than `PAGE_DEVICES` devices leaves its offsets
    table out; the page says so. Everything else is bounded whatever the run's size (see the module's docstring).
    """
    scenario = result.scenario
    count = len(result.trace)
    ordered = order(result, None if full else PAGE_STEPS)
    stepped = None if len(ordered) == count else ordered
    drawn = trace_timeline(result.trace, list(scenario.mesh.devices), result.end_time_s, cursor=True, only=stepped)
    ragged = scenario.definition.drawing.slices
    offsets = ragged and (full or scenario.mesh.size <= PAGE_DEVICES)
    notes = _notes(result, drawn, ragged, len(ordered), offsets)
    data = {"op": scenario.op, "steps": steps_of(result, ordered, drawn), "notes": notes,
            "interval_ms": _stepper.INTERVAL_MS, "offsets_focus": offsets and scenario.mesh.size > OFFSETS_DEVICES}
    said = "".join(f"<li>{xml_text(note)}</li>" for note in notes)
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{xml_text(scenario.title)}</title><style>{_CSS}{_stepper.CSS}</style></head><body>",
        *_heading(result),
        _stepper.CONTROLS.format(notes=f'<ul id="aggregated">{said}</ul>' if notes else ""),
        *_picture(result, ordered),
        _offsets(result) if offsets else "",
        '<h2>Timeline</h2><div id="timeline">', drawn.svg, "</div>",
        "<h2>Devices</h2>", devices_table(result, PAGE_DEVICES),
        f"<h2>{Traffic.of(result.trace).records.capitalize()} ({count})</h2>",
        message_table(result.trace, PAGE_MESSAGES),
        f'<script type="application/json" id="steps-data">{_json(data)}</script>',
        f"<script>{_HOVER}{_stepper.JS}</script></body></html>\n",
    ]
    return "\n".join(part for part in parts if part)


def fragment(result: ScenarioResult) -> str:
    """`result` as an HTML fragment for a notebook: the facts, the picture (up to `SHOWN_PICTURE` devices),
    the timeline and the tables (their first rows), each cut said; no script."""
    drawn = trace_timeline(result.trace, list(result.scenario.mesh.devices), result.end_time_s, max_bars=1000)
    size = result.scenario.mesh.size
    cuts = [drawn.note] if drawn.note else []
    if size > SHOWN_PICTURE:
        cuts.append(f"the picture is left out at {size} devices (more than {SHOWN_PICTURE}): `meshsim draw` "
                    f"writes it, with a stepper")
    if size > SHOWN_DEVICES:
        cuts.append(f"the devices table lists the first {SHOWN_DEVICES} of {size} devices")
    body = [*_heading(result), picture(result) if size <= SHOWN_PICTURE else "", drawn.svg,
            "".join(f'<p class="note"><small>{xml_text(cut)}</small></p>' for cut in cuts),
            devices_table(result, SHOWN_DEVICES), message_table(result.trace, SHOWN_MESSAGES)]
    return '<div class="meshsim-scenario">' + "\n".join(part for part in body if part) + "</div>"


def timeline(result: ScenarioResult) -> str:
    """The SVG timeline of `result` (see `sim.record.timeline`)."""
    return trace_timeline(result.trace, list(result.scenario.mesh.devices), result.end_time_s).svg


def _picture(result: ScenarioResult, stepped: list[int]) -> list[str]:
    """The picture: a band per device, or past `PICTURE_DEVICES` devices the sender x receiver matrix (whose
    blocks, on a big mesh, list the `stepped` messages)."""
    if result.scenario.mesh.size <= PICTURE_DEVICES:
        return ['<h2>Who sends which rows where</h2><div id="picture">', picture(result), "</div>"]
    return ['<h2>Who sends to whom</h2><div id="picture">', matrix(result, stepped), "</div>"]


def _heading(result: ScenarioResult) -> list[str]:
    """The title, the file, the description and the run's facts."""
    scenario = result.scenario
    network = scenario.mesh.network
    axes = ", ".join(f"{name}={size}" for name, size in scenario.mesh.shape.items())
    facts = (f"mesh {axes} ({counted(scenario.mesh.size, 'device')}); network {network.describe()}, latency "
             f"{seconds(network.latency_s)}, bandwidth {network.bandwidth_bytes_per_s / 1e9:g} GB/s; "
             f"{Traffic.of(result.trace)}; simulated time {seconds(result.end_time_s)}")
    return [f"<h1>{xml_text(scenario.title)}</h1>", f"<p><code>{xml_text(scenario.path)}</code></p>",
            f"<p>{xml_text(' '.join(scenario.description.split()))}</p>" if scenario.description else "",
            f"<p>{xml_text(facts)}</p>"]


def _notes(result: ScenarioResult, drawn: Timeline, ragged: bool, stepped: int, offsets: bool) -> list[str]:
    """What the page aggregates or leaves out, in words (`stepped`: how many messages the stepper goes
    through; `offsets`: whether the ragged offsets table is on the page)."""
    size, count = result.scenario.mesh.size, len(result.trace)
    records = Traffic.of(result.trace).records
    notes = [f"Timeline: {drawn.note}."] if drawn.note else []
    if stepped < count:
        notes.append(f"Stepper: the first {stepped} of {count} {records} in time order are its steps, and the "
                     f"timeline draws those; `meshsim draw --full` steps through every one.")
    if size > PICTURE_DEVICES:
        blocks = f" of blocks of {math.ceil(size / SIDE_BLOCKS)} devices" if size > BLOCKS else ""
        full = " --full" if size > SVG_DEVICES or count > SVG_MESSAGES else ""
        notes.append(f"Picture: {size} devices are more than {PICTURE_DEVICES}, so who sends to whom is a matrix "
                     f"(a cell per sender and receiver{blocks}) instead of a band of rows per device; `meshsim draw "
                     f"-o FILE.svg{full}` draws every band, and each step's caption names its rows.")
    if count > PAGE_MESSAGES:
        goes = f"all {count}" if stepped == count else f"the first {stepped}"
        notes.append(f"Messages table: the first {PAGE_MESSAGES} of {count} {records} are listed; the stepper "
                     f"goes through {goes}.")
    if size > PAGE_DEVICES:
        notes.append(f"Devices table: the first {PAGE_DEVICES} of {size} devices are listed.")
    if ragged and not offsets:
        notes.append(f"Offsets table: left out at {size} devices (more than {PAGE_DEVICES}); each step's caption "
                     f"names the offsets entries that steered it, and `meshsim draw --full` writes the table.")
    elif ragged and size > OFFSETS_DEVICES:
        notes.append(f"Offsets table: {size} devices are more than {OFFSETS_DEVICES}, so it shows the current "
                     f"step's sender and receiver only.")
    return notes


def _offsets(result: ScenarioResult) -> str:
    """The ragged offsets and sizes of each device by slice, and the all_to_all of output_offsets each one
    received (where it writes what it receives)."""
    width = max(len(result.inputs[d]["send_sizes"]) for d in result.scenario.mesh.devices)
    head = "<tr><th>device</th><th>array</th>" + "".join(f"<th>{i}</th>" for i in range(width)) + "</tr>"
    rows = []
    for d in result.scenario.mesh.devices:
        arrays = {name: [int(v) for v in result.inputs[d][name]] for name in RAGGED}
        arrays[RECEIVED] = received_offsets(result, d)
        for n, name in enumerate((*RAGGED[:3], RECEIVED, RAGGED[3])):
            label = "output_offsets received (all_to_all)" if name == RECEIVED else name
            first = f'<td rowspan="5" style="color:{colour(d)}">{d}</td>' if n == 0 else ""
            cells = "".join(f'<td class="num" data-index="{i}">{v}</td>' for i, v in enumerate(arrays[name]))
            rows.append(f'<tr data-device="{d}" data-array="{name}">{first}<td>{label}</td>{cells}</tr>')
    return ('<h2>Offsets and sizes, by slice</h2><p>Slice i of a sender goes to group member i // (slices per '
            "member); output_offsets[i] says where it lands on that receiver, which gets it as entry j of the "
            "all_to_all of output_offsets, beside its recv_sizes[j].</p>"
            f'<div class="wide"><table id="offsets">{head}{"".join(rows)}</table></div>')


def devices_table(result: ScenarioResult, limit: int) -> str:
    """A table of each device's inputs and result (the first `limit` devices), large arrays summarised."""
    names = list(result.inputs[0]) if result.inputs else []
    head = "".join(f"<th>{xml_text(n)}</th>" for n in ["device", "coords", *names, "result"])
    rows = []
    devices = list(result.scenario.mesh.devices)
    for d in devices[:limit]:
        coords = ", ".join(f"{k}={v}" for k, v in result.scenario.mesh.coords(d).items())
        cells = [_array(result.inputs[d][n]) for n in names] + [_array(result.outputs[d])]
        swatch = f'<span class="swatch" style="background:{colour(d)}"></span>'
        rows.append(f'<tr data-device="{d}"><td>{swatch}{d}</td><td>{xml_text(coords)}</td>'
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    if len(devices) > limit:
        rows.append(f'<tr class="more"><td colspan="{len(names) + 3}">{len(devices) - limit} more devices not '
                    f"listed</td></tr>")
    return f'<table id="devices"><tr>{head}</tr>' + "".join(rows) + "</table>"


def _array(array: np.ndarray) -> str:
    """An array's shape, dtype and values (edges only when large) as an HTML cell body."""
    array = np.asarray(array)
    values = np.array2string(array, threshold=24, edgeitems=3, max_line_width=60, separator=", ")
    return f"<small>{array.shape} {array.dtype}</small><pre>{xml_text(values)}</pre>"


def _json(data: object) -> str:
    """`data` as JSON safe inside a `<script>` element (no `</` can close it early)."""
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
