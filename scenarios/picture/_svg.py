"""The picture `meshsim draw` makes of a scenario: SVG written as text, one strip of rows per array.

For a collective whose messages say where they land (ragged_all_to_all, all_to_all, all_gather), each device
gets a band with its operand on the left and its result on the right, both as strips of rows coloured by
the sending device; an arrow runs from each message's rows in the sender's operand to the rows it wrote in
the receiver's result. Rows no message wrote (kept from `output`) are hatched, operand rows no slice sends
are grey, and empty slices are dashed marks. Long strips group rows into runs so the picture keeps its size.
Other collectives get a box per device on a circle and one arrow per sender and receiver, with the messages
and bytes it carried.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scenarios.picture._matrix import matrix
from sim.record import PALETTE_HEX, Traffic, colour, plural, svg, tag, text, xml_text
from sim.record import number as _n

if TYPE_CHECKING:
    from scenarios._runner import ScenarioResult

UNSENT = "#d9d9d9"
ROW_H, STRIP_W, MAX_ROWS, RUN_MIN_H = 22, 120, 24, 14
SVG_DEVICES, SVG_MESSAGES = 64, 4096  # past either, the picture is the sender x receiver matrix unless full
X_OP, X_OUT = 70, 450
WIDTH = X_OUT + STRIP_W + 70
_DEFS = ('<pattern id="kept" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
         '<rect width="6" height="6" fill="#f4f4f4"/><line x1="0" y1="0" x2="0" y2="6" stroke="#9a9a9a" '
         'stroke-width="2"/></pattern>')


def document(width: float, height: float, body: Sequence[str], title: str) -> str:
    """A standalone SVG document around `body`, with the kept-rows hatch and an arrowhead per colour."""
    markers = "".join(_marker(d) for d in range(len(PALETTE_HEX)))
    return svg(width, height, body, title, _DEFS + markers)


def picture(result: ScenarioResult, full: bool = False) -> str:
    """The SVG text of `result`: strips and arrows where messages say where they land, else device boxes.

    Past `SVG_DEVICES` devices or `SVG_MESSAGES` messages (unless `full`), who sends to whom as a matrix
    (`scenarios.picture._matrix`), said under the title, so the picture keeps its size.
    """
    scenario = result.scenario
    title = f"{scenario.title}: {scenario.op}({_params(result)})"
    if not full and (scenario.mesh.size > SVG_DEVICES or len(result.trace) > SVG_MESSAGES):
        records = Traffic.of(result.trace).records
        return matrix(result, heading=(scenario.title, f"{scenario.op}({_params(result)})", (
            f"{scenario.mesh.size} devices and {len(result.trace)} {records} are more than {SVG_DEVICES} devices or "
            f"{SVG_MESSAGES} {records}: who sends to whom as a matrix; `meshsim draw --full` draws every band")))
    if any(p is not None for p in result.provenance):
        body, height = _strips(result)
    else:
        body, height = _boxes(result)
    heading = [text(10, 22, scenario.title, font_size=15, font_weight="bold", class_="title"),
               text(10, 40, f"{scenario.op}({_params(result)})", font_family="monospace", class_="call")]
    return document(WIDTH, height, heading + body, title)


@dataclass(frozen=True)
class Strip:
    """One array drawn as a column of rows: where each row boundary sits, and which rows each message covers.

    `bounds` are the row indices where a run starts or stops (0 and the row count included), `ys` the
    y of each bound; a run between two bounds is drawn row by row when the array is short, else as one block.
    """

    x: float
    bounds: tuple[int, ...]
    ys: tuple[float, ...]
    by_row: bool

    def y(self, row: int) -> float:
        """The y of a row boundary (one of `bounds`)."""
        return self.ys[self.bounds.index(row)]

    @property
    def height(self) -> float:
        """The strip's height in pixels."""
        return self.ys[-1] - self.ys[0]


def strip(x: float, top: float, rows: int, cuts: set[int]) -> Strip:
    """Lay out `rows` rows from `top`, with a run boundary at every cut; runs shrink when there are many rows."""
    bounds = tuple(sorted({0, rows} | {c for c in cuts if 0 <= c <= rows}))
    by_row = rows <= MAX_ROWS
    scale = ROW_H if by_row else ROW_H * MAX_ROWS / rows
    ys = [top]
    for start, stop in itertools.pairwise(bounds):
        ys.append(ys[-1] + ((stop - start) * scale if by_row else max(RUN_MIN_H, (stop - start) * scale)))
    return Strip(x, bounds, tuple(ys), by_row)


def _strips(result: ScenarioResult) -> tuple[list[str], float]:
    """Bands of operand and result strips per device, arrows for the messages, and the legend."""
    spans = source_spans(result)
    top, body, placed = 64.0, [], {}
    body.append(text(X_OP, top, "operand", font_weight="bold"))
    body.append(text(X_OUT, top, f"result (rows along axis {_axis(result)})", font_weight="bold"))
    top += 14
    for device in result.scenario.mesh.devices:
        band, operand, output = _band(result, device, spans, top)
        body.extend(band)
        placed[device] = (operand, output)
        top = max(operand.ys[-1], output.ys[-1]) + 26
    for k, message in enumerate(result.trace):
        if k in spans:
            body.append(_arrow(k, message, spans[k], placed))
    legend, height = _legend(result, top, kept=True)
    return body + legend, height


def _band(result: ScenarioResult, device: int, spans: dict[int, tuple[int, int]],
          top: float) -> tuple[list[str], Strip, Strip]:
    """One device's header, operand strip and result strip."""
    coords = ", ".join(f"{name}={i}" for name, i in result.scenario.mesh.coords(device).items())
    body = [text(10, top + 12, f"device {device}", font_weight="bold", fill=colour(device), class_="device",
                 data_device=device),
            text(90, top + 12, f"({coords})", fill="#666")]
    operand_array, axis = _operand(result, device)
    sent = [spans[k] for k, m in enumerate(result.trace) if m.src == device and k in spans]
    empty = _empty_offsets(result, device)
    rows = operand_array.shape[axis] if operand_array.ndim else 1
    operand = strip(X_OP, top + 20, rows, {c for span in sent for c in span} | set(empty.values()))
    body += _operand_cells(operand, operand_array, axis, device, sent)
    body += [_empty_mark(operand, row, [i for i, at in empty.items() if at == row])
             for row in sorted(set(empty.values()))]
    provenance, output_array = result.provenance[device], result.outputs[device]
    runs = _runs(provenance.messages)
    output = strip(X_OUT, top + 20, len(provenance.messages), {c for start, stop, _ in runs for c in (start, stop)})
    for start, stop, k in runs:
        fill = "url(#kept)" if k is None else colour(result.trace[k].src)
        body += _cells(output, start, stop, output_array, provenance.axis, fill, (device, "result"), k)
    return body, operand, output


def _operand_cells(operand: Strip, array: np.ndarray, axis: int, device: int,
                   sent: list[tuple[int, int]]) -> list[str]:
    """The operand's runs: the sender's colour where a slice sends the rows, grey where none does."""
    body = []
    for start, stop in itertools.pairwise(operand.bounds):
        covered = any(a <= start and stop <= b for a, b in sent)
        body += _cells(operand, start, stop, array, axis, colour(device) if covered else UNSENT, (device, "operand"),
                       None)
    return body


def _cells(s: Strip, start: int, stop: int, array: np.ndarray, axis: int, fill: str, where: tuple[int, str],
           message: int | None) -> list[str]:
    """Rows `start:stop` of a strip: one cell per row with its value, or one block labelled with the run.

    `where` is the device and the side ("operand" or "result"); each cell carries them and its rows
    (`data-rows="start:stop"`), so the page's stepper finds the rows a message moves."""
    if start == stop:
        return []
    y0, y1 = s.y(start), s.y(stop)
    kind = "kept" if fill == "url(#kept)" else "unsent" if fill == UNSENT else "sent"
    attrs = {"class_": f"row {kind}", "fill": fill, "fill_opacity": "0.55" if fill.startswith("#") else "1",
             "stroke": "#555", "stroke_width": "0.6", "data_device": where[0], "data_side": where[1]} | (
        {} if message is None else {"data_message": message})
    left = where[1] == "operand"
    label_x = s.x - 6 if left else s.x + STRIP_W + 6
    anchor = "end" if left else "start"
    if not s.by_row:
        return [tag("rect", {"x": s.x, "y": _n(y0), "width": STRIP_W, "height": _n(y1 - y0), **attrs,
                             "data_rows": f"{start}:{stop}"}),
                text(label_x, (y0 + y1) / 2 + 4, f"{start}:{stop}", text_anchor=anchor, fill="#444",
                     class_="rowlabel"),
                text(s.x + STRIP_W / 2, (y0 + y1) / 2 + 4, f"{stop - start} {plural(stop - start, 'row')}",
                     text_anchor="middle")]
    out = []
    for row in range(start, stop):
        y = y0 + (row - start) * ROW_H
        out += [tag("rect", {"x": s.x, "y": _n(y), "width": STRIP_W, "height": ROW_H, **attrs,
                             "data_rows": f"{row}:{row + 1}"}),
                text(label_x, y + 15, str(row), text_anchor=anchor, fill="#444", class_="rowlabel"),
                text(s.x + STRIP_W / 2, y + 15, _value(array, axis, row), text_anchor="middle",
                     font_family="monospace")]
    return out


def _empty_mark(s: Strip, row: int, slices: list[int]) -> str:
    """A dashed line at the row where empty slices start, with their numbers (one label for all of them)."""
    y = s.y(row)
    line = tag("line", {"x1": s.x - 4, "y1": _n(y), "x2": s.x + STRIP_W + 34, "y2": _n(y), "stroke": "#555",
                        "stroke_dasharray": "4 3", "stroke_width": "1.4"})
    said = f"{plural(len(slices), 'slice')} {', '.join(map(str, slices))} empty"
    return tag("g", {"class_": "empty-slice"}, line + text(s.x + STRIP_W + 36, y + 4, said, font_size=10, fill="#555"))


def _arrow(k: int, message: object, source: tuple[int, int], placed: dict[int, tuple[Strip, Strip]]) -> str:
    """A curve from the message's rows in the sender's operand to the rows it wrote at the receiver."""
    operand, output = placed[message.src][0], placed[message.dst][1]
    y1 = (operand.y(source[0]) + operand.y(source[1])) / 2
    start, stop = message.detail["rows"]
    y2 = (output.y(start) + output.y(stop)) / 2
    x1, x2 = X_OP + STRIP_W + 2, X_OUT - 4
    path = f"M{_n(x1)},{_n(y1)} C{_n(x1 + 130)},{_n(y1)} {_n(x2 - 130)},{_n(y2)} {_n(x2)},{_n(y2)}"
    slice_ = message.detail.get("slice")
    about = (f"message {k}: device {message.src}" + ("" if slice_ is None else f" slice {slice_}")
             + f" rows {source[0]}:{source[1]} -> device {message.dst} rows {start}:{stop}, {message.size_bytes} B")
    return tag("path", {"class_": "arrow", "d": path, "fill": "none", "stroke": colour(message.src),
                        "stroke_width": "1.6", "marker_end": f"url(#arrow-{message.src % len(PALETTE_HEX)})",
                        "data_message": k, "data_src": message.src, "data_dst": message.dst},
               tag("title", {}, xml_text(about)))


def _boxes(result: ScenarioResult) -> tuple[list[str], float]:
    """Devices as boxes on a circle, one arrow per sender and receiver labelled with messages and bytes."""
    devices = result.scenario.mesh.devices
    radius = max(150.0, 40.0 * len(devices))
    cx, cy = WIDTH / 2, 70 + radius + 30
    at = {d: (cx + radius * math.sin(2 * math.pi * i / len(devices)),
              cy - radius * math.cos(2 * math.pi * i / len(devices))) for i, d in enumerate(devices)}
    pairs: dict[tuple[int, int], list[int]] = {}
    for k, message in enumerate(result.trace):
        if message.src != message.dst and message.kind == "message":
            pairs.setdefault((message.src, message.dst), []).append(k)
    body = [_pair_arrow(result, pair, ks, at) for pair, ks in sorted(pairs.items())]
    for d in devices:
        x, y = at[d]
        arrays = result.scenario.definition.arrays
        label = (f"{arrays[0]}: shape {'x'.join(map(str, result.inputs[d][arrays[0]].shape)) or 'scalar'}"
                 if arrays else "no arrays")
        box = tag("rect", {"x": _n(x - 55), "y": _n(y - 24), "width": 110, "height": 48, "rx": 6,
                           "fill": colour(d), "fill_opacity": "0.35", "stroke": colour(d), "stroke_width": 2})
        body.append(tag("g", {"class_": "device-box", "data_device": d},
                        box + text(x, y - 5, f"device {d}", text_anchor="middle", font_weight="bold")
                        + text(x, y + 12, label, text_anchor="middle", font_size=10)))
    if not pairs:
        body.append(text(cx, cy + 4, "no messages between devices", text_anchor="middle", fill="#666"))
    legend, height = _legend(result, cy + radius + 50, kept=False)
    return body + legend, height


def _pair_arrow(result: ScenarioResult, pair: tuple[int, int], ks: list[int],
                at: dict[int, tuple[float, float]]) -> str:
    """The messages from one device to another as a curved arrow between their boxes, with their count and bytes."""
    (x1, y1), (x2, y2) = at[pair[0]], at[pair[1]]
    length = math.hypot(x2 - x1, y2 - y1) or 1.0
    ux, uy = (x2 - x1) / length, (y2 - y1) / length
    bend = 0.18 * length  # to the right of the direction of travel, so a -> b and b -> a stay apart
    mx, my = (x1 + x2) / 2 - uy * bend, (y1 + y2) / 2 + ux * bend
    # leave each box where the straight line meets its edge, plus a gap for the arrowhead
    reach = min(55 / abs(ux) if ux else math.inf, 24 / abs(uy) if uy else math.inf) + 6
    sx, sy, ex, ey = x1 + ux * reach, y1 + uy * reach, x2 - ux * (reach + 4), y2 - uy * (reach + 4)
    size = sum(result.trace[k].size_bytes for k in ks)
    label = f"{len(ks)} msg{'s' if len(ks) > 1 else ''}, {size} B"
    path = tag("path", {"class_": "arrow", "d": f"M{_n(sx)},{_n(sy)} Q{_n(mx)},{_n(my)} {_n(ex)},{_n(ey)}",
                        "fill": "none", "stroke": colour(pair[0]), "stroke_width": "1.6",
                        "marker_end": f"url(#arrow-{pair[0] % len(PALETTE_HEX)})",
                        "data_messages": " ".join(map(str, ks))},
               tag("title", {}, xml_text(f"device {pair[0]} -> device {pair[1]}: {label}")))
    lx, ly = (sx + ex) / 4 + mx / 2, (sy + ey) / 4 + my / 2
    return path + text(lx, ly, label, text_anchor="middle", font_size=10, fill="#333", class_="arrow-label")


def _legend(result: ScenarioResult, top: float, kept: bool) -> tuple[list[str], float]:
    """Sender colours, then (for strips) kept rows, unsent rows and empty slices; returns the body and height."""
    items = [tag("rect", {"x": 10 + 96 * (i % 6), "y": _n(top + 26 * (i // 6)), "width": 14, "height": 14,
                          "fill": colour(d), "fill_opacity": "0.55", "stroke": "#555"})
             + text(28 + 96 * (i % 6), top + 12 + 26 * (i // 6), f"device {d}")
             for i, d in enumerate(result.scenario.mesh.devices)]
    y = top + 26 * math.ceil(len(items) / 6)
    if kept:
        swatches = (("url(#kept)", "kept from output"), (UNSENT, "not sent"))
        items += [tag("rect", {"x": 10 + 150 * i, "y": _n(y), "width": 14, "height": 14, "fill": fill,
                               "stroke": "#555"}) + text(28 + 150 * i, y + 12, label)
                  for i, (fill, label) in enumerate(swatches)]
        items.append(tag("line", {"x1": 310, "y1": _n(y + 7), "x2": 330, "y2": _n(y + 7), "stroke": "#555",
                                  "stroke_dasharray": "4 3"}) + text(336, y + 12, "empty slice"))
        y += 26
    header = text(10, top - 8, "colour = sending device", font_weight="bold")
    return [tag("g", {"class_": "legend"}, header + "".join(items))], y + 10


def source_spans(result: ScenarioResult, indices: Sequence[int] | None = None) -> dict[int, tuple[int, int]]:
    """For each message that says where it lands, the rows of the sender's operand it carries (of the
    messages at `indices` only, when given: the trace is read through its columns, so a few spans of a
    million-message run cost little)."""
    trace, drawing, spans = result.trace, result.scenario.definition.drawing, {}
    rows = trace.detail_column("rows")
    wanted = range(len(rows)) if indices is None else indices
    wanted = [k for k in wanted if rows[k] is not None]
    if not wanted:
        return spans
    src, call = trace.column("src"), trace.column("call")
    given, slices = trace.detail_column("src_rows"), trace.detail_column("slice")
    counts = _counts(src, call, np.array([r is not None for r in rows])) if drawing.chunked else None
    for k in wanted:
        array, axis = _operand(result, int(src[k]))
        length = array.shape[axis] if array.ndim else 1
        if given[k] is not None:
            spans[k] = tuple(given[k])
        elif counts is not None:  # slice i is the i-th of equal chunks along the strip's axis (all_to_all's split_axis)
            chunk = length // counts(k)
            spans[k] = (slices[k] * chunk, (slices[k] + 1) * chunk)
        else:  # a gather sends the whole operand
            spans[k] = (0, length)
    return spans


def _counts(src: np.ndarray, call: np.ndarray, located: np.ndarray) -> Callable[[int], int]:
    """How many located messages message k's sender sent in its call, as a function of k."""
    key = src * (int(call.max(initial=0)) + 1) + call
    keys, counts = np.unique(key[located], return_counts=True)
    return lambda k: int(counts[np.searchsorted(keys, key[k])])


def _operand(result: ScenarioResult, device: int) -> tuple[np.ndarray, int]:
    """The device's first array argument and the axis its strip runs along (`Drawing.strip_axis`: all_to_all's
    `split_axis`)."""
    scenario = result.scenario
    array = np.asarray(result.inputs[device][scenario.definition.arrays[0]])
    return array, scenario.definition.drawing.strip_axis(scenario.params)


def _empty_offsets(result: ScenarioResult, device: int) -> dict[int, int]:
    """A ragged sender's empty slices: slice number -> the operand row where it starts."""
    inputs = result.inputs[device]
    if "send_sizes" not in inputs or "input_offsets" not in inputs:
        return {}
    return {i: int(offset) for i, (offset, size) in enumerate(zip(inputs["input_offsets"], inputs["send_sizes"]))
            if size == 0}


def _runs(messages: Sequence[int | None]) -> list[tuple[int, int, int | None]]:
    """Maximal runs of equal entries as (start, stop, entry)."""
    runs: list[tuple[int, int, int | None]] = []
    for i, k in enumerate(messages):
        if runs and runs[-1][2] == k and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1, k)
        else:
            runs.append((i, i + 1, k))
    return runs


def _value(array: np.ndarray, axis: int, row: int) -> str:
    """Row `row` of `array` along `axis`, as short text (the first values of a longer row)."""
    values = np.take(array, row, axis=axis) if array.ndim else array
    flat = [_number(v) for v in np.ravel(values)[:4]]
    if np.ndim(values) == 0:
        return flat[0]
    body = ", ".join(flat)
    return f"[{body}{', ...' if np.size(values) > 4 else ''}]" if len(body) < 14 else f"[{flat[0]}, ...]"


def _number(value: object) -> str:
    """A number in its shortest form."""
    if isinstance(value, np.floating):
        return np.format_float_positional(value, precision=4, unique=True, trim="-")
    return str(value)


def _marker(device: int) -> str:
    """An arrowhead in device `device`'s colour."""
    return tag("marker", {"id": f"arrow-{device}", "viewBox": "0 0 10 10", "refX": 9, "refY": 5,
                          "markerWidth": 7, "markerHeight": 7, "orient": "auto-start-reverse"},
               tag("path", {"d": "M0,0 L10,5 L0,10 z", "fill": PALETTE_HEX[device]}))


def _axis(result: ScenarioResult) -> int:
    """The axis the result strips run along."""
    return next(p.axis for p in result.provenance if p is not None)


def _params(result: ScenarioResult) -> str:
    """The call's parameters as `name=value` text."""
    return ", ".join(f"{key}={value!r}" for key, value in result.scenario.params.items())
