"""Every command counts a run's messages one way (`sim.record.Traffic`, docs/reference/cli.md "Counting
messages"): every message, a device's to itself included; those between devices and their bytes over the
network; local copy steps apart. `run`, `explain`, `draw`, `trace`, a sweep's row and `run --json` say the
same numbers of the same run, and each is checked against a count made record by record."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import scenarios
import sim
from scenarios.cli import main
from scenarios.sweep import measure
from scenarios.sweep._sweep import Point

ROOT = Path(__file__).resolve().parents[1]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# (file, its messages, between devices, bytes over the network, local copies), counted by hand from the call
LIBRARY = [
    ("all_to_all_docs_untiled.toml", 16, 12, 96, 16),  # 4 devices: one block to each member, itself included
    ("all_to_all_seeded.toml", 8, 4, 96, 8),  # groups of 2: 24-byte halves, unpacked after they arrive
    ("moe_all_to_all_tpu_v5e.toml", 64, 56, 114688, 0),  # 8 devices, 2048-byte blocks, no copies
    ("ragged_docs_example.toml", 4, 2, 12, 0),  # 2 devices: 2 rows and 1 row of 4 bytes between them
]


@pytest.fixture(autouse=True)
def wide_plain_output(monkeypatch):
    """Run from the repository root, 200 columns wide, no forced colour."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "200")
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)


def said(capsys, *argv: str) -> str:
    """What `meshsim ARGV` printed, without colour codes, every run of whitespace one space; it must exit 0."""
    assert main(list(argv)) == 0
    return " ".join(_ANSI.sub("", capsys.readouterr().out).split())


def by_records(trace: sim.Trace) -> sim.record.Traffic:
    """The convention read record by record: messages (to itself too), those between devices, their bytes,
    and the records of other kinds (the local copies)."""
    records = list(trace)
    between = [m for m in records if m.kind == "message" and m.src != m.dst]
    return sim.record.Traffic(sum(m.kind == "message" for m in records), len(between),
                              sum(m.size_bytes for m in between), sum(m.kind != "message" for m in records))


@pytest.mark.parametrize("name, messages, between, network_bytes, copies", LIBRARY)
def test_every_command_counts_a_runs_messages_the_same_way(name, messages, between, network_bytes, copies,
                                                             tmp_path, capsys):
    """run's table title, explain's timeline, draw's page heading and trace's line all say the one line of
    `sim.record.Traffic`, whose numbers are the record-by-record count and the hand count (self-sends are
    messages, bytes are those between devices, copies are not messages)."""
    path = f"scenarios/library/{name}"
    trace = scenarios.run(scenarios.load(path)).trace
    traffic = sim.record.Traffic.of(trace)
    assert traffic == by_records(trace) == sim.record.Traffic(messages, between, network_bytes, copies)
    line = str(traffic)
    assert line.startswith(f"{messages} messages ({between} between devices, {network_bytes} bytes over the network)")
    assert ("local copies" in line) == bool(copies)
    assert line in said(capsys, "run", path)
    assert f"In all: {line}." in said(capsys, "explain", path)
    page = tmp_path / "page.html"
    said(capsys, "draw", path, "-o", str(page))
    assert f"; {line}; simulated time" in page.read_text()
    assert f", {line}, simulated time" in said(capsys, "trace", path, "-o", str(tmp_path / "trace.json"))


def test_the_draw_page_counts_copy_steps_apart_from_messages(tmp_path, capsys):
    """The untiled all_to_all's page says 16 messages and 16 local copies, as run and trace do, not the 32
    records of its trace; its table of both is headed as such."""
    page = tmp_path / "page.html"
    said(capsys, "draw", "scenarios/library/all_to_all_docs_untiled.toml", "-o", str(page))
    html = page.read_text()
    assert "16 messages (12 between devices, 96 bytes over the network), 16 local copies" in html
    assert "32 messages" not in html and "<h2>Messages and local copies (32)</h2>" in html


def test_explain_counts_each_step_and_says_what_runs_after_the_last_arrival(capsys):
    """A step of messages counts self-sends as messages and only bytes between devices as network bytes; the
    timeline's table counts each device's messages to and from others; between the last arrival (5.00096 us)
    and the end (5.0092 us) it names the unpack copies."""
    out = said(capsys, "explain", "scenarios/library/all_to_all_seeded.toml")
    assert "8 messages (4 between devices, 96 bytes over the network); the last arrives at 5.00096 us" in out
    assert "device ┃ sent to others ┃ first sent ┃ received from others ┃ last arrival" in out
    assert "0 │ 1 (24 B) │ 0 s │ 1 (24 B) │ 5.00096 us" in out
    assert ("The last message to arrive: device 0 -> device 1, 24 bytes, at 5.00096 us (latency 5 us plus bytes "
            "/ bandwidth). After it, 6 local copies (unpack) still run on the devices; the last ends at 5.0092 us. "
            "simulated end time: 5.0092 us") in out


def test_a_program_run_is_counted_the_same_way(tmp_path, capsys):
    """A `[program]` scenario's passes (run, explain), its call panels (draw) and its JSON say the convention."""
    path = "scenarios/library/transpose_2_psum_mapped.toml"
    scenario = scenarios.load(path, allow_code=True)
    forward = scenarios.run_forward(scenario)
    traffic = sim.record.Traffic.of(forward.trace)
    assert traffic == by_records(forward.trace)
    assert f"forward: {traffic}, simulated time" in said(capsys, "run", "--allow-code", path)
    picture = sim.record.draw_svg(forward.faced(), False)
    assert traffic.words(copies=False) in picture
    document = json.loads(said(capsys, "run", "--allow-code", "--json", path))
    assert {k: document["forward"][k] for k in ("messages", "between_devices", "network_bytes")} == {
        "messages": traffic.messages, "between_devices": traffic.between, "network_bytes": traffic.network_bytes}


def test_a_sweep_row_counts_self_sends_as_run_does():
    """A sweep's all_to_all over 4 devices sends 16 messages (12 between devices, 12 blocks of 1024 bytes over
    the network), as `meshsim run` counts them, not the 12 between devices alone."""
    row = measure(Point("all_to_all", {"x": 4}, None, 4096, {}, "direct", "float32", 0))
    assert row["error"] is None
    assert (row["messages"], row["between_devices"], row["bytes_sent"]) == (16, 12, 12 * 1024)
