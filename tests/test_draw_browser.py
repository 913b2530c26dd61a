"""The page `meshsim draw -o FILE.html` writes, driven in headless Chromium through Selenium: its stepper goes
through every message in time order, and at each step what is highlighted (sender, receiver, rows, offsets
entries, caption, timeline cursor) is what the run's trace says; back, first, last, play and the keys; a
non-ragged collective; a 64-device page; no console errors. Screenshots go to each test's tmp dir.

Everything expected is computed here from `scenarios.run(...)`'s trace and the scenario's inputs, never read
from the page's JSON. Debian's chromium and chromedriver only: Selenium is given both paths and never fetches a
driver or a browser."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import scenarios
from scenarios.cli import main
from sim.record import seconds
from sim.record._html import LABEL_W, PLOT_W

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "scenarios" / "library"
LISTED = 512  # the messages the page's table lists
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")

# What the page highlights right now, read in one round trip.
_STATE = """
function rows(selector) {
  return Array.from(document.querySelectorAll(selector)).map(function (e) {
    return [+e.getAttribute('data-device'), e.getAttribute('data-side'), e.getAttribute('data-rows')];
  });
}
var line = document.getElementById('cursor-line');
return {
  step: +document.body.getAttribute('data-step'),
  playing: document.body.getAttribute('data-playing'),
  count: document.getElementById('step-count').textContent,
  caption: document.getElementById('caption').textContent,
  src: Array.from(document.querySelectorAll('.device.step-src, .device-box.step-src')).map(
    function (e) { return +e.getAttribute('data-device'); }),
  dst: Array.from(document.querySelectorAll('.device.step-dst, .device-box.step-dst')).map(
    function (e) { return +e.getAttribute('data-device'); }),
  sent: rows('.step-sent'), landed: rows('.step-landed'),
  entries: Array.from(document.querySelectorAll('td.step-entry')).map(function (e) {
    return [+e.parentElement.getAttribute('data-device'), e.parentElement.getAttribute('data-array'),
            +e.getAttribute('data-index'), +e.textContent];
  }),
  arrows: Array.from(document.querySelectorAll('.arrow.step-message, .pair.step-message')).map(
    function (e) { return e.getAttribute('data-message') || e.getAttribute('data-messages'); }),
  bars: Array.from(document.querySelectorAll('#timeline rect.message.step-message')).map(
    function (e) { return +e.getAttribute('data-message'); }),
  table: Array.from(document.querySelectorAll('#messages tr.step-message')).map(
    function (e) { return +e.getAttribute('data-message'); }),
  cursor: line ? [document.getElementById('cursor').getAttribute('visibility'), +line.getAttribute('x1'),
                  +document.getElementById('cursor-span').getAttribute('width')] : null,
  notes: Array.from(document.querySelectorAll('#aggregated li')).map(function (e) { return e.textContent; }),
  offsets: Array.from(document.querySelectorAll('#offsets tr[data-device]')).filter(function (e) {
    return getComputedStyle(e).display !== 'none';
  }).map(function (e) { return +e.getAttribute('data-device'); })
};
"""


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium driven through Debian's chromedriver; missing, it fails under CI and skips elsewhere."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        why = f"{', '.join(missing)} missing: `make install` as root installs chromium and chromium-driver"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("selenium is not installed: it is in the test extra (`make install`)")
        pytest.skip("selenium is not installed (the test extra has it)")

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never fetch a driver or a browser
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1200,1600", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()


def opened(browser, scenario: Path, tmp_path: Path):
    """Draw `scenario` into `tmp_path` and open the page; the run of the scenario comes back."""
    page = tmp_path / f"{scenario.stem}.html"
    assert main(["draw", str(scenario), "-o", str(page)]) == 0
    browser.get_log("browser")  # drop what an earlier page logged
    browser.get(page.as_uri())
    assert browser.find_element("tag name", "body").get_attribute("data-ready") == "yes"
    return scenarios.run(scenarios.load(str(scenario)))


def state(browser) -> dict:
    return browser.execute_script(_STATE)


def click(browser, button: str) -> dict:
    browser.find_element("id", f"step-{button}").click()
    return state(browser)


def press(browser, key: str) -> dict:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).send_keys(key).perform()
    return state(browser)


def shot(browser, tmp_path: Path, name: str) -> Path:
    """A screenshot of the page as it is, named in the test's output."""
    path = tmp_path / f"{name}.png"
    assert browser.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"screenshot: {path}")
    return path


def no_console_errors(browser) -> None:
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe


def time_order(result) -> list[int]:
    """The trace's indices in time order: posted, first carried, arrived, then trace order."""
    trace = result.trace
    return sorted(range(len(trace)), key=lambda k: (trace[k].send_time_s, trace[k].start_time_s,
                                                    trace[k].arrival_time_s, k))


def covered(cells: list, device: int, side: str) -> set[int]:
    """The rows the highlighted cells of one device's strip cover; each cell must be of that strip."""
    rows: set[int] = set()
    for d, s, span in cells:
        assert (d, s) == (device, side), cells
        start, stop = map(int, span.split(":"))
        rows |= set(range(start, stop))
    return rows


def cursor_x(result, t: float) -> float:
    end = max([result.end_time_s, *(m.arrival_time_s for m in result.trace)])
    return LABEL_W + PLOT_W * t / end


def ragged_entries(result, k: int) -> list:
    """The offsets entries message `k` should light: the sender's input_offsets[i], send_sizes[i] and
    output_offsets[i]; on the receiver, entry j of what it got by the all_to_all of output_offsets (the
    rows the trace says it wrote start there) and recv_sizes[j] (as many rows as it wrote)."""
    m = result.trace[k]
    i, (start, stop) = m.detail["slice"], m.detail["rows"]
    sender = result.inputs[m.src]
    members = result.scenario.mesh.group(m.src, result.scenario.params["axis_name"]).members
    per = len(sender["send_sizes"]) // len(members)
    j = members.index(m.src) * per + i % per
    assert result.inputs[m.dst]["recv_sizes"][j] == stop - start
    return sorted([[m.src, "input_offsets", i, int(sender["input_offsets"][i])],
                   [m.src, "send_sizes", i, int(sender["send_sizes"][i])],
                   [m.src, "output_offsets", i, int(sender["output_offsets"][i])],
                   [m.dst, "received_output_offsets", j, start],
                   [m.dst, "recv_sizes", j, stop - start]])


def check_ragged_step(seen: dict, result, n: int, k: int) -> None:
    """At step `n` (message `k`), every highlight is what the trace and the inputs say."""
    m = result.trace[k]
    assert seen["step"] == n and seen["count"] == f"step {n + 1} of {len(result.trace)}"
    assert set(seen["src"]) == {m.src} and set(seen["dst"]) == {m.dst}
    start, stop = m.detail["src_rows"]
    assert stop - start == m.detail["rows"][1] - m.detail["rows"][0]
    assert covered(seen["sent"], m.src, "operand") == set(range(start, stop))
    assert covered(seen["landed"], m.dst, "result") == set(range(*m.detail["rows"]))
    assert sorted(seen["entries"]) == ragged_entries(result, k)
    assert seen["arrows"] == [str(k)] and seen["bars"] == [k]
    assert seen["table"] == ([k] if k < LISTED else [])
    visibility, x, width = seen["cursor"]
    assert visibility == "visible" and x == pytest.approx(cursor_x(result, m.start_time_s), abs=0.06)
    assert x + width == pytest.approx(max(x + 2, cursor_x(result, m.arrival_time_s)), abs=0.11)
    words = seen["caption"]
    assert words.startswith(f"Step {n + 1} of {len(result.trace)}: device {m.src} ")
    assert f"its slice {m.detail['slice']}" in words and f"operand rows {start}:{stop}" in words
    assert f"output rows {m.detail['rows'][0]}:{m.detail['rows'][1]}" in words
    assert f"{m.size_bytes} bytes" in words and f"arrived at {seconds(m.arrival_time_s)}" in words
    assert (f"to device {m.dst}" in words) != (m.src == m.dst)


@pytest.mark.parametrize("name", ["ragged_docs_example", "moe_dispatch"])
def test_every_step_highlights_what_the_trace_says(browser, name, tmp_path):
    """Forward through every message in time order: the sender, receiver, sent and landed rows, the five
    offsets entries, the arrow, bar and table row, the cursor and the caption match the trace at each step;
    then back, first and last do too; a screenshot at the first and the last step; no console errors."""
    result = opened(browser, LIBRARY / f"{name}.toml", tmp_path)
    before = state(browser)
    assert before["step"] == -1 and before["cursor"][0] == "hidden" and not before["src"]
    ordered = time_order(result)
    assert len(ordered) == len(result.trace) > 0
    for n, k in enumerate(ordered):
        check_ragged_step(click(browser, "forward"), result, n, k)
        if n == 0:
            shot(browser, tmp_path, f"{name}-first")
    shot(browser, tmp_path, f"{name}-last")
    check_ragged_step(click(browser, "forward"), result, len(ordered) - 1, ordered[-1])  # stays at the end
    check_ragged_step(click(browser, "back"), result, len(ordered) - 2, ordered[-2])
    check_ragged_step(click(browser, "first"), result, 0, ordered[0])
    check_ragged_step(click(browser, "back"), result, 0, ordered[0])  # stays at the start
    check_ragged_step(click(browser, "last"), result, len(ordered) - 1, ordered[-1])
    no_console_errors(browser)


def test_keys_and_play(browser, tmp_path):
    """The right and left arrows step, Home and End jump, the space bar plays (steps advance on their own)
    and pauses (they stop)."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.wait import WebDriverWait

    result = opened(browser, LIBRARY / "moe_dispatch.toml", tmp_path)
    ordered = time_order(result)
    check_ragged_step(press(browser, Keys.ARROW_RIGHT), result, 0, ordered[0])
    check_ragged_step(press(browser, Keys.ARROW_RIGHT), result, 1, ordered[1])
    check_ragged_step(press(browser, Keys.ARROW_LEFT), result, 0, ordered[0])
    check_ragged_step(press(browser, Keys.END), result, len(ordered) - 1, ordered[-1])
    check_ragged_step(press(browser, Keys.HOME), result, 0, ordered[0])
    assert press(browser, Keys.SPACE)["playing"] == "yes"
    WebDriverWait(browser, 5, poll_frequency=0.05).until(lambda b: state(b)["step"] >= 2)
    paused = press(browser, Keys.SPACE)
    assert paused["playing"] == "no"
    check_ragged_step(state(browser), result, paused["step"], ordered[paused["step"]])
    browser.execute_script("return new Promise(function (done) { setTimeout(done, 1200); });")
    assert state(browser)["step"] == paused["step"]
    shot(browser, tmp_path, "moe_dispatch-paused")
    no_console_errors(browser)


def test_a_collective_without_rows_steps_through_its_boxes(browser, tmp_path):
    """psum on a ring (no rows, no offsets): each step lights the sender's and receiver's boxes, the pair's
    arrow, the bar and the table row, and the caption names both ends, the bytes and the arrival."""
    result = opened(browser, LIBRARY / "psum_ring.toml", tmp_path)
    for n, k in enumerate(time_order(result)):
        m, seen = result.trace[k], click(browser, "forward")
        assert seen["step"] == n and set(seen["src"]) == {m.src} and set(seen["dst"]) == {m.dst}
        assert not seen["sent"] and not seen["landed"] and not seen["entries"]
        assert len(seen["arrows"]) == (m.src != m.dst) and all(str(k) in a.split() for a in seen["arrows"])
        assert seen["bars"] == [k] and seen["table"] == [k]
        assert seen["cursor"][1] == pytest.approx(cursor_x(result, m.start_time_s), abs=0.06)
        assert f"device {m.src} sends {m.size_bytes} bytes to device {m.dst}" in seen["caption"]
        assert f"arrived at {seconds(m.arrival_time_s)}" in seen["caption"]
    shot(browser, tmp_path, "psum_ring-last")
    no_console_errors(browser)


def expected_sent(result, k: int) -> set[int]:
    """The operand rows a message of all_to_all or all_gather carries: the slice-th of equal chunks along
    split_axis for all_to_all, the whole operand for all_gather."""
    m, params = result.trace[k], result.scenario.params
    operand = next(iter(result.inputs[m.src].values()))
    if result.scenario.op == "all_gather":
        return set(range(operand.shape[0]))
    members = result.scenario.mesh.group(m.src, params["axis_name"], params.get("axis_index_groups")).members
    chunk = operand.shape[params["split_axis"]] // len(members)
    return set(range(m.detail["slice"] * chunk, (m.detail["slice"] + 1) * chunk))


@pytest.mark.parametrize("name", ["all_to_all_seeded", "all_gather_groups"])
def test_a_collective_with_rows_but_no_offsets_steps_through_them(browser, name, tmp_path):
    """all_to_all and all_gather: each step lights the sender's operand rows its message carries, the
    receiver's result rows it wrote (along the result's axis), the arrow, and no offsets entry; a local copy
    (all_to_all's unpacking of a column block) lights its device, bar and row and says it copies."""
    result = opened(browser, LIBRARY / f"{name}.toml", tmp_path)
    for n, k in enumerate(time_order(result)):
        m, seen = result.trace[k], click(browser, "forward")
        assert seen["step"] == n and set(seen["src"]) == {m.src} and set(seen["dst"]) == {m.dst}
        assert seen["table"] == [k] and seen["bars"] == [k]
        if m.kind != "message":  # a local copy (the unpacking of a column block) names no rows
            assert not seen["sent"] and not seen["landed"] and not seen["arrows"]
            assert f"device {m.src} copies {m.size_bytes} bytes locally ({m.kind}" in seen["caption"]
            continue
        assert covered(seen["sent"], m.src, "operand") == expected_sent(result, k)
        assert covered(seen["landed"], m.dst, "result") == set(range(*m.detail["rows"]))
        assert not seen["entries"] and seen["arrows"] == [str(k)]
        assert f"result rows {m.detail['rows'][0]}:{m.detail['rows'][1]}" in seen["caption"]
    shot(browser, tmp_path, f"{name}-last")
    no_console_errors(browser)


def test_a_call_without_messages_has_nothing_to_step(browser, tmp_path):
    """pvary sends nothing: the controls are disabled, the caption says so, a key press changes nothing."""
    from selenium.webdriver.common.keys import Keys

    result = opened(browser, LIBRARY / "pvary_no_messages.toml", tmp_path)
    assert not result.trace
    assert not browser.find_element("id", "step-forward").is_enabled()
    seen = press(browser, Keys.ARROW_RIGHT)
    assert seen["step"] == -1 and "nothing to step through" in seen["caption"] and seen["count"] == "no steps"
    no_console_errors(browser)


def ragged_64(tmp_path: Path) -> Path:
    """A ragged_all_to_all over 64 devices: each sends operand row i to device i, which writes it at row d."""
    devices = "".join(
        f"[[device]]\noperand = {[100 * d + i for i in range(64)]}\noutput = {{fill = 0, shape = [64]}}\n"
        f"input_offsets = {list(range(64))}\nsend_sizes = {[1] * 64}\noutput_offsets = {[d] * 64}\n"
        f"recv_sizes = {[1] * 64}\n" for d in range(64))
    path = tmp_path / "ragged_64.toml"
    path.write_text('title = "ragged over 64 devices"\n[mesh]\naxes = {x = 64}\n[collective]\n'
                    f'op = "ragged_all_to_all"\naxis_name = "x"\n{devices}')
    return path


def all_to_all_64(tmp_path: Path) -> Path:
    """An all_to_all over 64 devices, one row to each."""
    path = tmp_path / "all_to_all_64.toml"
    path.write_text('title = "all_to_all over 64 devices"\n[mesh]\naxes = {x = 64}\n[collective]\n'
                    'op = "all_to_all"\naxis_name = "x"\nsplit_axis = 0\nconcat_axis = 0\ntiled = true\n'
                    "[inputs]\nseed = 0\nshape = [64, 2]\n")
    return path


@pytest.mark.parametrize("make", [all_to_all_64, ragged_64])
def test_a_64_device_page_loads_steps_and_says_what_it_aggregates(browser, make, tmp_path):
    """64 devices, 4,096 messages: the page loads, says the picture is a matrix, the timeline aggregates pairs
    and the table lists 512 messages (and, for ragged, that the offsets table shows the step's two devices);
    End, the left arrow and Home light the right matrix cell and move the cursor (a ragged step's entries
    too, the offsets table showing its sender's and receiver's rows only); no console errors."""
    from selenium.webdriver.common.keys import Keys

    result = opened(browser, make(tmp_path), tmp_path)
    ordered = time_order(result)
    assert len(ordered) == 64 * 64
    ragged = result.scenario.op == "ragged_all_to_all"
    notes = " ".join(state(browser)["notes"])
    assert "matrix" in notes and "4032 sender -> receiver pairs" in notes and "first 512 of 4096" in notes
    assert ("sender and receiver only" in notes) == ragged
    for key, n in ((Keys.END, len(ordered) - 1), (Keys.ARROW_LEFT, len(ordered) - 2), (Keys.HOME, 0)):
        seen, m = press(browser, key), result.trace[ordered[n]]
        assert seen["step"] == n and seen["count"] == f"step {n + 1} of 4096"
        assert set(seen["src"]) == {m.src} and set(seen["dst"]) == {m.dst}
        assert seen["arrows"] == [str(ordered[n])] and seen["bars"] == [ordered[n]]
        assert seen["cursor"][1] == pytest.approx(cursor_x(result, m.start_time_s), abs=0.06)
        assert seen["table"] == ([ordered[n]] if ordered[n] < LISTED else [])
        assert f"rows {m.detail['rows'][0]}:{m.detail['rows'][1]}" in seen["caption"]
        if ragged:
            assert sorted(seen["entries"]) == ragged_entries(result, ordered[n])
            assert set(seen["offsets"]) == {m.src, m.dst}
    shot(browser, tmp_path, result.scenario.path and Path(result.scenario.path).stem)
    no_console_errors(browser)


def test_console_errors_are_seen(browser, tmp_path):
    """The console check the other tests rely on sees a script that throws (so its silence means something)."""
    page = tmp_path / "broken.html"
    page.write_text("<html><head></head><body><script>nosuch();</script></body></html>")
    browser.get_log("browser")
    browser.get(page.as_uri())
    with pytest.raises(AssertionError, match="nosuch"):
        no_console_errors(browser)
