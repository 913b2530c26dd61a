"""A run's trace as HTML: an SVG timeline of its messages and a table of them, bounded for big runs.

`timeline` draws one lane per device (its span of activity, local copies) and one per sender -> receiver
pair, with the local work a device charged (`sim.compute`) as a dark strip at the foot of its lane; past
`PAIR_LANES` pairs each message sits on its sender's lane instead, past `DEVICE_LANES` devices
only the first ones get lanes, and past `max_bars` messages only the first are drawn; each cut is said in
the timeline's `note`. `message_table` lists messages up to a limit and says how many it left out.
`run_html` puts both under a summary line, as `sim.Run` shows itself in a notebook.

Colours are the terminal palette of `meshsim run` as hex, so a device reads the same everywhere.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import quoteattr

import numpy as np

from sim.record._compute import ComputeRecord
from sim.record._escape import xml_text
from sim.record._program_calls import call_parts
from sim.record._trace import CallRecord, MessageRecord, Trace
from sim.record._traffic import Traffic
from sim.record._words import counted

# The `meshsim run` palette (rich's bright_cyan, bright_magenta, bright_green, yellow, bright_blue,
# bright_red, cyan, magenta, green, bright_yellow, blue, red) as the hex its default theme gives them.
PALETTE_HEX = ("#00ffff", "#ff00ff", "#00ff00", "#808000", "#0000ff", "#ff0000", "#008080", "#800080",
               "#008000", "#ffff00", "#000080", "#800000")
LABEL_W, PLOT_W, ROW_H, TOP = 150, 620, 20, 30
PAIR_LANES, DEVICE_LANES = 32, 64
TABLE_ROWS, BARS = 200, 1000  # what a run shows of itself in a notebook
TITLED = 1000  # past this many messages, bars go without a tooltip (the page stays small)


def colour(device: int) -> str:
    """The hex colour of device `device` (the `meshsim run` palette, cycled)."""
    return PALETTE_HEX[device % len(PALETTE_HEX)]


def ink(device: int) -> str:
    """The device's colour darkened enough to read as text on white."""
    rgb = [int(colour(device)[i:i + 2], 16) * 6 // 10 for i in (1, 3, 5)]
    return "#" + "".join(f"{c:02x}" for c in rgb)


def tag(name: str, attrs: dict[str, object], body: str = "") -> str:
    """One XML element: attributes escaped and quoted (underscores become dashes), `body` as given."""
    text_ = "".join(f" {_name(key)}={_quoted(value)}" for key, value in attrs.items())
    return f"<{name}{text_}>{body}</{name}>" if body else f"<{name}{text_}/>"


@functools.cache
def _name(key: str) -> str:
    """An attribute's name from its keyword: `class_` is `class`, `data_message` is `data-message`."""
    return key.rstrip("_").replace("_", "-")


def _quoted(value: object) -> str:
    """An attribute's value quoted and escaped (a number needs no escaping, so it skips the escaper)."""
    if type(value) in (int, float):
        return f'"{value}"'
    return quoteattr(str(value))


def text(x: float, y: float, content: str, **attrs: object) -> str:
    """A `<text>` element at (x, y) holding `content`, escaped."""
    return tag("text", {"x": number(x), "y": number(y), **attrs}, xml_text(content))


def number(value: float) -> str:
    """A coordinate with at most one decimal, so the text is stable and short."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def svg(width: float, height: float, body: Sequence[str], title: str, defs: str = "") -> str:
    """A standalone SVG document of the given size around `body`, with `defs` (markers, patterns)."""
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{number(width)}" height="{number(height)}" '
            f'viewBox="0 0 {number(width)} {number(height)}" font-family="sans-serif" font-size="12">')
    return "\n".join([head, tag("title", {}, xml_text(title)), f"<defs>{defs}</defs>",
                      tag("rect", {"width": "100%", "height": "100%", "fill": "white"}), *body, "</svg>\n"])


def seconds(t: float, figures: int = 4) -> str:
    """`t` seconds in the largest unit that keeps it >= 1, to `figures` significant figures (ASCII 'us', so any
    terminal encoding works): `seconds(1.5e-6)` is `1.5 us`."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(t) >= scale:
            return f"{t / scale:.{figures}g} {unit}"
    return f"{t / 1e-9:.{figures}g} ns" if t else "0 s"


@dataclass(frozen=True)
class Timeline:
    """A drawn timeline: its SVG, what it left out or aggregated (empty when nothing), and its time scale.

    `x(t)` is where time `t` sits on it; `end_s` is the time at its right edge.
    """

    svg: str
    note: str
    end_s: float

    def x(self, t: float) -> float:
        """The x of time `t`."""
        return LABEL_W + PLOT_W * t / self.end_s


def timeline(messages: Sequence[MessageRecord] | Trace, devices: Sequence[int], end_time_s: float,
             max_bars: int | None = None, cursor: bool = False, only: Sequence[int] | None = None) -> Timeline:
    """The timeline of `messages` among `devices` over a run that ended at `end_time_s`.

    A message is a bar (class `message`, `data-message` its index in `messages`) from when its first link
    began to carry it to its arrival; a local send or copy sits on its device's lane. With `only`, just the
    messages at those indices are candidates for a bar (the others still count in the lanes and spans).
    With `cursor`, a hidden group `#cursor` (a band `#cursor-span` and a line `#cursor-line` across every
    lane) waits for a script to place it. Lanes and spans are worked on columns, so only the bars drawn
    cost a record each: a `Trace` of a million messages draws its first bars quickly.
    """
    fields = _fields(messages)
    computes = messages.computes if isinstance(messages, Trace) else ()
    end = max(end_time_s, float(fields["arrival_time_s"].max(initial=end_time_s)),
              max((c.end_s for c in computes), default=0.0)) or 1.0
    shown = list(devices)[:DEVICE_LANES]
    src, dst = fields["src"], fields["dst"]
    device_lane = _lookup(shown, src, dst)
    apart = (src != dst) & (device_lane[src] >= 0)
    keys = np.unique(np.stack([src[apart], dst[apart]], axis=1), axis=0)
    pairs = [(int(a), int(b)) for a, b in keys.tolist()]
    paired = len(pairs) <= PAIR_LANES
    lanes = device_lane[src]
    if paired and pairs:
        code = keys[:, 0] * (int(dst.max()) + 1) + keys[:, 1]
        lanes = np.where(apart, len(shown) + np.searchsorted(code, src * (int(dst.max()) + 1) + dst), lanes)
    labels = [f"device {d}" for d in shown] + ([f"{a} -> {b}" for a, b in pairs] if paired else [])
    scale = Timeline("", "", end)
    body = [text(8, TOP + ROW_H * i + 14, label, class_="lane") for i, label in enumerate(labels)]
    body += _ticks(scale, TOP + ROW_H * len(labels))
    body += _spans(fields, shown, scale)
    candidates = np.flatnonzero(lanes >= 0)
    if only is not None:
        candidates = np.intersect1d(candidates, np.asarray(only, np.int64))
    chosen = candidates if max_bars is None else candidates[:max_bars]
    titled = len(src) <= TITLED
    body += _bars(fields, chosen, lanes, scale, titled)
    body += _compute_bars(computes, shown, scale, max_bars)
    if cursor:
        body.append(_cursor(TOP + ROW_H * len(labels)))
    note = _note(len(devices), len(shown), len(pairs), paired, len(chosen), len(src))
    if max_bars is not None and len(computes) > max_bars:
        note += ("; " if note else "") + f"{max_bars} of {len(computes)} compute spans drawn"
    if not titled:
        note += ("; " if note else "") + f"bars have no tooltip past {TITLED} messages"
    picture = svg(LABEL_W + PLOT_W + 30, TOP + ROW_H * len(labels) + 30, body,
                  "timeline of devices and sender -> receiver pairs")
    return Timeline(picture, note, end)


_NUMBERS = ("src", "dst", "size_bytes", "send_time_s", "start_time_s", "arrival_time_s")


def _fields(messages: Sequence[MessageRecord] | Trace) -> dict[str, np.ndarray]:
    """The numeric fields of every message and their kinds, as arrays (a `Trace` read through its columns)."""
    if isinstance(messages, Trace):
        return {name: messages.column(name) for name in (*_NUMBERS, "kind")}
    dtypes = (np.int64,) * 3 + (np.float64,) * 3 + (object,)
    return {name: np.array([getattr(m, name) for m in messages], dtype).reshape(-1)
            for name, dtype in zip((*_NUMBERS, "kind"), dtypes)}


def _lookup(shown: list[int], *ids: np.ndarray) -> np.ndarray:
    """A table from device id to its lane among `shown` (-1 for a device without one), sized to hold `ids`."""
    size = max([0, *(int(i.max(initial=0)) + 1 for i in ids), *(d + 1 for d in shown)])
    table = np.full(size, -1, np.int64)
    table[shown] = np.arange(len(shown))
    return table


def _bars(fields: dict[str, np.ndarray], chosen: np.ndarray, lanes: np.ndarray, scale: Timeline,
          titled: bool) -> list[str]:
    """A bar per message at the indices `chosen`, on its lane, with a tooltip when `titled`."""
    rows = zip(chosen.tolist(), *(fields[name][chosen].tolist() for name in (*_NUMBERS, "kind")),
               lanes[chosen].tolist())
    out = []
    for k, src, dst, size, _, start, arrival, kind, lane in rows:
        about = (f"message {k}: {kind} {src} -> {dst}, {size} B, "
                 f"{seconds(start)} to {seconds(arrival)}") if titled else ""
        out.append(_bar(scale.x(start), scale.x(arrival), TOP + ROW_H * lane + 5, ROW_H - 10, colour(src), "0.8",
                        "message", about, k))
    return out


def _cursor(bottom: float) -> str:
    """The stepper's cursor: a band over a message's flight and a line at its start, hidden until placed."""
    span = tag("rect", {"id": "cursor-span", "x": LABEL_W, "y": TOP - 4, "width": 0, "height": bottom - TOP + 8,
                        "fill": "#ffd54a", "fill_opacity": "0.35"})
    line = tag("line", {"id": "cursor-line", "x1": LABEL_W, "y1": TOP - 4, "x2": LABEL_W, "y2": bottom + 4,
                        "stroke": "#d00", "stroke_width": 2})
    return tag("g", {"id": "cursor", "visibility": "hidden"}, span + line)


def _spans(fields: dict[str, np.ndarray], devices: Sequence[int], scale: Timeline) -> list[str]:
    """Each device's faint bar from its first message or copy to its last."""
    ends = np.concatenate([fields["src"], fields["dst"]])
    table = _lookup(list(devices), ends)
    first = np.full(len(devices), np.inf)
    last = np.full(len(devices), -np.inf)
    lane = table[ends]
    on = lane >= 0
    np.minimum.at(first, lane[on], np.concatenate([fields["send_time_s"]] * 2)[on])
    np.maximum.at(last, lane[on], np.concatenate([fields["arrival_time_s"]] * 2)[on])
    return [_bar(scale.x(a), scale.x(b), TOP + ROW_H * i + 3, ROW_H - 6, colour(d), "0.18", "span",
                 f"device {d} busy from {seconds(a)} to {seconds(b)}")
            for i, (d, a, b) in enumerate(zip(devices, first.tolist(), last.tolist())) if a != np.inf]


def _compute_bars(computes: Sequence[ComputeRecord], devices: Sequence[int], scale: Timeline,
                  max_bars: int | None) -> list[str]:
    """A dark strip along the foot of its device's lane for each piece of local work (`sim.compute`), so a
    message flying over a strip is communication overlapped with compute."""
    lane = {d: i for i, d in enumerate(devices)}
    drawn = [c for c in computes if c.device in lane][:max_bars]
    return [_bar(scale.x(c.start_s), scale.x(c.end_s), TOP + ROW_H * lane[c.device] + ROW_H - 7, 4, "#333",
                 "0.85", "compute", f"device {c.device} computes {c.name or 'work'} from {seconds(c.start_s)} "
                 f"to {seconds(c.end_s)}") for c in drawn]


def _note(devices: int, shown: int, pairs: int, paired: bool, drawn: int, messages: int) -> str:
    """What the timeline left out or aggregated, in words (empty when it shows everything)."""
    said = []
    if shown < devices:
        said.append(f"only the first {shown} of {devices} devices have lanes (their messages are drawn)")
    if not paired:
        said.append(f"{pairs} sender -> receiver pairs are more than {PAIR_LANES} lanes, so each message is "
                    f"drawn on its sender's lane")
    if drawn < messages:
        said.append(f"{drawn} of {messages} messages drawn")
    return "; ".join(said)


def _bar(x0: float, x1: float, y: float, h: float, fill: str, opacity: str, kind: str, about: str,
         message: int | None = None) -> str:
    """A timeline bar (at least 2 px wide, so instant steps stay visible) with its tooltip."""
    attrs = {"class_": kind, "x": round(x0, 1), "y": y, "width": round(max(2.0, x1 - x0), 1), "height": h,
             "fill": fill, "fill_opacity": opacity}
    if message is not None:
        attrs["data_message"] = message
    return tag("rect", attrs, tag("title", {}, xml_text(about)) if about else "")


def _ticks(scale: Timeline, bottom: float) -> list[str]:
    """Five time ticks across the plot, labelled in the largest fitting unit."""
    out = []
    for i in range(5):
        t = scale.end_s * i / 4
        x = scale.x(t)
        out.append(tag("line", {"x1": round(x, 1), "y1": TOP - 4, "x2": round(x, 1), "y2": bottom,
                                "stroke": "#ddd"}))
        out.append(text(x, TOP - 8, seconds(t), text_anchor="middle", font_size=10, fill="#555"))
    return out


def message_table(messages: Sequence[MessageRecord] | Trace, limit: int | None = None) -> str:
    """An HTML table of the messages (each row `data-message` its index): kind, ends, bytes, times, detail;
    past `limit` rows, a last row says how many were left out. Only the rows listed make a record."""
    head = "".join(f"<th>{h}</th>" for h in ("#", "kind", "src", "dst", "bytes", "sent", "started", "arrived",
                                              "detail"))
    rows = []
    for k in range(len(messages) if limit is None else min(limit, len(messages))):
        m = messages[k]
        detail = ", ".join(f"{key}={value}" for key, value in m.detail.items())
        cells = [str(k), m.kind, str(m.src), str(m.dst), str(m.size_bytes), seconds(m.send_time_s),
                 seconds(m.start_time_s), seconds(m.arrival_time_s), detail]
        rows.append(f'<tr data-message="{k}" style="color:{ink(m.src)}">'
                    + "".join(f'<td{" class=num" if i in (0, 2, 3, 4) else ""}>{xml_text(c)}</td>'
                              for i, c in enumerate(cells)) + "</tr>")
    if limit is not None and len(messages) > limit:
        rows.append(f'<tr class="more"><td colspan="9">{len(messages) - limit} more messages not listed '
                    f'(the first {limit} are)</td></tr>')
    return f'<table id="messages"><tr>{head}</tr>' + "".join(rows) + "</table>"


def summary(messages: Sequence[MessageRecord] | Trace, devices: int, end_time_s: float,
            calls: Sequence[CallRecord]) -> str:
    """One line: devices, messages (between devices and local), bytes over the network, the program's
    collective calls (`calls`, each device's parts, counted as `program_calls` counts them) and the end time.
    A `Trace` is read through its columns, so a run of a million messages says it quickly."""
    names = ("src", "dst", "size_bytes", "kind")  # not `detail`: a dict per record
    columns = messages.columns(names) if isinstance(messages, Trace) else {
        name: np.array([getattr(m, name) for m in messages], object) for name in names}
    traffic = Traffic.counted(*(columns[name] for name in ("kind", "src", "dst", "size_bytes")))
    return (f"{counted(devices, 'device')}, {counted(traffic.messages, 'message')} ({traffic.between} between "
            f"devices, {traffic.network_bytes} B over the network)"
            + (f", {counted(traffic.copies, 'local copy')}" if traffic.copies else "")
            + (f", {counted(len(messages.computes), 'compute span')}"
               if isinstance(messages, Trace) and messages.computes else "")
            + f", {counted(len(call_parts(calls)), 'collective call')}, ends at {seconds(end_time_s)}")


def run_html(trace: Trace, devices: Sequence[int], end_time_s: float, heading: str = "Run", *,
             calls: Sequence[CallRecord]) -> str:
    """A run as an HTML fragment: its summary (`calls` are each device's parts of its collective calls), its
    timeline and its message table, both bounded (`BARS` messages drawn, `TABLE_ROWS` listed)."""
    drawn = timeline(trace, devices, end_time_s, max_bars=BARS)
    note = f"<p><small>{xml_text(drawn.note)}</small></p>" if drawn.note else ""
    return (f'<div class="meshsim-run"><p><b>{xml_text(heading)}</b>: '
            f"{xml_text(summary(trace, len(devices), end_time_s, calls))}</p>{drawn.svg}{note}"
            f"{message_table(trace, TABLE_ROWS)}</div>")
