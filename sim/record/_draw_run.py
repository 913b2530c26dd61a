"""A run drawn call by call: what `Run.draw(path)` and `meshsim draw RUN.json` write.

The SVG has a timeline of the calls (a lane per device, a bar per device's part of each call, from when it
entered to when it ended, coloured by call) and a panel per call: where it was made, its groups, messages,
bytes and times, and a sender x receiver matrix of the bytes it moved (darker is more; the count of
messages in each cell on small meshes). Past `LANES` devices the timeline shows the first lanes, past
`SIDE` devices a matrix cell is a block of devices, past `2 * EDGE` calls the first and last `EDGE` get
panels; each cut is said in the picture, and `full` draws everything. The page (`.html`) puts the picture
above the run's message timeline and table (`run_html`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sim.record._escape import xml_text
from sim.record._html import PALETTE_HEX, number, run_html, seconds, svg, tag, text
from sim.record._program_calls import ProgramCall, program_calls
from sim.record._runfile import Faced
from sim.record._traffic import Traffic
from sim.record._words import counted, plural

WIDTH, LEFT, PLOT_W, LANE_H = 760, 110, 620, 14
LANES, SIDE, EDGE = 32, 16, 8
CELL_ROWS = 1 << 16  # past this many records in a run, cells count messages (rows are read from each detail)
MATRIX_W = 240


def draw_svg(faced: Faced | Sequence[Faced], full: bool = False) -> str:
    """The SVG text of the run (or of several runs, one under another, e.g. a gradient's forward and
    backward runs): its timeline of calls and a panel per call (bounded unless `full`)."""
    runs = [faced] if isinstance(faced, Faced) else list(faced)
    body: list[str] = []
    top = 0.0
    for k, run in enumerate(runs):
        if k:
            body.append(tag("line", {"x1": 0, "y1": number(top + 6), "x2": WIDTH, "y2": number(top + 6),
                                     "stroke": "#888", "stroke_width": 2}))
            top += 12
        drawn, top = _drawn(run, full, top, "" if len(runs) == 1 else f"run {k + 1} of {len(runs)}: ")
        body += drawn
    title = runs[0].title if len(runs) == 1 else f"{counted(len(runs), 'run')}: " + ", ".join(r.title for r in runs)
    return svg(WIDTH, top + 20, body, title)


def _drawn(faced: Faced, full: bool, top: float, heading: str) -> tuple[list[str], float]:
    """One run's title, summary, timeline and call panels from `top`; returns them and where they end."""
    calls = program_calls(faced.trace, faced.calls)
    body = [text(10, top + 22, heading + faced.title, font_size=15, font_weight="bold", class_="title"),
            text(10, top + 40, _summary(faced, calls), fill="#444", class_="summary"),
            text(10, top + 56, str(Traffic.of(faced.trace)), fill="#444", class_="traffic")]
    lanes, top = _timeline(faced, calls, top + 76.0, full)
    body += lanes
    shown = calls if full or len(calls) <= 2 * EDGE else calls[:EDGE] + calls[-EDGE:]
    landed = faced.trace.detail_column("rows") if len(faced.trace) <= CELL_ROWS else None
    if len(shown) < len(calls):
        left = len(calls) - len(shown)
        body.append(text(10, top + 14, f"panels for the first and last {EDGE} calls; {counted(left, 'call')} "
                                       f"between them left out (draw with full=True / --full for all)",
                         fill="#a00", class_="cut"))
        top += 24
    for k, call in enumerate(shown):
        if k == EDGE and len(shown) < len(calls):
            body.append(text(10, top + 14, f"... {counted(len(calls) - len(shown), 'call')} more ...", fill="#666"))
            top += 24
        panel, top = _panel(faced, call, top + 10, full, landed)
        body += panel
    return [tag("g", {"class_": "run"}, "".join(body))], top


def draw_page(faced: Faced | Sequence[Faced], full: bool = False) -> str:
    """A self-contained HTML page: the picture, then each run's message timeline and table."""
    runs = [faced] if isinstance(faced, Faced) else list(faced)
    tables = "\n".join(run_html(r.trace, r.devices, r.end_time_s, r.title, calls=r.calls) for r in runs)
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + xml_text(runs[0].title)
            + "</title><style>body{font-family:sans-serif} table{border-collapse:collapse;font-size:12px} "
              "td,th{padding:1px 6px} .num{text-align:right}</style></head><body>\n"
            + draw_svg(runs, full) + "\n" + tables + "\n</body></html>\n")


def call_colour(number_: int) -> str:
    """The colour of call `number_` (from 1) in the picture."""
    return PALETTE_HEX[(number_ - 1) % len(PALETTE_HEX)]


def _summary(faced: Faced, calls: list[ProgramCall]) -> str:
    """The line under the title: mesh, calls, end time (the messages go on the next line)."""
    axes = ", ".join(f"{name}={n}" for name, n in faced.mesh_shape.items())
    return (f"mesh {axes} ({counted(len(faced.devices), 'device')}); {counted(len(calls), 'call')}; simulated end "
            f"time {seconds(faced.end_time_s)}")


def _timeline(faced: Faced, calls: list[ProgramCall], top: float, full: bool) -> tuple[list[str], float]:
    """A lane per device (the first `LANES` unless `full`), a bar per part of each call."""
    devices = len(faced.devices)
    shown = devices if full else min(devices, LANES)
    end = max(faced.end_time_s, max((c.exit_s for c in calls), default=0.0)) or 1.0
    scale = PLOT_W / end
    body = [text(10, top + 10, "calls over time (a lane per device)", font_weight="bold")]
    top += 18
    for d in range(shown):
        y = top + d * LANE_H
        body.append(text(LEFT - 8, y + 10, f"device {d}", text_anchor="end", font_size=10, fill="#444"))
        body.append(tag("line", {"x1": LEFT, "y1": number(y + LANE_H / 2), "x2": LEFT + PLOT_W,
                                 "y2": number(y + LANE_H / 2), "stroke": "#eee"}))
    for call in calls:
        about = xml_text(call.title)
        for part in call.records:
            if part.device >= shown:
                continue
            x, w = LEFT + part.enter_s * scale, max(1.5, (part.exit_s - part.enter_s) * scale)
            body.append(tag("rect", {"x": number(x), "y": number(top + part.device * LANE_H + 2), "width": number(w),
                                     "height": LANE_H - 4, "fill": call_colour(call.number), "fill_opacity": "0.7",
                                     "class_": "call-part", "data_call": call.number, "data_device": part.device},
                            tag("title", {}, about)))
    top += shown * LANE_H + 6
    body.append(text(LEFT, top + 10, "0 s", font_size=10, fill="#666"))
    body.append(text(LEFT + PLOT_W, top + 10, seconds(end), font_size=10, fill="#666", text_anchor="end"))
    top += 16
    if shown < devices:
        body.append(text(10, top + 10, f"lanes for the first {shown} of {devices} devices (full=True / --full for "
                                       f"all)", fill="#a00", class_="cut"))
        top += 18
    return body, top


def _panel(faced: Faced, call: ProgramCall, top: float, full: bool,
           landed: list | None) -> tuple[list[str], float]:
    """One call: its title and label, its facts, and the matrix of bytes from each sender to each receiver
    (`landed`: each trace record's rows where it landed, or None when not read)."""
    colour = call_colour(call.number)
    body = [tag("rect", {"x": 4, "y": number(top), "width": 10, "height": 16, "fill": colour}),
            text(20, top + 13, f"call {call.number}: {call.collective}", font_weight="bold", class_="call-title",
                 data_call=call.number),
            text(20, top + 30, f"at {call.label}" if call.label else "(where it was made is not recorded)",
                 font_family="monospace", font_size=11, class_="call-label", data_call=call.number)]
    trace, ks = faced.trace, call.messages
    kinds = trace.column("kind")[ks] if len(ks) else np.zeros(0, object)
    sent = ks[kinds == "message"]
    src, dst = trace.column("src")[sent], trace.column("dst")[sent]
    size = trace.column("size_bytes")[sent]
    sizes = sorted({len(g) for g in call.groups})
    traffic = Traffic.of(trace, ks)
    facts = [f"{'algorithm ' + call.algorithm + '; ' if call.algorithm else ''}{counted(len(call.groups), 'group')} "
             f"of {' or '.join(map(str, sizes))} {plural(sizes[-1], 'device')}", traffic.words(copies=False),
             *([counted(traffic.copies, "local copy")] if traffic.copies else []),
             f"entered {seconds(call.enter_s)}, met {seconds(call.met_s)}, ended {seconds(call.exit_s)}"]
    body += [text(20, top + 52 + 16 * i, fact, fill="#333", font_size=11) for i, fact in enumerate(facts)]
    spans = [landed[k] for k in sent] if landed is not None and len(sent) else []
    rows = (np.array([stop - start for start, stop in spans], np.int64)
            if spans and all(r is not None for r in spans) else None)
    matrix, height = _matrix(len(faced.devices), (src, dst, size, rows), 440, top + 56, colour, full)
    body += matrix
    return [tag("g", {"class_": "call", "data_call": call.number}, "".join(body))], top + max(110.0, height + 66)


def _matrix(n: int, messages: tuple, x0: float, y0: float, colour: str, full: bool) -> tuple[list[str], float]:
    """Bytes from each sender (row) to each receiver (column), a cell per device or per block of devices;
    `messages` are the senders, receivers, sizes and (when every message says where it lands) row counts.
    A cell says how many messages it holds, or how many rows when rows are known."""
    src, dst, size, rows = messages
    per = 1 if full or n <= SIDE else math.ceil(n / SIDE)
    side = math.ceil(n / per)
    cell = max(2.0, min(22.0, MATRIX_W / side))
    grid = np.zeros((side, side))
    count = np.zeros((side, side), np.int64)
    np.add.at(grid, (src // per, dst // per), size)
    np.add.at(count, (src // per, dst // per), 1 if rows is None else rows)
    peak = grid.max(initial=0) or 1.0
    noun = "message" if rows is None else "row"
    said = (f"sender (row) -> receiver (column), {plural(2, noun)} in each cell"
            + (f", blocks of {per} devices" if per > 1 else ""))
    body = [text(x0, y0 - 4, said, font_size=10, fill="#444")]
    for i, j in zip(*np.nonzero(count | (grid > 0))):
        about = (f"{'devices' if per > 1 else 'device'} {_who(i, per, n)} -> {_who(j, per, n)}: "
                 f"{counted(int(count[i, j]), noun)}, {counted(int(grid[i, j]), 'byte')}")
        body.append(tag("rect", {"x": number(x0 + j * cell), "y": number(y0 + i * cell), "width": number(cell),
                                 "height": number(cell), "fill": colour,
                                 "fill_opacity": number(0.15 + 0.85 * grid[i, j] / peak), "class_": "cell"},
                        tag("title", {}, xml_text(about))))
        if cell >= 18 and count[i, j] < 100:
            body.append(text(x0 + (j + 0.5) * cell, y0 + (i + 0.5) * cell + 4, str(int(count[i, j])),
                             font_size=9, text_anchor="middle", stroke="white", stroke_width="2.5",
                             paint_order="stroke", class_="cell-count"))
    body.append(tag("rect", {"x": x0, "y": number(y0), "width": number(side * cell), "height": number(side * cell),
                             "fill": "none", "stroke": "#999"}))
    return body, side * cell


def _who(block: int, per: int, n: int) -> str:
    """A matrix cell's sender or receiver: a device, or a block of devices as `first-last`."""
    return str(block) if per == 1 else f"{block * per}-{min(n, (block + 1) * per) - 1}"
