"""Timelines in the Chrome / Perfetto trace-event format: `sim.Run.to_perfetto` and `meshsim trace`.

`problems(doc)` is a small validator of the format's JSON object form, as far as the exporter uses it:
complete events (`X`), metadata (`M`), flows (`s`/`f`) and counters (`C`, in a summarised trace). Every
test checks its output with it, and one test shows that it rejects broken event lists.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import collectives
import scenarios
import sim
from layouts import Layout
from scenarios.cli import main
from sim import P

ROOT = Path(__file__).resolve().parents[1]
DOCS = "scenarios/library/ragged_docs_example.toml"
EPS_US = 1e-6  # the exporter's times are whole picoseconds
_REQUIRED = {"X": {"name": str, "cat": str, "pid": int, "tid": int, "ts": float, "dur": float},
             "M": {"name": str, "pid": int, "args": dict},
             "s": {"name": str, "cat": str, "id": int, "pid": int, "tid": int, "ts": float},
             "f": {"name": str, "cat": str, "id": int, "pid": int, "tid": int, "ts": float},
             "C": {"name": str, "pid": int, "ts": float, "args": dict}}
_METADATA = {"process_name": "name", "thread_name": "name", "process_sort_index": "sort_index",
             "thread_sort_index": "sort_index"}


# ------------------------------------------------------------------------------------------------ the validator

def problems(doc: Any) -> list[str]:
    """Everything in `doc` that breaks the trace-event format (as this exporter uses it); [] when valid."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["the document must be an object with a traceEvents list"]
    found = [] if doc.get("displayTimeUnit", "ms") in ("ms", "ns") else ["displayTimeUnit must be 'ms' or 'ns'"]
    for k, event in enumerate(doc["traceEvents"]):
        found += [f"event {k}: {p}" for p in _event_problems(event)]
    if found:
        return found  # the checks below read the fields checked above
    events = doc["traceEvents"]
    return _naming_problems(events) + _nesting_problems(events) + _flow_problems(events)


def _is(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return False
    if kind is float:
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, kind)


def _event_problems(event: Any) -> list[str]:
    """Keys and types one event needs for its `ph`; times non-negative."""
    if not isinstance(event, dict) or event.get("ph") not in _REQUIRED:
        return [f"ph={event.get('ph') if isinstance(event, dict) else event!r} must be one of {sorted(_REQUIRED)}"]
    found = [f"{key}={event.get(key)!r} must be a {kind.__name__}" for key, kind in _REQUIRED[event["ph"]].items()
             if not _is(event.get(key), kind)]
    found += [f"{key}={event[key]} must be >= 0" for key in ("ts", "dur")
              if _is(event.get(key), float) and event[key] < 0]
    if event["ph"] in "sf" and event.get("bp", "e") != "e":
        found.append(f"bp={event['bp']!r} must be 'e'")
    if event["ph"] == "C" and not all(_is(v, float) and v >= 0 for v in event.get("args", {}).values()):
        found.append(f"counter args={event.get('args')!r} must be non-negative numbers")
    if event["ph"] == "M":
        field = _METADATA.get(event.get("name"))
        if field is None or not _is(event.get("args", {}).get(field), str if field == "name" else int):
            found.append(f"metadata {event.get('name')!r} must be one of {sorted(_METADATA)} with args.{field}")
    return found


def _naming_problems(events: list[dict]) -> list[str]:
    """Every pid and (pid, tid) an event uses is named by a metadata event."""
    processes = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    used = {(e["pid"], e["tid"]) for e in events if e["ph"] not in "MC"}
    counted = {e["pid"] for e in events if e["ph"] == "C"}  # a counter belongs to its process, not a thread
    return ([f"pid {pid} has no process_name" for pid in sorted(({p for p, _ in used} | counted) - processes)]
            + [f"pid {p} tid {t} has no thread_name" for p, t in sorted(used - threads)])


def _slices(events: list[dict]) -> dict[tuple[int, int], list[dict]]:
    by_thread: dict[tuple[int, int], list[dict]] = {}
    for e in events:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    return {k: sorted(v, key=lambda e: (e["ts"], -e["dur"])) for k, v in by_thread.items()}


def _nesting_problems(events: list[dict]) -> list[str]:
    """The complete events of one thread nest: each one ends before the one enclosing it, or starts after."""
    found = []
    for (pid, tid), slices in _slices(events).items():
        stack: list[dict] = []
        for s in slices:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= s["ts"] + EPS_US:
                stack.pop()
            if stack and s["ts"] + s["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + EPS_US:
                found.append(f"pid {pid} tid {tid}: {s['name']!r} at {s['ts']} crosses {stack[-1]['name']!r}")
            stack.append(s)
    return found


def innermost(events: list[dict], flow: dict) -> dict | None:
    """The deepest complete event on the flow's thread that contains its timestamp: with nested slices in
    (start, longest first, file order) order, the last one that contains it (a slice as long as its parent
    that comes after it in the file is its child, as viewers read it)."""
    around = [s for s in _slices(events).get((flow["pid"], flow["tid"]), [])
              if s["ts"] - EPS_US <= flow["ts"] <= s["ts"] + s["dur"] + EPS_US]
    return around[-1] if around else None


def _flow_problems(events: list[dict]) -> list[str]:
    """Every flow has one start and one finish with its id, the finish no earlier, each inside a slice of its
    own thread."""
    ends: dict[int, dict[str, list[dict]]] = {}
    for e in events:
        if e["ph"] in "sf":
            ends.setdefault(e["id"], {"s": [], "f": []})[e["ph"]].append(e)
    found = []
    for flow_id, pair in sorted(ends.items()):
        if len(pair["s"]) != 1 or len(pair["f"]) != 1:
            found.append(f"flow id {flow_id}: {len(pair['s'])} starts and {len(pair['f'])} finishes, must be 1 and 1")
            continue
        start, finish = pair["s"][0], pair["f"][0]
        if finish["ts"] < start["ts"]:
            found.append(f"flow id {flow_id} finishes at {finish['ts']}, before it starts at {start['ts']}")
        found += [f"flow id {flow_id}: its {e['ph']} at {e['ts']} is in no slice of pid {e['pid']} tid {e['tid']}"
                  for e in (start, finish) if innermost(events, e) is None]
    return found


# ------------------------------------------------------------------------------------------------------- runs

def docs_run() -> sim.Run:
    result = scenarios.run(scenarios.load(ROOT / DOCS))
    return result.run


def strided_run() -> sim.Run:
    """all_to_all of column blocks of row-major arrays: every chunk is packed and unpacked."""
    def body(b: Any) -> Any:
        y = sim.with_layout_constraint(b[0], Layout((0, 1)))
        return collectives.all_to_all(y, "x", 1, 1, tiled=True, out_layout=Layout((0, 1)))[None]

    return sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x")).run(
        np.arange(32.0).reshape(2, 4, 4))


def late_run() -> sim.Run:
    """Device 0 relays out its block (a timed copy) before a psum; the others wait for it there."""
    def body(b: Any) -> Any:
        x = b[0]
        if sim.current().device == 0:
            x = sim.with_layout_constraint(x, Layout((1, 0)))
        return collectives.psum(x, "x")[None]

    return sim.shard_map(body, mesh=sim.Mesh({"x": 4}), in_specs=P("x"), out_specs=P("x")).run(
        np.arange(64.0).reshape(4, 4, 4))


def by_cat(doc: dict, cat: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == cat]


def thread_names(doc: dict) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


@pytest.mark.parametrize("make", [docs_run, strided_run, late_run], ids=["docs", "strided", "late"])
def test_exported_runs_are_valid_trace_events(make):
    """The export of a ragged exchange, a strided all_to_all and a psum with a late device breaks no rule of
    the format: keys and types per `ph`, non-negative times, nested slices, paired flows inside slices, every
    process and thread named."""
    assert problems(make().trace_events()) == []


def test_one_send_transfer_receive_and_flow_per_message():
    """Each message gives one send on its sender, one receive on its receiver, one transfer on its link when
    it crosses the network, and one flow whose ends lie in that send and that receive and no deeper slice."""
    run = docs_run()
    doc = run.trace_events()
    sent = run.trace.sent
    names = thread_names(doc)
    for cat, device in (("send", "src"), ("receive", "dst")):
        spans = by_cat(doc, cat)
        assert sorted(e["args"]["message"] for e in spans) == list(range(len(sent)))
        for e in spans:
            assert names[(e["pid"], e["tid"])].split(" (")[0] == f"device {e['args'][device]}"
    transfers = by_cat(doc, "transfer")
    assert len(transfers) == sum(m.src != m.dst for m in sent) == 2
    for e in transfers:
        m = sent[e["args"]["message"]]
        assert names[(e["pid"], e["tid"])] == f"link {m.src}->{m.dst}"
        assert e["ts"] == pytest.approx(m.start_time_s * 1e6) and e["dur"] == pytest.approx(
            (m.arrival_time_s - m.start_time_s) * 1e6)
    flows = [e for e in doc["traceEvents"] if e["ph"] in "sf"]
    assert Counter(e["id"] for e in flows) == {k + 1: 2 for k in range(len(sent))}
    for e in flows:
        slice_ = innermost(doc["traceEvents"], e)
        assert slice_["cat"] == ("send" if e["ph"] == "s" else "receive")
        assert slice_["args"]["message"] == e["id"] - 1


def test_strided_layouts_show_their_copies():
    """Every pack and unpack of the run is a copy span on its device, named by its kind, with its timing."""
    run = strided_run()
    doc = run.trace_events()
    copies = [m for m in run.trace if isinstance(m, sim.CopyRecord)]
    spans = by_cat(doc, "copy")
    assert sorted(e["name"] for e in spans) == sorted(m.kind for m in copies)
    assert {"pack", "unpack"} <= {e["name"] for e in spans}
    assert all(e["dur"] > 0 for e in spans)
    assert doc["otherData"]["copies"] == len(copies)


def test_waits_show_who_waited_for_whom():
    """Each device's part in each call is a collective span from reaching the call to the end of its part;
    devices that reached the psum before device 0 (busy with a relayout) have a wait span ending when it came."""
    run = late_run()
    doc = run.trace_events()
    calls = by_cat(doc, "collective")
    assert len(calls) == len(run.calls) and {e["name"] for e in calls} == {"relayout #0", "psum #0"}
    relayout = next(c for c in run.calls if c.collective == "relayout")
    waits = by_cat(doc, "wait")
    names = thread_names(doc)
    assert sorted(names[(e["pid"], e["tid"])] for e in waits) == ["device 1", "device 2", "device 3"]
    for e in waits:
        assert e["ts"] == 0.0 and e["dur"] == pytest.approx(relayout.exit_s * 1e6)
    for record in run.calls:
        assert record.enter_s <= record.met_s <= record.exit_s
    assert max(c.exit_s for c in run.calls) == pytest.approx(run.end_time_s)


def test_the_same_run_gives_the_same_bytes(tmp_path):
    """Two runs of one scenario write byte-identical files, and `to_perfetto` returns what it wrote."""
    first = docs_run().to_perfetto(tmp_path / "a.json")
    docs_run().to_perfetto(tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert json.loads((tmp_path / "a.json").read_text()) == first


BROKEN = [
    ("no-trace-events", lambda doc: doc.pop("traceEvents"), "traceEvents list"),
    ("unknown-ph", lambda doc: doc["traceEvents"].append({"ph": "Q"}), r"ph='Q' must be one of"),
    ("missing-dur", lambda doc: _first(doc, "X").pop("dur"), r"dur=None must be a float"),
    ("negative-ts", lambda doc: _first(doc, "X").update(ts=-1.0), r"ts=-1.0 must be >= 0"),
    ("string-ts", lambda doc: _first(doc, "s").update(ts="0"), r"ts='0' must be a float"),
    ("bool-pid", lambda doc: _first(doc, "X").update(pid=True), r"pid=True must be a int"),
    ("bad-metadata", lambda doc: _first(doc, "M").update(args={}), r"metadata 'process_name' must be"),
    ("unnamed-thread", lambda doc: _first(doc, "X").update(tid=999), r"pid 1 tid 999 has no thread_name"),
    ("lost-finish", lambda doc: doc["traceEvents"].remove(_first(doc, "f")), r"1 starts and 0 finishes"),
    ("flow-outside-slices", lambda doc: _first(doc, "f").update(ts=1e6), r"is in no slice"),
    ("flow-backwards", lambda doc: _first(doc, "s").update(ts=_first(doc, "f")["ts"] + 1e-3), r"before it starts"),
    ("crossing-slices", lambda doc: _first(doc, "X").update(ts=0.5), r"crosses"),
    ("unnamed-counter", lambda doc: doc["traceEvents"].append(
        {"ph": "C", "name": "in flight", "pid": 9, "ts": 0.0, "args": {"messages": 1}}), r"pid 9 has no process_name"),
    ("negative-counter", lambda doc: doc["traceEvents"].append(
        {"ph": "C", "name": "in flight", "pid": 1, "ts": 0.0, "args": {"messages": -1}}), r"non-negative numbers"),
]


def _first(doc: dict, ph: str) -> dict:
    """The first event of phase `ph` (for flows: of the message that crosses the network, with a real span)."""
    events = [e for e in doc["traceEvents"] if e["ph"] == ph]
    return next((e for e in events if ph not in "sf" or e["ts"] > 0), events[0])


@pytest.mark.parametrize("name, breaks, match", BROKEN, ids=[b[0] for b in BROKEN])
def test_the_validator_rejects_broken_events(name, breaks, match):
    """The validator is not a rubber stamp: each deliberate break of a valid export is reported."""
    doc = docs_run().trace_events()
    assert problems(doc) == []
    breaks(doc)
    found = problems(doc)
    assert found and any(re.search(match, p) for p in found), found


# ---------------------------------------------------------------------------------------------- the command

def test_trace_command_writes_a_valid_file(tmp_path, capsys, monkeypatch):
    """`meshsim trace` writes the scenario's run, equal to `Run.to_perfetto`, and prints one summary line
    with the counts, the simulated time and how to open the file."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "trace.json"
    assert main(["trace", DOCS, "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert problems(doc) == [] and doc == docs_run().trace_events()
    line, = capsys.readouterr().out.splitlines()
    assert f"wrote {out}: {len(doc['traceEvents'])} trace events, 2 devices, 2 links, 4 messages" in line
    assert "simulated time 1.00008 us" in line and "ui.perfetto.dev" in line


@pytest.mark.parametrize("name", ["moe_all_to_all_tpu_v5e.toml", "psum_ring.toml", "all_to_all_seeded.toml",
                                  "ragged_docs_example.toml"])
def test_trace_command_counts_the_links_messages_crossed(name, tmp_path, capsys, monkeypatch):
    """The line's links are the link tracks of the file (each link of every route a message between devices
    took: 20 on the 2 x 4 TPU v5e slice, where 56 pairs of devices exchange messages over routes of 1 to 4
    hops), not the pairs of devices that exchanged messages."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "trace.json"
    assert main(["trace", f"scenarios/library/{name}", "-o", str(out)]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    tracks = {re.sub(r" \(lane \d+\)$", "", e["args"]["name"]) for e in events
              if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"].startswith("link ")}
    assert f", {len(tracks)} link{'s' * (len(tracks) != 1)}, " in capsys.readouterr().out
    if name.startswith("moe"):
        assert len(tracks) == 20


def test_trace_command_runs_program_scenarios(tmp_path, capsys, monkeypatch):
    """A `[program]` scenario's forward run is traced: its psum's messages, each with its flow."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "program.json"
    assert main(["trace", "--allow-code", "scenarios/library/transpose_2_psum_mapped.toml", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert problems(doc) == [] and by_cat(doc, "send") and len(by_cat(doc, "send")) == doc["otherData"]["messages"]


def test_the_help_lists_trace(capsys):
    """`meshsim --help` lists the trace command with its one-line help."""
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert "trace" in capsys.readouterr().out


def _broken_scenario(tmp_path: Path) -> str:
    path = tmp_path / "broken.toml"
    path.write_text((ROOT / DOCS).read_text().replace('op = "ragged_all_to_all"', 'op = "foo"'))
    return str(path)


BAD_ARGUMENTS = [
    ("unwritable-directory", lambda tmp: [DOCS, "-o", str(tmp / "missing" / "t.json")], r"-o .*does not exist"),
    ("output-is-a-directory", lambda tmp: [DOCS, "-o", str(tmp)], r"-o .*: is a directory"),
    ("unknown-op", lambda tmp: [_broken_scenario(tmp), "-o", str(tmp / "t.json")], r"broken.toml:\d+: .*op='foo'"),
    ("missing-file", lambda tmp: [str(tmp / "nope.toml"), "-o", str(tmp / "t.json")], r"nope.toml: cannot read"),
    ("python-scenario", lambda tmp: ["scenarios/library/layout_guide.py", "-o", str(tmp / "t.json")],
     r"layout_guide.py: meshsim trace takes TOML scenarios"),
]


@pytest.mark.parametrize("name, argv, match", BAD_ARGUMENTS, ids=[b[0] for b in BAD_ARGUMENTS])
def test_trace_command_bad_input_exits_2_with_one_message(name, argv, match, tmp_path, capsys, monkeypatch):
    """Bad input exits 2 with one `meshsim: error:` line naming what is wrong, no traceback, no file written."""
    monkeypatch.chdir(ROOT)
    assert main(["trace", *argv(tmp_path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("meshsim: error: "), captured.err
    assert re.search(match, lines[0]), lines[0]
    assert "Traceback" not in captured.err and captured.out == ""
    assert not (tmp_path / "t.json").exists()


def test_trace_command_without_output_exits_2(capsys):
    """Leaving out `-o` is a usage error: exit 2 and argparse's message naming -o."""
    with pytest.raises(SystemExit) as exit_:
        main(["trace", DOCS])
    assert exit_.value.code == 2
    assert "the following arguments are required: -o/--output" in capsys.readouterr().err


def test_trace_columns_and_single_records_equal_the_records():
    """`trace[k]`, `column`, `detail_column` and `detail_keys` read what the materialised records hold, on a
    run with batched rows (all_gather), single messages (ppermute) and local copies."""
    import numpy as np

    import collectives
    import sim

    mesh = sim.Mesh({"x": 4})

    def body(v):
        gathered = collectives.all_gather(v, "x", tiled=True)
        return collectives.ppermute(gathered, "x", [(i, (i + 1) % 4) for i in range(4)])

    run = sim.shard_map(body, mesh=mesh, in_specs=sim.P("x"), out_specs=sim.P("x")).run(np.arange(8.0))
    trace = run.trace
    made = [trace[k] for k in range(len(trace))]
    assert trace[-1] == made[-1] and made == list(trace.messages)
    for name in ("src", "dst", "size_bytes", "send_time_s", "arrival_time_s", "call", "kind", "collective"):
        assert trace.column(name).tolist() == [getattr(m, name) for m in made], name
    assert trace.detail_column("rows") == [m.detail.get("rows") for m in made]
    assert trace.detail_keys() == {key for m in made for key in m.detail}
    with pytest.raises(IndexError, match="out of range"):
        trace[len(trace)]


@pytest.mark.parametrize("limit, error, match", [
    (-1, sim.InvalidArgumentError, r"limit=-1 must be >= 0"),
    (True, sim.InvalidTypeError, r"limit=True must be an int >= 0 .* or None"),
    (2.5, sim.InvalidTypeError, r"limit=2\.5 must be an int >= 0 .* or None"),
    ("3", sim.InvalidTypeError, r"limit='3' must be an int >= 0 .* or None"),
], ids=["negative", "bool", "float", "str"])
def test_a_limit_that_is_not_none_or_an_int_of_at_least_0_is_refused_naming_it(limit, error, match, tmp_path):
    """`trace_events(limit)` and `to_perfetto(path, limit)` take None or an int >= 0 (not a bool): anything
    else is refused naming `limit` and the rule, before a file is written; 0 summarises every record."""
    run = docs_run()
    with pytest.raises(error, match=match):
        run.trace_events(limit)
    with pytest.raises(error, match=match):
        run.to_perfetto(tmp_path / "trace.json", limit)
    assert not (tmp_path / "trace.json").exists()
    assert run.trace_events(0)["otherData"]["summarised"]["in_full"] == 0
