"""A run as Chrome / Perfetto trace-event JSON: a timeline of every device and link, opened in a viewer.

The file is the JSON object form of the trace-event format: `{"traceEvents": [...], "displayTimeUnit": "ns"}`.
Two processes hold the tracks: "devices" (one thread per device) and "links" (one thread per link that
carried a message: `a->b` for a link from device a to device b, else its id, e.g. `out 3` for device 3's
switch egress port). Each span is a complete event (`"ph": "X"`, `ts` and `dur` in
microseconds):

- on a device: its part in each collective call (`cat` "collective", from reaching the call to the end of
  its part), the wait for the rest of its group inside it (`cat` "wait"), each message it sent (`cat`
  "send", from posting to arrival: the payload is a view of its memory until then), each message it
  received (`cat` "receive", from the first byte on the wire to arrival), each local copy (`cat` "copy",
  named by its kind: pack, unpack, relayout);
- on a link: each message that crossed it (`cat` "transfer", from the first byte on the wire to arrival), on
  every link of its route.

A run that charged local work (`sim.compute`: `Trace.computes`) gives every device two tracks: "device 3
communication" (the spans above) and "device 3 compute" (`cat` "compute", one span per piece of work, named
by its label, with its counts in `args`), so a collective started with `sim.start` shows beside the work
it overlaps. A run without any keeps one track per device, named "device 3".

A flow (`"ph": "s"` then `"f"`, `id` = the message's position in the run's trace plus one, `bp`: "e")
joins each send to its receive. Viewers need the spans of one thread to nest, but messages overlap
freely, so a track whose spans would cross is drawn on extra threads, its lanes ("device 3 (lane 2)"):
a span goes to the first lane where it nests, and sends, receives, copies and transfers never nest in
one another, so a flow's timestamp lies in its own span and no deeper one. Times are whole picoseconds
(the simulator's messages can be shorter than a nanosecond), and the same run gives the same bytes.

A run of more than `limit` records is summarised (`summarised` in `otherData` says so): the first `limit`
in time order (posted, first carried, arrived) get their spans and flows as above, every device gets a
`cat` "summary" span from its first send to its last arrival ("sent N messages") and one from its first
byte received to its last ("received N messages"), and a third process, "in flight", holds counters of
the messages and bytes on the wire (`"ph": "C"`) at up to `COUNTER_POINTS` times. The summary is worked
on the trace's columns, so a run of a million messages writes a file of a few megabytes quickly.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sim._errors import InvalidArgumentError, InvalidTypeError
from sim.record._compute import ComputeRecord
from sim.record._order import time_order
from sim.record._trace import CallRecord, MessageRecord, Trace

_DEVICES_PID, _LINKS_PID, _FLIGHT_PID = 1, 2, 3
COUNTER_POINTS = 1000
_PS_PER_S = 10**12
_PS_PER_US = 10**6


@dataclass
class _Span:
    """One complete event before it has a thread: its track, times in picoseconds, what it shows."""

    track: tuple
    start_ps: int
    end_ps: int
    name: str
    cat: str
    args: dict
    container: bool = False
    flow: tuple[str, int] | None = None  # ("s" or "f", flow id)
    tid: int = 0


@dataclass
class _Lane:
    """What one thread of a track holds at the point the spans placed so far reach."""

    open_start_ps: int = -1
    open_end_ps: int = -1  # the last container's end (-1: none)
    leaf_end_ps: int = -1
    leaf_empty: bool = False  # the last leaf lasted no time
    spans: list[_Span] = field(default_factory=list)


def trace_events(trace: Trace, calls: Sequence[CallRecord], devices: int, limit: int | None = None) -> dict:
    """The run's timeline as a trace-event JSON object (see the module's docstring for its tracks).

    Args:
        trace: the run's messages and local copies.
        calls: each device's part in each collective call (`Simulation.calls`).
        devices: how many devices the mesh has (every device gets a track, even an idle one).
        limit: past this many records, the first `limit` in time order are exported in full and the rest
            summarised (None: every record in full).

    Returns:
        A dict ready for `json.dump`, ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``.

    Raises:
        InvalidTypeError: `limit` is neither None nor an int (a bool is not one).
        InvalidArgumentError: `limit` is negative.
    """
    check_limit(limit)
    count = len(trace)
    kinds = trace.column("kind")
    sent = int((kinds == "message").sum())
    summarised = limit is not None and count > limit
    shown = time_order(trace, limit).tolist() if summarised else range(count)
    records = ((k, trace[k]) for k in shown) if summarised else enumerate(trace.messages)
    computes = trace.computes
    spans = _call_spans(calls) + _record_spans(records) + _compute_spans(computes)
    if summarised:
        spans += _summary_spans(trace, kinds, devices)
    always = [("device", d) for d in range(devices)]
    if computes:
        always += [("device", d, "compute") for d in range(devices)]
    threads = _place(spans, always)
    events = _metadata(threads, bool(computes)) + _complete_events(spans) + _flow_events(spans)
    end_ps = max([s.end_ps for s in spans], default=0)
    other = {"generator": "meshsim", "devices": devices, "messages": sent, "copies": count - sent,
             "end_time_s": end_ps / _PS_PER_S}
    if computes:
        other["computes"] = len(computes)
    if summarised:
        events += _counters(trace, kinds)
        other["summarised"] = {"records": count, "in_full": len(shown), "rule": (
            f"the first {len(shown)} of {count} records in time order have their own spans and flows; every "
            f"device has a summary span of what it sent and one of what it received, and the 'in flight' "
            f"process counts the messages and bytes on the wire")}
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def check_limit(limit: object) -> None:
    """Refuse a `limit` of records in full that is not None or an int >= 0.

    Raises:
        InvalidTypeError: `limit` is neither None nor an int (a bool is not one).
        InvalidArgumentError: `limit` is negative.
    """
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)):
        raise InvalidTypeError(f"limit={limit!r} must be an int >= 0 (how many records to export in full) or None "
                               f"(every record)")
    if limit < 0:
        raise InvalidArgumentError(f"limit={limit!r} must be >= 0 (how many records to export in full), or None for "
                                   f"every record")


def links(trace: Trace) -> set[tuple]:
    """The links the "links" process has a track for when every record is in full: each link of the route of
    every message between two devices (their pair, `(src, dst)`, where the trace has no routes), asked once per
    pair of devices."""
    kinds, src, dst = (trace.column(name) for name in ("kind", "src", "dst"))
    apart = (kinds == "message") & (src != dst)
    pairs = np.unique(np.stack([src[apart], dst[apart]], axis=1), axis=0).tolist()
    found: set[tuple] = set()
    for a, b in pairs:
        found.update(trace.route(a, b) or ((a, b),))
    return found


def write(events: dict, path: str | Path) -> None:
    """Write `events` to `path` as JSON, one event per line (deterministic bytes).

    Raises:
        OSError: `path` cannot be written.
    """
    encode = json.JSONEncoder(separators=(",", ":")).encode  # what json.dumps makes, without a new encoder each
    lines = ",\n".join(map(encode, events["traceEvents"]))
    rest = {k: v for k, v in events.items() if k != "traceEvents"}
    text = '{"traceEvents":[\n' + lines + "\n]," + json.dumps(rest, separators=(",", ":"))[1:] + "\n"
    Path(path).write_text(text)


def _ps(seconds: float) -> int:
    return round(seconds * _PS_PER_S)


def _call_spans(calls: Sequence[CallRecord]) -> list[_Span]:
    """Each device's part in each call, and inside it the wait for its group when there was one."""
    spans = []
    for c in calls:
        track, label = ("device", c.device), f"{c.collective} #{c.call}"
        args = {"collective": c.collective, "call": c.call, "members": list(c.members),
                **({"algorithm": c.algorithm} if c.algorithm is not None else {})}
        spans.append(_Span(track, _ps(c.enter_s), _ps(c.exit_s), label, "collective", args, container=True))
        if c.met_s > c.enter_s:
            spans.append(_Span(track, _ps(c.enter_s), _ps(c.met_s), f"wait for group ({label})", "wait", args))
    return spans


def _record_spans(records: Iterable[tuple[int, MessageRecord]]) -> list[_Span]:
    """A send, a transfer (when it crosses a link) and a receive per message; a span per local copy (each
    record with its index in the trace)."""
    spans = []
    for k, m in records:
        start, posted, arrival = _ps(m.start_time_s), _ps(m.send_time_s), _ps(m.arrival_time_s)
        args = {"message": k, "src": m.src, "dst": m.dst, "size_bytes": m.size_bytes, "collective": m.collective,
                "call": m.call, "detail": _plain(m.detail)}
        if m.kind != "message":
            spans.append(_Span(("device", m.src), posted, arrival, m.kind, "copy", {**args, "kind": m.kind}))
            continue
        spans.append(_Span(("device", m.src), posted, arrival, f"send to {m.dst}", "send", args, flow=("s", k + 1)))
        for link in m.route or ([(m.src, m.dst)] if m.src != m.dst else []):
            spans.append(_Span(("link", link), start, arrival, f"{m.collective} #{m.call}: {m.size_bytes} B",
                               "transfer", args))
        spans.append(_Span(("device", m.dst), start, arrival, f"receive from {m.src}", "receive", args,
                           flow=("f", k + 1)))
    return spans


def _compute_spans(computes: Sequence[ComputeRecord]) -> list[_Span]:
    """A span per piece of local work on its device's compute track."""
    return [_Span(("device", c.device, "compute"), _ps(c.start_s), _ps(c.end_s), c.name or "compute", "compute",
                  {"flops": c.flops, "bytes_accessed": c.bytes_accessed, "transcendentals": c.transcendentals})
            for c in computes]


def _summary_spans(trace: Trace, kinds: np.ndarray, devices: int) -> list[_Span]:
    """Per device, a span over everything it sent (first post to last arrival) and one over everything it
    received (first byte on the wire to last arrival), with the messages and bytes, from the columns."""
    messages = kinds == "message"
    size = trace.column("size_bytes")[messages]
    arrived = trace.column("arrival_time_s")[messages]
    spans = []
    for end, begin, verb in (("src", "send_time_s", "sent"), ("dst", "start_time_s", "received")):
        device, began = trace.column(end)[messages], trace.column(begin)[messages]
        count = np.bincount(device, minlength=devices)
        total = np.bincount(device, weights=size, minlength=devices)
        first, last = np.full(len(count), np.inf), np.full(len(count), -np.inf)
        np.minimum.at(first, device, began)
        np.maximum.at(last, device, arrived)
        firsts, lasts = first.tolist(), last.tolist()
        for d in np.flatnonzero(count).tolist():
            n = int(count[d])
            spans.append(_Span(("device", d), _ps(firsts[d]), _ps(lasts[d]), f"{verb} {n} message{'s' * (n != 1)}",
                               "summary", {"device": d, "messages": n, "size_bytes": int(total[d])}))
    return spans


def _counters(trace: Trace, kinds: np.ndarray) -> list[dict]:
    """The messages and bytes on the wire at up to `COUNTER_POINTS` times, as counter events of the
    "in flight" process (named by its own metadata events)."""
    messages = kinds == "message"
    starts = np.round(trace.column("start_time_s")[messages] * _PS_PER_S).astype(np.int64)
    ends = np.round(trace.column("arrival_time_s")[messages] * _PS_PER_S).astype(np.int64)
    size = trace.column("size_bytes")[messages]
    if 2 * len(starts) <= COUNTER_POINTS:  # every time something starts or arrives
        times = np.unique(np.concatenate([starts, ends]))
    else:  # evenly spaced from the first start to the last arrival
        times = np.unique(np.linspace(starts.min(), ends.max(), COUNTER_POINTS).round().astype(np.int64))
    by_start, by_end = np.argsort(starts, kind="stable"), np.argsort(ends, kind="stable")
    bytes_started = np.concatenate([[0], np.cumsum(size[by_start])])
    bytes_ended = np.concatenate([[0], np.cumsum(size[by_end])])
    began = np.searchsorted(starts[by_start], times, side="right")
    done = np.searchsorted(ends[by_end], times, side="right")
    flying, load = (began - done).tolist(), (bytes_started[began] - bytes_ended[done]).tolist()
    named = [{"ph": "M", "name": "process_name", "pid": _FLIGHT_PID, "tid": 0, "args": {"name": "in flight"}},
             {"ph": "M", "name": "process_sort_index", "pid": _FLIGHT_PID, "tid": 0,
              "args": {"sort_index": _FLIGHT_PID}}]
    return named + [{"ph": "C", "name": "in flight", "pid": _FLIGHT_PID, "ts": t / _PS_PER_US,
                     "args": {"messages": n, "bytes": b}} for t, n, b in zip(times.tolist(), flying, load)]


def _place(spans: list[_Span], always: list[tuple]) -> dict[tuple, list[_Lane]]:
    """Give every span a thread: per track, the first lane where it nests (see `_fits`); lanes become
    threads numbered in track order (devices, then links). Returns each track's lanes in that order (a
    track in `always` gets one even when empty)."""
    tracks: dict[tuple, list[_Lane]] = {track: [] for track in always}
    ends: dict[tuple, list[tuple[int, int]]] = {}  # per track, a heap of (a lane's last leaf end, lane number)
    order = sorted(range(len(spans)), key=lambda i: (spans[i].start_ps, not spans[i].container, -spans[i].end_ps, i))
    for i in order:
        span = spans[i]
        lanes, heap = tracks.setdefault(span.track, []), ends.setdefault(span.track, [])
        while heap and lanes[heap[0][1]].leaf_end_ps != heap[0][0]:
            heapq.heappop(heap)  # an end the lane has since moved past
        # a span fits only after a lane's last leaf: when every lane's ends later, skip the search
        busy = heap and span.start_ps < heap[0][0]
        at = None if busy else next((n for n, lane in enumerate(lanes) if _fits(lane, span)), None)
        if at is None:
            at = len(lanes)
            lanes.append(_Lane())
        _take(lanes[at], span)
        heapq.heappush(heap, (lanes[at].leaf_end_ps, at))
    tracks = {track: tracks[track] or [_Lane()] for track in sorted(tracks, key=lambda t: (t[0] != "device", t[1:]))}
    tid = 0
    for lanes in tracks.values():
        for lane in lanes:
            tid += 1
            for span in lane.spans:
                span.tid = tid
    return tracks


def _fits(lane: _Lane, span: _Span) -> bool:
    """Whether `span` nests in `lane`: a container after everything in it; a leaf after the lane's last
    leaf (strictly, if either lasted under 2 ps, so that a flow's timestamp, at a leaf's middle, is in one
    leaf only), and either
    inside the open container or after it."""
    if span.container:
        return lane.open_end_ps <= span.start_ps and lane.leaf_end_ps <= span.start_ps
    after_leaf = lane.leaf_end_ps < span.start_ps or (
        lane.leaf_end_ps == span.start_ps and not lane.leaf_empty and span.end_ps - span.start_ps >= 2)
    inside = lane.open_start_ps <= span.start_ps and span.end_ps <= lane.open_end_ps
    return after_leaf and (inside or lane.open_end_ps <= span.start_ps)


def _take(lane: _Lane, span: _Span) -> None:
    if span.container:
        lane.open_start_ps, lane.open_end_ps = span.start_ps, span.end_ps
    else:
        lane.leaf_end_ps, lane.leaf_empty = span.end_ps, span.end_ps - span.start_ps < 2
    lane.spans.append(span)


def _metadata(threads: dict[tuple, list[_Lane]], two_tracks: bool = False) -> list[dict]:
    """Names and sort order of the two processes and of every thread (every lane of every track); with
    `two_tracks`, a device's tracks are named "communication" and "compute"."""
    events = []
    for pid, name in ((_DEVICES_PID, "devices"), (_LINKS_PID, "links")):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    tid = 0
    for track in threads:  # in thread order
        pid = _DEVICES_PID if track[0] == "device" else _LINKS_PID
        base = f"device {track[1]}" if track[0] == "device" else f"link {_link_name(track[1])}"
        if two_tracks and track[0] == "device":
            base += f" {track[2]}" if len(track) > 2 else " communication"
        for lane in range(len(threads[track])):
            tid += 1
            name = base if lane == 0 else f"{base} (lane {lane + 1})"
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                           "args": {"sort_index": tid}})
    return events


def _link_name(link: tuple) -> str:
    """`a->b` for a link between two devices, else the id's parts, e.g. `out 3`."""
    if len(link) == 2 and all(isinstance(part, int) for part in link):
        return f"{link[0]}->{link[1]}"
    return " ".join(map(str, link))


def _pid(span: _Span) -> int:
    return _DEVICES_PID if span.track[0] == "device" else _LINKS_PID


def _complete_events(spans: list[_Span]) -> list[dict]:
    """One `X` event per span, by thread, then time, outer spans first."""
    ordered = sorted(spans, key=lambda s: (s.tid, s.start_ps, -s.end_ps, not s.container))
    return [{"ph": "X", "name": s.name, "cat": s.cat, "pid": _pid(s), "tid": s.tid, "ts": s.start_ps / _PS_PER_US,
             "dur": (s.end_ps - s.start_ps) / _PS_PER_US, "args": s.args} for s in ordered]


def _flow_events(spans: list[_Span]) -> list[dict]:
    """A flow start in each send and a flow end in each receive, at the middle of the span (its start when
    it lasted no time), bound to the enclosing slice."""
    events = []
    for s in spans:
        if s.flow is None:
            continue
        phase, flow_id = s.flow
        middle_ps = (s.start_ps + s.end_ps) // 2
        events.append({"ph": phase, "name": "message", "cat": "message", "id": flow_id, "pid": _pid(s),
                       "tid": s.tid, "ts": middle_ps / _PS_PER_US, "bp": "e"})
    events.sort(key=lambda e: (e["id"], e["ph"] != "s"))
    return events


def _plain(value: Any) -> Any:
    """`value` with tuples as lists and numpy scalars as Python numbers, for JSON."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)
