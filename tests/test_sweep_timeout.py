"""`--timeout` of `meshsim sweep`: a point still running after SECONDS is stopped on its worker and is an
error row (`scenarios.sweep._deadline`, `measure(..., timeout_s=)`), and the sweep goes on."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from timer_child import in_child

from scenarios.cli import main
from scenarios.sweep import Point, measure
from scenarios.sweep._deadline import PastDeadline, deadline


def _point(devices: int, algorithm: str = "ring", collective: str = "all_gather") -> Point:
    return Point(collective, {"x": devices}, None, 4 * devices, {"topology": "fully_connected"}, algorithm,
                 "float32", 0)


def test_a_deadline_stops_a_loop_in_another_thread_and_leaves_nothing_behind():
    """In a thread that is not the main one (as a Dask worker's), a block past its seconds raises
    `PastDeadline`; a block that ends in time raises nothing, then or later."""
    in_child(__file__, "_deadline_in_a_thread")


def _deadline_in_a_thread() -> None:
    seen: list = []

    def work() -> None:
        start = time.perf_counter()
        try:
            with deadline(0.1):
                while True:
                    sum(range(100))
        except PastDeadline:
            seen.append(time.perf_counter() - start)
        with deadline(0.05):
            pass
        time.sleep(0.2)  # a timer that fired late would raise here
        seen.append("clean")

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(10)
    assert len(seen) == 2 and 0.1 <= seen[0] < 5 and seen[1] == "clean"


def test_no_deadline_is_no_limit():
    """`deadline(None)` runs the block as it is."""
    with deadline(None):
        time.sleep(0.01)


def test_a_point_past_its_timeout_is_an_error_row_and_one_in_time_runs():
    """A 700-device ring psum (977,900 messages: seconds of work) under timeout_s=0.3 gives a row whose
    error names --timeout, stopped well before it would have finished; a 4-device point under the same
    limit runs and has its figures."""
    in_child(__file__, "_point_past_its_timeout")


def _point_past_its_timeout() -> None:
    start = time.perf_counter()
    row = measure(_point(700, collective="psum"), timeout_s=0.3)
    assert row["error"] == ("stopped after --timeout 0.3 s: the point had not finished; raise --timeout, or make "
                            "the point smaller")
    assert row["time_s"] is None and row["devices"] == 700
    assert time.perf_counter() - start < 20
    small = measure(_point(4), timeout_s=30)
    assert small["error"] is None and small["messages"] == 12


def test_meshsim_sweep_timeout_gives_the_slow_point_an_error_row(tmp_path: Path, capsys):
    """`meshsim sweep --timeout 0.5` on one worker: the 700-device ring psum is stopped there and is an error
    row naming --timeout; the 4-device point after it still runs on the same worker; exit 0."""
    path = tmp_path / "sweep.toml"
    path.write_text('title = "one slow point"\ncollective = "psum"\nmesh = [{x = 700}, {x = 4}]\n'
                    'size = "2KiB"\nalgorithm = "ring"\n', encoding="utf-8")
    argv = ["sweep", str(path), "-o", str(tmp_path / "out"), "--workers", "1", "--json", "--timeout", "0.5"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["devices"] for row in rows] == [700, 4]
    assert rows[0]["error"].startswith("stopped after --timeout 0.5 s")
    assert rows[1]["error"] is None and rows[1]["time_s"] > 0


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1e9"])
def test_a_bad_sweep_timeout_is_a_usage_error(tmp_path: Path, capsys, value):
    """`--timeout` takes a positive number of seconds up to 1e8; anything else exits 2 naming the rule."""
    with pytest.raises(SystemExit) as stopped:
        main(["sweep", str(tmp_path / "missing.toml"), "--timeout", value])
    assert stopped.value.code == 2
    assert f"--timeout={value!r} must be a positive number of seconds" in capsys.readouterr().err
