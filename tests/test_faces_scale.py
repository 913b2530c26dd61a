"""Big runs through `meshsim draw`, `trace` and `check`: bounded output that says what it left out, `--full` for
everything, and the column-based paths equal to the record-by-record ones they replace.

Each fast path is checked against a record-by-record reference written here (drawn cases, Hypothesis), and
a planted change shows the comparison can fail.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_trace_export import problems

import scenarios
import sim
from scenarios.cli import main
from scenarios.cli import trace as trace_command
from scenarios.picture import _page, order, page, picture, source_spans
from sim.record import _perfetto, seconds, time_order, timeline
from sim.record._html import DEVICE_LANES, PAIR_LANES, ROW_H, TITLED, TOP, Timeline, colour

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "scenarios" / "library"
SVG = "{http://www.w3.org/2000/svg}"


def all_gather_file(tmp_path: Path, devices: int) -> Path:
    """An all_gather of one float per device over `devices` devices."""
    path = tmp_path / f"all_gather_{devices}.toml"
    path.write_text(f'title = "all_gather over {devices} devices"\n[mesh]\naxes = {{i = {devices}}}\n[collective]\n'
                    'op = "all_gather"\naxis_name = "i"\n[inputs]\nseed = 0\nshape = [1]\n')
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> scenarios.ScenarioResult:
    """A 300-device all_gather: 90,000 messages."""
    return scenarios.run(scenarios.load(all_gather_file(tmp_path_factory.mktemp("big"), 300)))


# ------------------------------------------------------------------------------------------ drawn traces

@st.composite
def traces(draw) -> tuple[sim.Trace, int]:
    """A trace of messages and copies among a few devices, with ties in time, and its device count."""
    devices = draw(st.integers(1, 70))
    count = draw(st.integers(0, 60))
    trace = sim.Trace()
    times = st.sampled_from([0.0, 1e-6, 2e-6, 3.5e-6])
    for _ in range(count):
        src, dst = draw(st.integers(0, devices - 1)), draw(st.integers(0, devices - 1))
        posted = draw(times)
        start = posted + draw(times)
        kind = "message" if src != dst or draw(st.booleans()) else "pack"
        trace.append(src, dst, draw(st.integers(0, 64)), posted, start, start + draw(times), "psum", 0,
                     {"slice": 0}, kind)
    return trace, devices


def record_timeline(messages, devices, end_time_s, max_bars=None):
    """The timeline's lanes, bars and note worked message by message (the reference of `timeline`)."""
    end = max([end_time_s, *(m.arrival_time_s for m in messages)]) or 1.0
    shown = list(devices)[:DEVICE_LANES]
    lane_of = {d: i for i, d in enumerate(shown)}
    pairs = sorted({(m.src, m.dst) for m in messages if m.src != m.dst and m.src in lane_of})
    paired = len(pairs) <= PAIR_LANES
    lane_of |= {pair: len(shown) + i for i, pair in enumerate(pairs)} if paired else {}
    scale, bars = Timeline("", "", end), []
    for k, m in enumerate(messages):
        lane = lane_of.get((m.src, m.dst) if m.src != m.dst and paired else m.src)
        if lane is None or (max_bars is not None and len(bars) >= max_bars):
            continue
        about = (f"message {k}: {m.kind} {m.src} -> {m.dst}, {m.size_bytes} B, {seconds(m.start_time_s)} to "
                 f"{seconds(m.arrival_time_s)}") if len(messages) <= TITLED else ""
        bars.append((k, round(scale.x(m.start_time_s), 1), TOP + ROW_H * lane + 5, colour(m.src), about))
    first: dict[int, float] = {}
    for m in messages:
        for d in {m.src, m.dst}:
            first[d] = min(first.get(d, m.send_time_s), m.send_time_s)
    spans = [round(scale.x(first[d]), 1) for d in shown if d in first]
    return len(shown) + (len(pairs) if paired else 0), bars, spans, end


def drawn_timeline(svg: str):
    """The lanes, bars and span starts a timeline's SVG holds."""
    root = ET.fromstring(svg)
    lanes = [e for e in root.iter(SVG + "text") if e.get("class") == "lane"]
    bars = [(int(e.get("data-message")), float(e.get("x")), float(e.get("y")), e.get("fill"),
             e.findtext(SVG + "title") or "") for e in root.iter(SVG + "rect") if e.get("class") == "message"]
    spans = [float(e.get("x")) for e in root.iter(SVG + "rect") if e.get("class") == "span"]
    return len(lanes), bars, spans


@given(traces(), st.sampled_from([None, 0, 3, 1000]))
def test_the_timeline_from_columns_equals_the_one_made_record_by_record(case, max_bars):
    """The timeline worked on a trace's columns has the lanes, bars (index, place, colour, tooltip) and device
    spans the record-by-record reference gives, from a `Trace` or a list of its records."""
    trace, devices = case
    want_lanes, want_bars, want_spans, end = record_timeline(trace.messages, range(devices), 1e-6, max_bars)
    for messages in (trace, trace.messages):
        drawn = timeline(messages, range(devices), 1e-6, max_bars=max_bars)
        assert drawn.end_s == end
        assert drawn_timeline(drawn.svg) == (want_lanes, want_bars, want_spans)


def test_the_timeline_comparison_can_fail():
    """A trace changed after the reference was taken gives another timeline: the comparison sees bars move."""
    trace = sim.Trace()
    trace.append(0, 1, 8, 0.0, 0.0, 1e-6, "psum", 0, {})
    trace.append(1, 0, 8, 0.0, 0.5e-6, 1e-6, "psum", 0, {})
    want = record_timeline(trace.messages, range(2), 1e-6)
    trace.append(1, 0, 8, 0.0, 0.2e-6, 1e-6, "psum", 0, {})
    assert drawn_timeline(timeline(trace, range(2), 1e-6).svg) != want[:3]


@given(traces(), st.integers(0, 70))
def test_time_order_equals_sorting_the_records(case, first):
    """`time_order` is the records sorted by (posted, first carried, arrived, index); its `first` are the head."""
    trace, _ = case
    records = trace.messages
    want = sorted(range(len(records)), key=lambda k: (records[k].send_time_s, records[k].start_time_s,
                                                       records[k].arrival_time_s, k))
    assert time_order(trace).tolist() == want
    assert time_order(trace, first).tolist() == want[:first]


# ------------------------------------------------------------------------------------------ lanes of a track

@st.composite
def spans(draw) -> list[_perfetto._Span]:
    """Spans on two tracks: containers that do not overlap on a track, and leaves anywhere (some empty)."""
    out = []
    for track in (("device", 0), ("link", (0, 1))):
        at = 0
        for _ in range(draw(st.integers(0, 3))):
            start = at + draw(st.integers(0, 5))
            at = start + draw(st.integers(1, 20))
            out.append(_perfetto._Span(track, start, at, "call", "collective", {}, container=True))
        for _ in range(draw(st.integers(0, 25))):
            start = draw(st.integers(0, 40))
            out.append(_perfetto._Span(track, start, start + draw(st.integers(0, 12)), "leaf", "send", {}))
    return out


def first_fit(spans: list[_perfetto._Span]) -> list[tuple]:
    """Each span's (track, lane) by the first lane where it fits, scanning every lane (the reference)."""
    lanes: dict[tuple, list[_perfetto._Lane]] = {}
    placed = {}
    for i in sorted(range(len(spans)), key=lambda i: (spans[i].start_ps, not spans[i].container, -spans[i].end_ps, i)):
        track = lanes.setdefault(spans[i].track, [])
        at = next((n for n, lane in enumerate(track) if _perfetto._fits(lane, spans[i])), len(track))
        if at == len(track):
            track.append(_perfetto._Lane())
        _perfetto._take(track[at], spans[i])
        placed[i] = (spans[i].track, at)
    return [placed[i] for i in range(len(spans))]


def placed_lanes(spans: list[_perfetto._Span]) -> list[tuple]:
    """Each span's (track, lane) as `_place` gives it (its thread id made back into a lane of its track)."""
    threads = _perfetto._place(spans, [])
    lane_of = {id(lane): (track, n) for track, lanes in threads.items() for n, lane in enumerate(lanes)}
    return [next(lane_of[id(lane)] for lane in threads[s.track] if any(t is s for t in lane.spans)) for s in spans]


@given(spans())
def test_lanes_found_through_the_heap_are_the_first_that_fit(drawn):
    """`_place` skips the search when every lane ends later than a span starts; it gives each span the lane
    the full first-fit scan gives."""
    assert placed_lanes(drawn) == first_fit(drawn)


def test_the_lane_comparison_can_fail():
    """Two overlapping leaves need two lanes: a placement that put both in one would differ."""
    drawn = [_perfetto._Span(("device", 0), 0, 10, "a", "send", {}),
             _perfetto._Span(("device", 0), 5, 9, "b", "send", {})]
    assert placed_lanes(drawn) == first_fit(drawn) == [(("device", 0), 0), (("device", 0), 1)]
    assert placed_lanes(drawn) != [(("device", 0), 0), (("device", 0), 0)]


# ---------------------------------------------------------------------------------------- source spans

def record_source_spans(result) -> dict[int, tuple[int, int]]:
    """The operand rows each located message carries, worked message by message (the reference)."""
    drawing, spans, counts = result.scenario.definition.drawing, {}, {}
    for m in result.trace:
        if "rows" in m.detail:
            counts[m.src, m.call] = counts.get((m.src, m.call), 0) + 1
    for k, m in enumerate(result.trace):
        if "rows" not in m.detail:
            continue
        array = np.asarray(result.inputs[m.src][result.scenario.definition.arrays[0]])
        axis = drawing.strip_axis(result.scenario.params)
        rows = array.shape[axis] if array.ndim else 1
        if "src_rows" in m.detail:
            spans[k] = tuple(m.detail["src_rows"])
        elif drawing.chunked:
            chunk = rows // counts[m.src, m.call]
            spans[k] = (m.detail["slice"] * chunk, (m.detail["slice"] + 1) * chunk)
        else:
            spans[k] = (0, rows)
    return spans


@pytest.mark.parametrize("name", ["moe_dispatch", "all_to_all_seeded", "all_gather_groups", "psum_ring",
                                  "ragged_docs_example"])
def test_source_spans_from_columns_equal_those_made_record_by_record(name):
    """`source_spans` from the trace's columns equals the reference, for every message and for a subset."""
    result = scenarios.run(scenarios.load(str(LIBRARY / f"{name}.toml")))
    want = record_source_spans(result)
    assert source_spans(result) == want
    chosen = list(range(0, len(result.trace), 3))
    assert source_spans(result, chosen) == {k: want[k] for k in chosen if k in want}
    assert name == "psum_ring" or want  # the reference saw rows (the comparison has something to fail on)


# ------------------------------------------------------------------------------------------------- trace

def test_a_summarised_trace_is_valid_and_keeps_the_first_records_in_time_order(big):
    """Past `limit` records: valid trace events; the first `limit` in time order have their sends, receives
    and flows; each device's summary spans count what it sent and received; the counters equal the
    messages and bytes on the wire at their times, counted message by message."""
    run, limit = big.run, 500
    doc = _perfetto.trace_events(run.trace, run.simulation.calls, run.simulation.mesh.size, limit)
    assert problems(doc) == []
    events = doc["traceEvents"]
    first = time_order(run.trace, limit).tolist()
    sends = sorted(e["args"]["message"] for e in events if e["ph"] == "X" and e["cat"] == "send")
    assert sends == sorted(first) and len({e["id"] for e in events if e["ph"] == "s"}) == limit
    summary = [e for e in events if e["ph"] == "X" and e["cat"] == "summary"]
    for verb in ("sent", "received"):
        counted = [e["args"]["messages"] for e in summary if e["name"].startswith(verb)]
        assert len(counted) == 300 and sum(counted) == len(run.trace)
    assert doc["otherData"]["summarised"]["in_full"] == limit
    columns = {name: run.trace.column(name) for name in ("start_time_s", "arrival_time_s", "size_bytes")}
    starts = np.round(columns["start_time_s"] * 1e12)
    ends = np.round(columns["arrival_time_s"] * 1e12)
    counters = [e for e in events if e["ph"] == "C"]
    assert 2 <= len(counters) <= _perfetto.COUNTER_POINTS and counters[-1]["args"]["messages"] == 0
    for e in counters[::97]:
        t = round(e["ts"] * 1e6)
        flying = (starts <= t) & (ends > t)
        assert e["args"] == {"messages": int(flying.sum()), "bytes": int(columns["size_bytes"][flying].sum())}


def test_a_runs_own_export_takes_the_same_limit(big, tmp_path):
    """`Run.trace_events(limit)` and `Run.to_perfetto(path, limit)` give `sim.record.trace_events`' summary
    (before, a run's own export was always in full: a million messages took 70 s and a gigabyte); without a
    limit, the full export (on a small run: in full, the big one's takes seconds)."""
    run = big.run
    summary = _perfetto.trace_events(run.trace, run.simulation.calls, run.simulation.mesh.size, 500)
    assert run.trace_events(500) == summary
    assert run.to_perfetto(tmp_path / "t.json", limit=500) == summary
    small = scenarios.run(scenarios.load(all_gather_file(tmp_path, 12))).run
    assert small.trace_events() == _perfetto.trace_events(small.trace, small.simulation.calls,
                                                           small.simulation.mesh.size)


def test_a_trace_within_its_limit_is_the_full_export(tmp_path):
    """A limit at or past the record count changes nothing: the same events as the full export."""
    run = scenarios.run(scenarios.load(all_gather_file(tmp_path, 12))).run
    args = (run.trace, run.simulation.calls, run.simulation.mesh.size)
    assert _perfetto.trace_events(*args, len(run.trace)) == _perfetto.trace_events(*args)
    assert _perfetto.trace_events(*args, len(run.trace) - 1) != _perfetto.trace_events(*args)


def test_the_trace_command_summarises_past_its_limit_and_full_writes_every_message(tmp_path, capsys, monkeypatch):
    """`meshsim trace` past `RECORDS` says it summarised and writes `RECORDS` sends; `--full` writes one per
    message and says nothing of a summary."""
    monkeypatch.setattr(trace_command, "RECORDS", 40)
    path, out = all_gather_file(tmp_path, 12), tmp_path / "t.json"
    assert main(["trace", str(path), "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "the first 40 of 144 messages and copies in time order in full" in said and "--full" in said
    doc = json.loads(out.read_text())
    assert problems(doc) == [] and sum(e["ph"] == "X" and e["cat"] == "send" for e in doc["traceEvents"]) == 40
    assert main(["trace", str(path), "-o", str(out), "--full"]) == 0
    said = capsys.readouterr().out
    assert "summarised" not in said and "132 links, 144 messages" in said
    doc = json.loads(out.read_text())
    assert problems(doc) == [] and sum(e["ph"] == "X" and e["cat"] == "send" for e in doc["traceEvents"]) == 144


# -------------------------------------------------------------------------------------------------- draw

def test_a_big_page_steps_through_its_first_messages_and_says_so(big):
    """A 300-device page: `PAGE_STEPS` steps in time order, a bar for each of those with a lane, a matrix of
    blocks whose cells list exactly the stepped messages they hold, and notes saying all three; the page
    stays a few megabytes."""
    html = page(big)
    data = json.loads(re.search(r'id="steps-data">(.*?)</script>', html).group(1).replace("<\\/", "</"))
    stepped = order(big, _page.PAGE_STEPS)
    assert [s["message"] for s in data["steps"]] == stepped
    notes = " ".join(data["notes"])
    assert f"the first {_page.PAGE_STEPS} of 90000 messages in time order" in notes
    assert "blocks of 5 devices" in notes and "-o FILE.svg --full" in notes
    listed = sorted(int(k) for k in re.findall(r'data-messages="([\d ]*)"', html) for k in k.split())
    assert listed == sorted(stepped)
    bars = {int(k) for k in re.findall(r'class="message"[^>]*data-message="(\d+)"', html)}
    src = big.trace.column("src")
    assert bars == {k for k in stepped if src[k] < DEVICE_LANES}
    assert len(html) < 6_000_000


def test_a_big_picture_is_a_matrix_of_blocks_that_counts_every_message(big):
    """The 300-device SVG is the block matrix under the title and a line saying why: its cells' titles add
    up to every message and byte."""
    root = ET.fromstring(picture(big))
    said = " ".join(e.text or "" for e in root.iter(SVG + "text"))
    assert "300 devices and 90000 messages are more than 64 devices or 4096 messages" in said
    assert "--full" in said
    titles = [e.findtext(SVG + "title") for e in root.iter(SVG + "rect") if "block" in (e.get("class") or "")]
    counted = [re.search(r": (\d+) messages?, (\d+) B", t).groups() for t in titles]
    assert sum(int(n) for n, _ in counted) == len(big.trace)
    assert sum(int(b) for _, b in counted) == int(big.trace.column("size_bytes").sum())
    assert len(titles) == 60 * 60  # blocks of 5 devices, every pair of blocks exchanged


def test_full_draws_every_band(tmp_path):
    """`meshsim draw --full` of a mesh past the SVG's bound draws its bands and an arrow per message; without
    it, the matrix."""
    path = all_gather_file(tmp_path, 66)
    for flag, arrows in (([], 0), (["--full"], 66 * 66)):
        out = tmp_path / f"p{len(flag)}.svg"
        assert main(["draw", str(path), "-o", str(out), *flag]) == 0
        root = ET.parse(out).getroot()
        assert sum(e.get("class") == "arrow" for e in root.iter(SVG + "path")) == arrows


# ------------------------------------------------------------------------------------------------- check

def test_a_big_check_lists_the_ends_and_every_device_that_disagrees(tmp_path, capsys, monkeypatch):
    """40 devices: 16 rows at the ends and a caption; with devices 20 and 21 wrong, their rows too; `--full`
    lists all 40."""
    import collectives._all_gather

    path = str(all_gather_file(tmp_path, 40))
    assert main(["check", path, "--no-jax"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"│ agree +│ skipped +│", out)) == 16 and "24 devices that agree are not listed" in out
    protocol = collectives._all_gather._protocol

    def wrong(port, args):
        result = yield from protocol(port, args)
        return result + 1 if port.device in (20, 21) else result

    monkeypatch.setattr(collectives._all_gather, "_protocol", wrong)
    assert main(["check", path, "--no-jax"]) == 1
    out = capsys.readouterr().out
    assert len(re.findall(r"│ DIFFER +│ skipped +│", out)) == 2 and len(re.findall(r"│ agree +│", out)) == 16
    assert re.search(r"│ +20 │", out) and re.search(r"│ +21 │", out) and "22 devices that agree" in out
    assert main(["check", path, "--no-jax", "--full"]) == 1
    assert len(re.findall(r"│ (agree|DIFFER) +│ skipped +│", capsys.readouterr().out)) == 40


# --------------------------------------------------------------------------------------------------- json

def test_run_json_lists_the_first_messages_and_a_summary_unless_full(tmp_path, capsys, monkeypatch):
    """`meshsim run --json` past `MESSAGES` messages lists the first ones (as `to_dict` has them) and a
    summary counted from the columns; `--full` lists every message, as `to_dict()` does."""
    from scenarios.cli.render import _json

    monkeypatch.setattr(_json, "MESSAGES", 40)
    path = all_gather_file(tmp_path, 12)
    whole = json.loads(json.dumps(scenarios.run(scenarios.load(path)).to_dict()))
    assert main(["run", "--json", str(path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed.pop("messages") == whole["messages"][:40]
    summary = printed.pop("messages_summary")
    assert summary["messages"] == 144 and summary["listed"] == 40 and summary["left_out"] == 104
    assert summary["bytes_between_devices"] == sum(m["size_bytes"] for m in whole["messages"] if m["src"] != m["dst"])
    assert printed == {k: v for k, v in whole.items() if k != "messages"}
    assert main(["run", "--json", "--full", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == whole
