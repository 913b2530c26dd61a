"""The picture of a big mesh: a matrix of who sends to whom, one cell per sender and receiver.

Past `scenarios.picture._page.PICTURE_DEVICES` devices a band per device no longer fits on a page, so the page
draws this instead: row = sender, column = receiver, a cell in the sender's colour for every pair that
exchanged messages, darker for more bytes, carrying the pair's message indices (`data-messages`) so the
stepper and the hover find it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.record import colour, svg, tag, text

if TYPE_CHECKING:
    from scenarios._runner import ScenarioResult

LEFT, TOP, SIDE = 90, 80, 640


def matrix(result: ScenarioResult) -> str:
    """The sender x receiver matrix of `result`'s messages, as SVG text."""
    devices = list(result.scenario.mesh.devices)
    place = {d: i for i, d in enumerate(devices)}
    cell = max(4.0, min(24.0, SIDE / len(devices)))
    pairs: dict[tuple[int, int], list[int]] = {}
    for k, m in enumerate(result.trace):
        pairs.setdefault((m.src, m.dst), []).append(k)
    most = max((sum(result.trace[k].size_bytes for k in ks) for ks in pairs.values()), default=0) or 1
    size = min(10.0, cell)
    body = [text(LEFT, 20, "messages from each sender (row) to each receiver (column)", font_weight="bold"),
            text(10, TOP - 4, "sender \\ receiver", font_size=10, fill="#555")]
    for d, i in place.items():
        body.append(text(LEFT - 4, TOP + cell * i + cell / 2 + size / 3, str(d), text_anchor="end", font_size=size,
                         class_="device sender", data_device=d))
        x = LEFT + cell * i + cell / 2 + size / 3
        body.append(text(x, TOP - 4, str(d), font_size=size, transform=f"rotate(-90 {x:.1f} {TOP - 4})",
                         class_="device receiver", data_device=d))
    for (src, dst), ks in sorted(pairs.items()):
        sent = sum(result.trace[k].size_bytes for k in ks)
        about = f"device {src} -> device {dst}: {len(ks)} message{'s' * (len(ks) != 1)}, {sent} B"
        body.append(tag("rect", {"class_": "pair", "x": round(LEFT + cell * place[dst], 1),
                                 "y": round(TOP + cell * place[src], 1), "width": round(cell, 1),
                                 "height": round(cell, 1), "fill": colour(src),
                                 "fill_opacity": round(0.25 + 0.65 * sent / most, 2), "stroke": "#fff",
                                 "stroke_width": 0.5, "data_src": src, "data_dst": dst,
                                 "data_messages": " ".join(map(str, ks))}, tag("title", {}, about)))
    height = TOP + cell * len(devices) + 20
    return svg(LEFT + cell * len(devices) + 20, height, body, "who sends to whom")
