"""`meshsim draw`: the SVG's elements (parsed as XML), the HTML page, bad input, and both in headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import collectives
import scenarios
from scenarios.cli import main
from scenarios.cli.render import PALETTE_HEX, picture

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "scenarios" / "library"
SVG = "{http://www.w3.org/2000/svg}"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic")


def drawn(name: str, tmp_path: Path, suffix: str = ".svg") -> Path:
    """Draw the library scenario `name` into `tmp_path` through the command line; return the file."""
    out = tmp_path / f"{name}{suffix}"
    assert main(["draw", str(LIBRARY / f"{name}.toml"), "-o", str(out)]) == 0
    return out


def elements(svg: Path, tag: str, cls: str) -> list[ET.Element]:
    """The `tag` elements of `svg` whose class list holds `cls`."""
    root = ET.parse(svg).getroot()
    return [e for e in root.iter(SVG + tag) if cls in e.get("class", "").split()]


def test_svg_has_a_row_per_strip_row_an_arrow_per_message_and_a_legend(tmp_path):
    """MoE dispatch: 6 operand and 8 result rows per device, one arrow per message (to the rows it wrote), the
    kept rows hatched, each device's empty slice marked, and a legend naming every device and each mark."""
    result = scenarios.run(scenarios.load(str(LIBRARY / "moe_dispatch.toml")))
    svg = drawn("moe_dispatch", tmp_path)
    assert len(elements(svg, "rect", "row")) == 4 * (6 + 8)
    arrows = elements(svg, "path", "arrow")
    assert sorted(int(a.get("data-message")) for a in arrows) == list(range(len(result.trace)))
    for arrow in arrows:
        message = result.trace[int(arrow.get("data-message"))]
        assert (int(arrow.get("data-src")), int(arrow.get("data-dst"))) == (message.src, message.dst)
        assert arrow.get("stroke") == PALETTE_HEX[message.src]
    kept = sum(source is None for p in result.provenance for source in p.sources)
    assert len(elements(svg, "rect", "kept")) == kept == 12
    assert len(elements(svg, "g", "empty-slice")) == 4  # every device routes nothing to one expert
    legend = " ".join(ET.parse(svg).getroot().find(f".//{SVG}g[@class='legend']").itertext())
    assert all(f"device {d}" in legend for d in range(4))
    assert all(mark in legend for mark in ("kept from output", "not sent", "empty slice"))


def test_svg_rows_carry_their_values_and_sender_colours(tmp_path):
    """The docs' example: device 0's result reads 1, 3, 0, 0, its first two rows in devices 0 and 1's colours."""
    svg = drawn("ragged_docs_example", tmp_path)
    root = ET.parse(svg).getroot()
    texts = [t.text for t in root.iter(SVG + "text")]
    assert texts.count("3") >= 2 and "device 0" in texts and "device 1" in texts
    fills = [r.get("fill") for r in elements(svg, "rect", "row")]
    assert fills[3:5] == [PALETTE_HEX[0], PALETTE_HEX[1]]  # after device 0's three operand rows


@pytest.mark.parametrize("name", ["all_to_all_seeded", "all_gather_groups"])
def test_concat_and_gather_collectives_get_an_arrow_per_message(name, tmp_path):
    """all_to_all and all_gather: rows along the concat or gather axis, one arrow per message, none kept."""
    result = scenarios.run(scenarios.load(str(LIBRARY / f"{name}.toml")))
    svg = drawn(name, tmp_path)
    assert len(elements(svg, "path", "arrow")) == sum(m.kind == "message" for m in result.trace)
    assert not elements(svg, "rect", "kept")


@pytest.mark.parametrize("name", ["psum_ring", "ppermute_shift"])
def test_other_collectives_get_device_boxes_and_an_arrow_per_pair(name, tmp_path):
    """Collectives whose messages do not land on rows: a box per device, one arrow per sender and receiver."""
    result = scenarios.run(scenarios.load(str(LIBRARY / f"{name}.toml")))
    svg = drawn(name, tmp_path)
    assert len(elements(svg, "g", "device-box")) == result.scenario.mesh.size
    pairs = {(m.src, m.dst) for m in result.trace if m.src != m.dst}
    arrows = elements(svg, "path", "arrow")
    assert len(arrows) == len(pairs)
    assert sorted(int(k) for a in arrows for k in a.get("data-messages").split()) == \
        [k for k, m in enumerate(result.trace) if m.src != m.dst]


def _first_library_file_of_each_collective() -> dict[str, str]:
    """One `[collective]` library file (its stem) for each collective that has one."""
    found: dict[str, str] = {}
    for path in sorted(LIBRARY.glob("*.toml")):
        found.setdefault(tomllib.loads(path.read_text()).get("collective", {}).get("op"), path.stem)
    found.pop(None, None)
    return found


_EACH = _first_library_file_of_each_collective()


@pytest.mark.parametrize("op", sorted(collectives.REGISTRY))
def test_every_collectives_library_scenario_draws(op, tmp_path):
    """`meshsim draw` draws a library scenario of every registered collective, those without arrays too:
    rows of its arrays, or a box per device labelled with its first array (or 'no arrays')."""
    assert op in _EACH, f"no scenario file in scenarios/library/ calls {op}"
    svg = drawn(_EACH[op], tmp_path)
    result = scenarios.run(scenarios.load(str(LIBRARY / f"{_EACH[op]}.toml")))
    boxes = elements(svg, "g", "device-box")
    assert boxes or elements(svg, "rect", "row")
    if not collectives.definition(op).arrays:
        assert len(boxes) == result.scenario.mesh.size
        assert all("no arrays" in "".join(box.itertext()) for box in boxes)


def test_long_arrays_are_drawn_as_runs(tmp_path):
    """400 rows per device are grouped into runs (one block per message), so the picture stays small."""
    path = tmp_path / "big.toml"
    path.write_text('title = "big"\n[mesh]\naxes = {x = 4}\n[collective]\nop = "all_to_all"\naxis_name = "x"\n'
                    'split_axis = 0\nconcat_axis = 0\ntiled = true\n[inputs]\nseed = 0\nshape = [400, 2]\n')
    out = tmp_path / "big.svg"
    assert main(["draw", str(path), "-o", str(out)]) == 0
    assert len(elements(out, "rect", "row")) == 4 * (4 + 4)
    assert float(ET.parse(out).getroot().get("height")) < 3000


def test_html_is_self_contained_with_picture_timeline_and_tables(tmp_path):
    """The page inlines the picture and the timeline, lists every device and message, and loads nothing."""
    result = scenarios.run(scenarios.load(str(LIBRARY / "moe_dispatch.toml")))
    html = drawn("moe_dispatch", tmp_path, ".html").read_text()
    assert html.count("<svg") == 2 and 'id="devices"' in html and 'id="messages"' in html
    assert len(re.findall(r'<tr data-message="\d+"', html)) == len(result.trace)
    assert len(re.findall(r'<rect class="message"', html)) == len(result.trace)
    assert not re.search(r"\s(src|href)=|@import|url\((?!#)", html)
    assert re.findall(r"https?://[^\"' ]+", html) == ["http://www.w3.org/2000/svg"] * 2


def test_committed_picture_is_what_draw_makes_now():
    """docs/ragged_docs_example.svg, shown in the README (and drawn afresh on docs/reference/draw.md), equals the
    picture `meshsim draw` makes today."""
    committed = (ROOT / "docs" / "ragged_docs_example.svg").read_text()
    result = scenarios.run(scenarios.load(str(LIBRARY / "ragged_docs_example.toml")))
    assert committed == picture(result), \
        "regenerate: meshsim draw scenarios/library/ragged_docs_example.toml -o docs/ragged_docs_example.svg"
    assert "docs/ragged_docs_example.svg" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize(("argv", "message"), [
    (["{root}/scenarios/library/moe_dispatch.toml", "-o", "{tmp}/out.png"], r"out\.png: unknown extension '\.png'"),
    (["{root}/scenarios/library/moe_dispatch.toml", "-o", "{tmp}/missing/out.svg"],
     r"missing/out\.svg: the directory .*missing does not exist"),
    (["{root}/scenarios/library/moe_dispatch.toml", "-o", "{tmp}"], r"is a directory; give a file name such as"),
    (["{tmp}/broken.toml", "-o", "{tmp}/out.svg"], r"broken\.toml:\d+: .*axes"),
    (["{tmp}/not_a_run.json", "-o", "{tmp}/out.svg"], r"not_a_run\.json: not a saved run"),
    (["{root}/scenarios/library/layout_guide.py", "-o", "{tmp}/out.svg"], r"not a script"),
])
def test_bad_input_exits_2_with_one_message(argv, message, tmp_path, capsys):
    """An unknown extension, an unwritable path or a directory (found before anything runs), a broken file, a
    script or a file that is not a saved run: exit 2, one line (a program without --allow-code:
    test_consent.py)."""
    (tmp_path / "broken.toml").write_text('[mesh]\naxes = 4\n[collective]\nop = "psum"\naxis_name = "i"\n')
    (tmp_path / "not_a_run.json").write_text('{"format": "something else"}')
    assert main(["draw", *(a.format(tmp=tmp_path, root=ROOT) for a in argv)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("meshsim: error: ") and re.search(message, err)
    assert not (tmp_path / "out.svg").exists() and not (tmp_path / "out.html").exists()


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's Chromium; missing fails under CI (the project's set-up installs it) and skips elsewhere."""
    path = shutil.which("chromium")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: `make install` as root installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed (run `make install` as root, or apt-get install chromium)")
    return path


def browse(chromium: str, tmp_path: Path, url: str, *flags: str) -> subprocess.CompletedProcess:
    """Run headless Chromium on `url` with a fresh profile and no network; the DOM or logs come back."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr",
                           "--v=0", *flags, url], capture_output=True, text=True, timeout=120)


_CATCH = ("<script>window.onerror = function (m) { document.documentElement.setAttribute('data-errors', "
          "(document.documentElement.getAttribute('data-errors') || '') + m + ';'); };</script>")


def with_catcher(html: str) -> str:
    """The page with a first script that writes every uncaught error into the DOM."""
    return html.replace("<head>", "<head>" + _CATCH, 1)


@pytest.mark.browser
def test_page_loads_in_chromium_without_errors(chromium, tmp_path):
    """In headless Chromium the page runs its script (body data-ready), throws nothing, and holds the
    picture's arrows, the timeline's bars and both tables; a screenshot of it is drawn."""
    page = drawn("moe_dispatch", tmp_path, ".html")
    page.write_text(with_catcher(page.read_text()))
    done = browse(chromium, tmp_path, page.as_uri(), "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert 'data-ready="yes"' in dom and "data-errors=" not in dom and "Uncaught" not in done.stderr
    assert dom.count('class="arrow"') == 12 and dom.count('class="message"') == 12
    assert 'id="devices"' in dom and 'id="messages"' in dom
    shot = tmp_path / "page.png"
    browse(chromium, tmp_path, page.as_uri(), f"--screenshot={shot}", "--window-size=1000,1600")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


@pytest.mark.browser
def test_error_catcher_sees_a_broken_script(chromium, tmp_path):
    """The catcher the page test relies on reports an error a script throws (so its silence means something)."""
    page = tmp_path / "broken.html"
    page.write_text(with_catcher("<html><head></head><body><script>nosuch();</script></body></html>"))
    done = browse(chromium, tmp_path, page.as_uri(), "--dump-dom")
    assert "data-errors=" in done.stdout and "nosuch" in done.stdout
    assert "Uncaught" in done.stderr


@pytest.mark.browser
def test_svg_loads_in_chromium(chromium, tmp_path):
    """Chromium parses the SVG file itself (an XML error would replace it) and keeps every arrow and row."""
    svg = drawn("ragged_docs_example", tmp_path)
    done = browse(chromium, tmp_path, svg.as_uri(), "--dump-dom")
    assert done.returncode == 0 and "parsererror" not in done.stdout and "Uncaught" not in done.stderr
    assert done.stdout.count('class="arrow"') == 4 and done.stdout.count('class="row ') == 2 * (3 + 4)


EMPTY_SLICES = """title = "empty slices"
[mesh]
axes = {x = 2}
[collective]
op = "ragged_all_to_all"
axis_name = "x"
[inputs]
dtype = "float32"
[[device]]  # slices 1 and 2 are empty and start at row 60; slice 3 sends one row
operand = {fill = 1, shape = [100, 1]}
output = {fill = 0, shape = [50, 1]}
input_offsets = [0, 60, 60, 80]
send_sizes = [10, 0, 0, 1]
output_offsets = [0, 0, 0, 0]
recv_sizes = [10, 0, 0, 0]
[[device]]  # sends nothing: four empty slices at row 0
operand = {fill = 2, shape = [100, 1]}
output = {fill = 0, shape = [50, 1]}
input_offsets = [0, 0, 0, 0]
send_sizes = [0, 0, 0, 0]
output_offsets = [0, 0, 0, 0]
recv_sizes = [0, 1, 0, 0]
"""


def test_empty_slices_are_marked_at_their_rows_once_per_row_and_counts_agree_in_number(tmp_path):
    """Long operands are drawn as runs: an empty slice cuts the run at the row where it starts (not at its
    number), the empty slices starting on one row share one label, and a run of one row says '1 row'."""
    path = tmp_path / "empty.toml"
    path.write_text(EMPTY_SLICES)
    out = tmp_path / "empty.svg"
    assert main(["draw", str(path), "-o", str(out)]) == 0
    operand_runs = {(int(e.get("data-device")), e.get("data-rows")) for e in elements(out, "rect", "row")
                    if e.get("data-side") == "operand"}
    assert operand_runs == {(0, "0:10"), (0, "10:60"), (0, "60:80"), (0, "80:81"), (0, "81:100"), (1, "0:100")}
    labels = ["".join(g.itertext()) for g in elements(out, "g", "empty-slice")]
    assert labels == ["slices 1, 2 empty", "slices 0, 1, 2, 3 empty"]
    counts = [e.text for e in ET.parse(out).getroot().iter(SVG + "text") if (e.text or "").endswith((" row", " rows"))]
    assert "1 row" in counts and "1 rows" not in counts
