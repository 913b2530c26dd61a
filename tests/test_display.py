"""How a `sim.Run` and a `scenarios.ScenarioResult` show themselves: a one-line text form in a terminal and a
bounded HTML form in a notebook (`_repr_html_`), both parsed here; and the data of the draw page's stepper
(the inline JSON block) for every library collective and a big mesh, without a browser."""

from __future__ import annotations

import json
import re
import tomllib
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from rich.color import Color

import collectives
import scenarios
import sim
from scenarios.cli.render import PALETTE, page
from sim.record import PALETTE_HEX, seconds

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "scenarios" / "library"


class Elements(HTMLParser):
    """Every start tag of a document with its attributes; fails on a tag closed that was never opened."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.open: list[str] = []
        self.text: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in ("meta", "br"):  # HTML's void elements here; SVG's empty ones come as start-end tags
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        assert tag in self.open, f"</{tag}> closes nothing"
        while self.open.pop() != tag:
            pass

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, tag: str, **attrs: str) -> list[dict]:
        """The attributes of every `tag` element whose attributes include `attrs` (a class among its classes)."""
        def matches(found: dict) -> bool:
            return all(value in (found.get("class") or "").split() if key == "class_" else found.get(key) == value
                       for key, value in attrs.items())
        return [found for name, found in self.tags if name == tag and matches(found)]


def psum_run() -> sim.Run:
    f = sim.shard_map(lambda x: collectives.psum(x, "x"), mesh=sim.Mesh({"x": 4}), in_specs=sim.P("x"),
                      out_specs=sim.P())
    f(np.arange(8.0))
    return f.last_run


def big_run(devices: int = 64, rows: int = 1) -> sim.Run:
    f = sim.shard_map(lambda x: collectives.all_to_all(x, "x", 0, 0, tiled=True), mesh=sim.Mesh({"x": devices}),
                      in_specs=sim.P("x"), out_specs=sim.P("x"))
    f(np.zeros((devices * devices * rows, 2), np.float32))
    return f.last_run


def test_a_run_says_itself_in_one_line():
    """repr and str of a Run: one short line with its devices, messages, bytes over the network, calls and end
    time, each counted here from the trace."""
    run = psum_run()
    between = [m for m in run.trace if m.src != m.dst and m.kind == "message"]
    line = repr(run)
    assert str(run) == line and "\n" not in line and len(line) < 200
    assert line.startswith("Run(4 devices, ") and f"{len(run.trace.sent)} messages" in line
    assert f"{len(between)} between devices, {sum(m.size_bytes for m in between)} B over the network" in line
    assert "1 collective call," in line and line.endswith(f"ends at {seconds(run.end_time_s)})")


def test_a_big_run_says_itself_in_one_line_quickly():
    """A 64-device all_to_all of 1 MiB blocks still says itself in one short line; nothing of its data shows."""
    run = big_run(64, rows=8)
    line = repr(run)
    assert "\n" not in line and len(line) < 200 and "64 devices, 4096 messages (4032 between devices" in line


def test_a_runs_html_has_its_timeline_and_message_table():
    """A Run's `_repr_html_`: a well-formed fragment with its summary, a bar per message (by index) and a
    table row per message, each row's cells the message's own."""
    run = psum_run()
    html = run._repr_html_()
    parsed = Elements(html)
    assert html.startswith('<div class="meshsim-run">') and "<script" not in html
    assert repr(run)[4:-1] in html
    bars = parsed.having("rect", class_="message")
    assert sorted(int(b["data-message"]) for b in bars) == list(range(len(run.trace)))
    rows = [attrs for tag, attrs in parsed.tags if tag == "tr" and "data-message" in attrs]
    assert [int(r["data-message"]) for r in rows] == list(range(len(run.trace)))
    assert "more messages not listed" not in html


def test_a_big_runs_html_is_bounded_and_says_so():
    """4,096 messages: 1,000 bars and 200 table rows, the timeline's aggregation and both cuts said, well under
    a megabyte."""
    run = big_run()
    html = run._repr_html_()
    parsed = Elements(html)
    assert len(html) < 600_000
    assert len(parsed.having("rect", class_="message")) == 1000
    assert len([a for t, a in parsed.tags if t == "tr" and "data-message" in a]) == 200
    text = " ".join(parsed.text)
    assert "3896 more messages not listed (the first 200 are)" in text
    assert "1000 of 4096 messages drawn" in text and "drawn on its sender's lane" in text


def test_a_scenario_result_says_itself_in_one_line(tmp_path):
    """repr of a ScenarioResult: its title, collective and counts on one line, however big its arrays are."""
    result = scenarios.run(scenarios.load(str(LIBRARY / "moe_dispatch.toml")))
    line = repr(result)
    between = [m for m in result.trace if m.src != m.dst]
    assert line.startswith("ScenarioResult('MoE dispatch: 4 devices route tokens to experts unevenly': "
                           f"ragged_all_to_all; 4 devices, {len(result.trace)} messages ({len(between)} between "
                           f"devices, {sum(m.size_bytes for m in between)} B over the network)")
    assert "\n" not in line and str(result) == line
    path = tmp_path / "big.toml"
    path.write_text('title = "big"\n[mesh]\naxes = {x = 4}\n[collective]\nop = "all_to_all"\naxis_name = "x"\n'
                    "split_axis = 0\nconcat_axis = 0\ntiled = true\n[inputs]\nseed = 0\nshape = [40000, 8]\n")
    assert len(repr(scenarios.run(scenarios.load(str(path))))) < 200


def test_a_scenario_results_html_is_the_picture_with_its_tables():
    """The docs' example in a notebook: the picture (an arrow per message), the timeline, the devices table
    with each device's row and the message table, no script."""
    result = scenarios.run(scenarios.load(str(LIBRARY / "ragged_docs_example.toml")))
    html = result._repr_html_()
    parsed = Elements(html)
    assert "<script" not in html and html.count("<svg") == 2
    assert len(parsed.having("path", class_="arrow")) == len(result.trace) == 4
    assert len(parsed.having("rect", class_="message")) == 4
    assert [a["data-device"] for t, a in parsed.tags if t == "tr" and "data-device" in a] == ["0", "1"]
    assert "ragged_all_to_all: the docs' two-device example" in " ".join(parsed.text)


def test_a_big_scenario_results_html_is_bounded_and_says_so(tmp_path):
    """64 devices: no picture (said, with the command that draws it), 16 device rows, 100 message rows."""
    path = tmp_path / "big.toml"
    path.write_text('title = "big"\n[mesh]\naxes = {x = 64}\n[collective]\nop = "all_to_all"\naxis_name = "x"\n'
                    "split_axis = 0\nconcat_axis = 0\ntiled = true\n[inputs]\nseed = 0\nshape = [64, 2]\n")
    html = scenarios.run(scenarios.load(str(path)))._repr_html_()
    parsed = Elements(html)
    text = " ".join(parsed.text)
    assert len(html) < 800_000 and html.count("<svg") == 1 and not parsed.having("path", class_="arrow")
    assert "the picture is left out at 64 devices" in text and "meshsim draw" in text
    assert len([a for t, a in parsed.tags if t == "tr" and "data-device" in a]) == 16
    assert "48 more devices not listed" in text
    assert len([a for t, a in parsed.tags if t == "tr" and "data-message" in a]) == 100


def test_the_pictures_colours_are_the_terminals():
    """The hex palette in `sim.record` is rich's own rendering of `meshsim run`'s colour names."""
    assert tuple(Color.parse(name).get_truecolor().hex for name in PALETTE) == PALETTE_HEX


def steps_of(html: str) -> dict:
    block = re.search(r'<script type="application/json" id="steps-data">(.*?)</script>', html, re.S)
    assert block, "no steps block"
    return json.loads(block.group(1))


COLLECTIVE_FILES = [p for p in sorted(LIBRARY.glob("*.toml")) if "collective" in tomllib.loads(p.read_text())]


@pytest.mark.parametrize("path", COLLECTIVE_FILES, ids=lambda p: p.stem)
def test_every_library_collectives_page_has_a_step_per_message(path):
    """Each `[collective]` library scenario's page: one step per message, each message once, in time order,
    with its ends, a caption naming them and a cursor inside the timeline."""
    result = scenarios.run(scenarios.load(str(path)))
    data = steps_of(page(result))
    trace = result.trace
    assert sorted(s["message"] for s in data["steps"]) == list(range(len(trace)))
    times = [(trace[s["message"]].send_time_s, trace[s["message"]].start_time_s, trace[s["message"]].arrival_time_s)
             for s in data["steps"]]
    assert times == sorted(times)
    for s in data["steps"]:
        m = trace[s["message"]]
        assert (s["src"], s["dst"]) == (m.src, m.dst) and f"device {m.src}" in s["caption"]
        assert f"{m.size_bytes} bytes" in s["caption"] and 150 <= s["cursor"][0] <= s["cursor"][1] <= 770
        assert s["rows"] == (list(m.detail["rows"]) if "rows" in m.detail else None)


def test_the_steps_block_cannot_close_its_script(tmp_path):
    """A title with `</script>` in it stays text (escaped), so the page's scripts and steps block stay whole."""
    path = tmp_path / "odd.toml"
    text = (LIBRARY / "ragged_docs_example.toml").read_text()
    path.write_text(text.replace('title = "', 'title = "</script><b>', 1))
    html = page(scenarios.run(scenarios.load(str(path))))
    assert "</script><b>" not in html and steps_of(html)["steps"]


def test_draws_help_describes_the_stepper_with_the_pages_limits():
    """`meshsim draw --help` describes the stepper, its controls and keys, and the limits the page uses."""
    from scenarios.cli.draw import DESCRIPTION
    from scenarios.picture._page import PICTURE_DEVICES
    from sim.record._html import PAIR_LANES

    words = " ".join(DESCRIPTION.split())
    assert f"past {PICTURE_DEVICES} devices" in words and f"past {PAIR_LANES} pairs" in words
    assert all(w in words for w in ("first, back, play/pause, forward and last", "right and left arrows",
                                    "input_offsets[i]", "recv_sizes[j]", "no network"))
