"""The page `meshsim draw -o FILE.html` writes: self-contained HTML with the picture, a timeline and the tables.

Everything is inline (SVG, CSS, a few lines of JavaScript), so the page opens without a network. Hovering a
message anywhere (arrow, timeline bar, table row) highlights it everywhere.
"""

from __future__ import annotations

import numpy as np

from scenarios import ScenarioResult
from scenarios.cli.render._svg import colour, document, picture, tag, text
from scenarios.cli.render._text import xml_text

LABEL_W, PLOT_W, ROW_H = 150, 620, 20
_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.85em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
td.num { text-align: right; } pre { margin: 0; font-size: 0.95em; }
.lit { outline: 2px solid #000; } path.lit { stroke-width: 4; } tr.lit { background: #ffe9a8; }
.swatch { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.3em; opacity: 0.7; }
"""
_JS = """
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


def page(result: ScenarioResult) -> str:
    """The whole HTML page of `result`."""
    scenario = result.scenario
    network = scenario.mesh.network
    axes = ", ".join(f"{name}={size}" for name, size in scenario.mesh.shape.items())
    facts = (f"mesh {axes} ({scenario.mesh.size} devices); network {network.describe()}, latency "
             f"{seconds(network.latency_s)}, bandwidth {network.bandwidth_bytes_per_s / 1e9:g} GB/s; "
             f"simulated time {seconds(result.end_time_s)}")
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{xml_text(scenario.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{xml_text(scenario.title)}</h1>", f"<p><code>{xml_text(scenario.path)}</code></p>",
        f"<p>{xml_text(' '.join(scenario.description.split()))}</p>" if scenario.description else "",
        f"<p>{xml_text(facts)}</p>",
        '<h2>Who sends which rows where</h2><div id="picture">', picture(result), "</div>",
        '<h2>Timeline</h2><div id="timeline">', timeline(result), "</div>",
        "<h2>Devices</h2>", _devices(result), f"<h2>Messages ({len(result.trace)})</h2>", _messages(result),
        f"<script>{_JS}</script></body></html>\n",
    ]
    return "\n".join(part for part in parts if part)


def timeline(result: ScenarioResult) -> str:
    """An SVG timeline: one row per device (its span of activity, local copies) and per sender -> receiver pair.

    A message is a bar from when its first link began to carry it to its arrival; a local send (to itself)
    or copy sits on the device's row.
    """
    trace = result.trace
    devices = list(result.scenario.mesh.devices)
    pairs = sorted({(m.src, m.dst) for m in trace if m.src != m.dst})
    end = max([result.end_time_s, *(m.arrival_time_s for m in trace)]) or 1.0
    rows = [f"device {d}" for d in devices] + [f"{a} -> {b}" for a, b in pairs]
    top = 30
    body = [text(8, top + ROW_H * i + 14, label, class_="lane") for i, label in enumerate(rows)]
    body += _ticks(end, top, top + ROW_H * len(rows))
    for lane, d in enumerate(devices):
        touching = [m for m in trace if d in (m.src, m.dst)]
        if touching:
            first, last = min(m.send_time_s for m in touching), max(m.arrival_time_s for m in touching)
            body.append(_bar(_x(first, end), _x(last, end), top + ROW_H * lane + 3, ROW_H - 6, colour(d), "0.18",
                             "span", f"device {d} busy from {seconds(first)} to {seconds(last)}"))
    for k, m in enumerate(trace):
        lane = devices.index(m.src) if m.src == m.dst else len(devices) + pairs.index((m.src, m.dst))
        about = (f"message {k}: {m.kind} {m.src} -> {m.dst}, {m.size_bytes} B, "
                 f"{seconds(m.start_time_s)} to {seconds(m.arrival_time_s)}")
        body.append(_bar(_x(m.start_time_s, end), _x(m.arrival_time_s, end), top + ROW_H * lane + 5, ROW_H - 10,
                         colour(m.src), "0.8", "message", about, k))
    height = top + ROW_H * len(rows) + 30
    return document(LABEL_W + PLOT_W + 30, height, body, "timeline of devices and sender -> receiver pairs")


def _bar(x0: float, x1: float, y: float, h: float, fill: str, opacity: str, kind: str, about: str,
         message: int | None = None) -> str:
    """A timeline bar (at least 2 px wide, so instant steps stay visible) with its tooltip."""
    attrs = {"class_": kind, "x": round(x0, 1), "y": y, "width": round(max(2.0, x1 - x0), 1), "height": h,
             "fill": fill, "fill_opacity": opacity}
    if message is not None:
        attrs["data_message"] = message
    return tag("rect", attrs, tag("title", {}, xml_text(about)))


def _ticks(end: float, top: float, bottom: float) -> list[str]:
    """Five time ticks across the plot, labelled in the largest fitting unit."""
    out = []
    for i in range(5):
        t = end * i / 4
        x = _x(t, end)
        out.append(tag("line", {"x1": round(x, 1), "y1": top - 4, "x2": round(x, 1), "y2": bottom,
                                "stroke": "#ddd"}))
        out.append(text(x, top - 8, seconds(t), text_anchor="middle", font_size=10, fill="#555"))
    return out


def _x(t: float, end: float) -> float:
    """The x of time `t` on a plot that ends at `end`."""
    return LABEL_W + PLOT_W * t / end


def _devices(result: ScenarioResult) -> str:
    """A table of each device's inputs and result, large arrays summarised by their edges."""
    names = list(result.inputs[0]) if result.inputs else []
    head = "".join(f"<th>{xml_text(n)}</th>" for n in ["device", "coords", *names, "result"])
    rows = []
    for d in result.scenario.mesh.devices:
        coords = ", ".join(f"{k}={v}" for k, v in result.scenario.mesh.coords(d).items())
        cells = [_array(result.inputs[d][n]) for n in names] + [_array(result.outputs[d])]
        swatch = f'<span class="swatch" style="background:{colour(d)}"></span>'
        rows.append(f"<tr><td>{swatch}{d}</td><td>{xml_text(coords)}</td>"
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f'<table id="devices"><tr>{head}</tr>' + "".join(rows) + "</table>"


def _array(array: np.ndarray) -> str:
    """An array's shape, dtype and values (edges only when large) as an HTML cell body."""
    array = np.asarray(array)
    values = np.array2string(array, threshold=24, edgeitems=3, max_line_width=60, separator=", ")
    return f"<small>{array.shape} {array.dtype}</small><pre>{xml_text(values)}</pre>"


def _messages(result: ScenarioResult) -> str:
    """A table of every message and local copy: kind, ends, bytes, times and its detail."""
    head = "".join(f"<th>{h}</th>" for h in ("#", "kind", "src", "dst", "bytes", "sent", "started", "arrived",
                                              "detail"))
    rows = []
    for k, m in enumerate(result.trace):
        detail = ", ".join(f"{key}={value}" for key, value in m.detail.items())
        cells = [str(k), m.kind, str(m.src), str(m.dst), str(m.size_bytes), seconds(m.send_time_s),
                 seconds(m.start_time_s), seconds(m.arrival_time_s), detail]
        rows.append(f'<tr data-message="{k}" style="color:{_ink(m.src)}">'
                    + "".join(f'<td{" class=num" if i in (0, 2, 3, 4) else ""}>{xml_text(c)}</td>'
                              for i, c in enumerate(cells)) + "</tr>")
    return f'<table id="messages"><tr>{head}</tr>' + "".join(rows) + "</table>"


def _ink(device: int) -> str:
    """The device's colour darkened enough to read as text on white."""
    rgb = [int(colour(device)[i:i + 2], 16) * 6 // 10 for i in (1, 3, 5)]
    return "#" + "".join(f"{c:02x}" for c in rgb)


def seconds(t: float) -> str:
    """`t` seconds in the largest unit that keeps it >= 1."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(t) >= scale:
            return f"{t / scale:.4g} {unit}"
    return f"{t / 1e-9:.4g} ns" if t else "0 s"
