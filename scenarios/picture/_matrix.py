"""The picture of a big mesh: a matrix of who sends to whom, one cell per sender and receiver.

Past `scenarios.picture._page.PICTURE_DEVICES` devices a band per device no longer fits on a page, so the page
draws this instead: row = sender, column = receiver, a cell in the sender's colour for every pair that
exchanged messages, darker for more bytes, carrying the pair's message indices (`data-messages`) so the
stepper and the hover find it. Past `BLOCKS` devices a cell is a block of devices (rows `a-b` send to
columns `c-d`; at most `SIDE_BLOCKS` blocks a side), counted from the trace's columns, and carries only
the indices the stepper goes through.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from sim.record import colour, counted, svg, tag, text

if TYPE_CHECKING:
    from scenarios._runner import ScenarioResult

LEFT, TOP, SIDE = 90, 80, 640
BLOCKS, SIDE_BLOCKS = 128, 64  # past BLOCKS devices a cell stands for a block: at most SIDE_BLOCKS a side


def matrix(result: ScenarioResult, stepped: Sequence[int] | None = None, heading: Sequence[str] = ()) -> str:
    """The sender x receiver matrix of `result`'s messages, as SVG text, under the lines of `heading`.

    Past `BLOCKS` devices the cells are blocks of devices (see the module's docstring); their
    `data-messages` hold the indices in `stepped` (none when None).
    """
    top = TOP + 18 * len(heading)
    said = [text(10, 22 + 18 * i, line, font_weight="bold" if i == 0 else "normal", class_="heading")
            for i, line in enumerate(heading)]
    if result.scenario.mesh.size > BLOCKS:
        return _blocks(result, stepped or [], said, top)
    devices = list(result.scenario.mesh.devices)
    place = {d: i for i, d in enumerate(devices)}
    cell = max(4.0, min(24.0, SIDE / len(devices)))
    pairs: dict[tuple[int, int], list[int]] = {}
    for k, m in enumerate(result.trace):
        pairs.setdefault((m.src, m.dst), []).append(k)
    copy = result.trace.column("kind") != "message"
    most = max((sum(result.trace[k].size_bytes for k in ks) for ks in pairs.values()), default=0) or 1
    size = min(10.0, cell)
    body = [*said, text(LEFT, top - 60, "messages from each sender (row) to each receiver (column)",
                        font_weight="bold"),
            text(10, top - 4, "sender \\ receiver", font_size=10, fill="#555")]
    for d, i in place.items():
        body.append(text(LEFT - 4, top + cell * i + cell / 2 + size / 3, str(d), text_anchor="end", font_size=size,
                         class_="device sender", data_device=d))
        x = LEFT + cell * i + cell / 2 + size / 3
        body.append(text(x, top - 4, str(d), font_size=size, transform=f"rotate(-90 {x:.1f} {top - 4})",
                         class_="device receiver", data_device=d))
    for (src, dst), ks in sorted(pairs.items()):
        sent = sum(result.trace[k].size_bytes for k in ks)
        copies = int(copy[ks].sum())
        about = f"device {src} -> device {dst}: {_moved(len(ks) - copies, copies)}, {sent} B"
        body.append(tag("rect", {"class_": "pair", "x": round(LEFT + cell * place[dst], 1),
                                 "y": round(top + cell * place[src], 1), "width": round(cell, 1),
                                 "height": round(cell, 1), "fill": colour(src),
                                 "fill_opacity": round(0.25 + 0.65 * sent / most, 2), "stroke": "#fff",
                                 "stroke_width": 0.5, "data_src": src, "data_dst": dst,
                                 "data_messages": " ".join(map(str, ks))}, tag("title", {}, about)))
    height = top + cell * len(devices) + 20
    return svg(LEFT + cell * len(devices) + 20, height, body, "who sends to whom")


def _blocks(result: ScenarioResult, stepped: Sequence[int], said: list[str], top: float) -> str:
    """The matrix with a cell per block of devices: messages and bytes summed over the trace's columns."""
    devices = list(result.scenario.mesh.devices)
    per = math.ceil(len(devices) / SIDE_BLOCKS)
    count = math.ceil(len(devices) / per)
    place = np.full(max(devices) + 1, -1, np.int64)
    place[devices] = np.arange(len(devices)) // per
    trace = result.trace
    cells = place[trace.column("src")] * count + place[trace.column("dst")]
    records = np.bincount(cells, minlength=count * count)
    copies = np.bincount(cells, weights=trace.column("kind") != "message", minlength=count * count)
    sizes = np.bincount(cells, weights=trace.column("size_bytes"), minlength=count * count)
    listed: dict[int, list[int]] = {}
    for k in sorted(stepped):
        listed.setdefault(int(cells[k]), []).append(k)
    most = float(sizes.max(initial=0)) or 1.0
    side = SIDE / count
    first = [devices[b * per] for b in range(count)]
    last = [devices[min(len(devices), (b + 1) * per) - 1] for b in range(count)]
    body = [*said, text(LEFT, top - 60, f"messages from each block of {per} senders (row) to each block of {per} "
                                        f"receivers (column)", font_weight="bold"),
            text(10, top - 4, "sender \\ receiver", font_size=10, fill="#555")]
    for b in range(0, count, max(1, count // 16)):  # a label every few blocks, so they stay legible
        y, x = top + side * b + side / 2 + 3, LEFT + side * b + side / 2 + 3
        body.append(text(LEFT - 4, y, f"{first[b]}-{last[b]}", text_anchor="end", font_size=9, class_="block"))
        body.append(text(x, top - 4, f"{first[b]}-{last[b]}", font_size=9, transform=f"rotate(-90 {x:.1f} {top - 4})",
                         class_="block"))
    for c in np.flatnonzero(records).tolist():
        a, b = divmod(c, count)
        n, sent = int(records[c] - copies[c]), int(sizes[c])
        about = f"devices {first[a]}-{last[a]} -> devices {first[b]}-{last[b]}: {_moved(n, int(copies[c]))}, {sent} B"
        body.append(tag("rect", {"class_": "pair block", "x": round(LEFT + side * b, 1), "y": round(top + side * a, 1),
                                 "width": round(side, 1), "height": round(side, 1), "fill": colour(first[a]),
                                 "fill_opacity": round(0.25 + 0.65 * sent / most, 2), "stroke": "#fff",
                                 "stroke_width": 0.5, "data_src": f"{first[a]}-{last[a]}",
                                 "data_dst": f"{first[b]}-{last[b]}",
                                 "data_messages": " ".join(map(str, listed.get(c, [])))}, tag("title", {}, about)))
    return svg(LEFT + SIDE + 20, top + SIDE + 20, body, "who sends to whom")


def _moved(messages: int, copies: int) -> str:
    """'3 messages', or '1 message, 2 local copies' in a cell that holds local copy steps too."""
    return counted(messages, "message") + (f", {counted(copies, 'local copy')}" if copies else "")
