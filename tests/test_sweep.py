"""`meshsim sweep`: sweep files, every point simulated on a local Dask cluster of 2 workers, a killed worker
losing no point, --resume, the JSON lines and CSV files, the nccl-tests table, the plots, and every bad input
exiting 2 with its message. One cluster serves the whole module; the command reaches it with --scheduler."""

from __future__ import annotations

import csv
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest

from scenarios.cli import main
from scenarios.cli.render import nccl_table
from scenarios.fleet import fleet
from scenarios.sweep import COLUMNS, OPERATIONS, finish, load_sweep, measure, pending, plot, run_points, series

ROOT = Path(__file__).resolve().parents[1]
PICTURED_SWEEP = ROOT / "scenarios" / "sweeps" / "psum_ring_vs_switch.toml"
PICTURE = ROOT / "docs" / "sweep_psum_ring_vs_switch.svg"
REFERENCE = ROOT / "docs" / "reference"

# 5 collectives x 5 sizes x 4 algorithms = 100 points; 'ring' and 'recursive_doubling' are not algorithms of
# every collective, so 25 points come back as the simulator's rejections.
HUNDRED = """
title = "a hundred points"
collective = ["psum", "all_gather", "psum_scatter", "all_to_all", "ppermute"]
mesh = {x = 8}
size = ["512B", "1KiB", "4KiB", "16KiB", "64KiB"]
network = "switch"
algorithm = ["direct", "ring", "recursive_doubling", "auto"]
"""
REJECTED = {("all_to_all", "ring"), ("ppermute", "ring"), ("psum_scatter", "recursive_doubling"),
            ("all_to_all", "recursive_doubling"), ("ppermute", "recursive_doubling")}

# An odd sweep: a 2-D mesh over a torus, bfloat16, ragged exchange, 6 devices (no recursive doubling there).
SMALL = """
collective = ["ragged_all_to_all", "pmax"]
size = ["1KiB", "8KiB"]
dtype = ["bfloat16", "int32"]

[[point]]
mesh = {x = 4, y = 2}
network = {topology = "torus"}
algorithm = ["direct", "auto"]

[[point]]
mesh = {x = 6}
algorithm = "recursive_doubling"
"""


@pytest.fixture(scope="module")
def client():
    with fleet(workers=2) as c:
        yield c


@pytest.fixture(scope="module")
def address(client) -> str:
    return client.scheduler.address


@pytest.fixture(scope="module")
def hundred(address, tmp_path_factory) -> tuple[Path, dict, str]:
    """The 100-point sweep run once through the command: its directory, --json rows and printed table."""
    directory = tmp_path_factory.mktemp("hundred")
    (directory / "hundred.toml").write_text(HUNDRED)
    assert main(["sweep", str(directory / "hundred.toml"), "-o", str(directory / "out"), "--scheduler", address,
                 "--json"]) == 0
    return directory


def _sweep(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    (tmp_path / name).write_text(text)
    return tmp_path / name


def _written(directory: Path) -> int:
    """Lines in the results file so far (0 before it exists)."""
    path = directory / "results.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _rows(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "results.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------------------------------------- running


def test_a_hundred_points_each_have_their_row(hundred):
    """All 100 points come back once, under their own keys; exactly the collective x algorithm pairs the
    simulator lacks are rejected rows carrying its message, and every other row is filled in."""
    rows = _rows(hundred / "out")
    sweep = load_sweep(hundred / "hundred.toml")
    assert len(sweep.points) == 100 and sorted(r["key"] for r in rows) == sorted(p.key for p in sweep.points)
    for row in rows:
        if (row["collective"], row["algorithm"]) in REJECTED:
            assert re.match(rf"device 0: {row['collective']}: algorithm='{row['algorithm']}' must be one of",
                            row["error"])
            assert row["time_s"] is None and row["messages"] is None
        else:
            assert row["error"] is None and row["devices"] == 8 and row["messages"] > 0 and row["bytes_sent"] > 0
            assert row["algorithm_run"] == row["algorithm"] or row["algorithm"] == "auto"


def test_figures_follow_nccl_tests_definitions(hundred):
    """algbw x time is the size, busbw / algbw is nccl-tests' factor for the collective on 8 devices, and the
    simulated time grows with the size along every collective x algorithm."""
    factors = {"psum": 2 * 7 / 8, "all_gather": 7 / 8, "psum_scatter": 7 / 8, "all_to_all": 7 / 8, "ppermute": 1.0}
    lines = defaultdict(list)
    for row in _rows(hundred / "out"):
        if row["error"]:
            continue
        assert row["algbw_GB_per_s"] * 1e9 * row["time_s"] == pytest.approx(row["size_bytes"], rel=1e-12)
        assert row["busbw_GB_per_s"] / row["algbw_GB_per_s"] == pytest.approx(factors[row["collective"]])
        assert row["count"] * 4 * (1 if OPERATIONS[row["collective"]].blocks == "whole" else 8) == row["size_bytes"]
        lines[row["collective"], row["algorithm"]].append((row["size_bytes"], row["time_s"]))
    for points in lines.values():
        times = [t for _, t in sorted(points)]
        assert times == sorted(times) and len(set(times)) == len(times)


def test_a_row_is_what_the_simulator_gives_in_this_process(hundred):
    """A worker's row equals the same point measured here: the figures come from the simulation, not the engine."""
    sweep = load_sweep(hundred / "hundred.toml")
    point = next(p for p in sweep.points if (p.collective, p.algorithm, p.size_bytes) == ("psum", "ring", 4096))
    row = next(r for r in _rows(hundred / "out") if r["key"] == point.key)
    here = measure(point)
    assert {k: row[k] for k in ("time_s", "messages", "between_devices", "bytes_sent", "count")} == \
           {k: here[k] for k in ("time_s", "messages", "between_devices", "bytes_sent", "count")}


def test_csv_and_jsonl_hold_the_same_columns(hundred):
    """results.csv has a header of COLUMNS and the JSON rows' values in sweep order (None as empty)."""
    with (hundred / "out" / "results.csv").open() as stream:
        table = list(csv.DictReader(stream))
    assert list(table[0]) == list(COLUMNS)
    by_key = {r["key"]: r for r in _rows(hundred / "out")}
    assert set(by_key) == {r["key"] for r in table} and all(set(r) == set(COLUMNS) for r in by_key.values())
    for line in table:
        assert line == {k: "" if v is None else str(v) for k, v in by_key[line["key"]].items()}


def test_a_killed_worker_loses_no_point(client, tmp_path):
    """A worker killed after three rows: its points rerun elsewhere and each of the 30 rows is written once."""
    sweep = load_sweep(_sweep(tmp_path, HUNDRED.replace(
        '["512B", "1KiB", "4KiB", "16KiB", "64KiB"]', '["16KiB", "64KiB"]').replace(
        '["direct", "ring", "recursive_doubling", "auto"]', '["direct", "ring", "auto"]')))
    pids = list(client.run(os.getpid).values())
    seen = []

    def on_row(row: dict) -> None:
        seen.append(row["key"])
        if len(seen) == 3:
            os.kill(pids[0], signal.SIGKILL)

    _, todo = pending(sweep, tmp_path / "out", resume=False)
    run_points(client, todo, tmp_path / "out", on_row)
    assert len(seen) == len(todo) == 30 and len(set(seen)) == 30
    assert [r["key"] for r in finish(sweep, tmp_path / "out")] == [p.key for p in sweep.points]
    assert len(_rows(tmp_path / "out")) == 30
    assert pids[0] not in client.run(os.getpid).values()


def test_odd_points_run_or_are_rejected_and_resume_runs_only_the_missing(address, tmp_path, capsys):
    """A 2-D torus, bfloat16 and int32, ragged exchange with even splits: measured; recursive doubling on 6
    devices: rows with the simulator's rule, shown as rejected in the table. Then --resume keeps the rows in
    results.jsonl (a last line cut short is dropped) and runs only the others; without it a results file that
    holds rows is refused, exit 2."""
    path, out = _sweep(tmp_path, SMALL), tmp_path / "out"
    assert main(["sweep", str(path), "-o", str(out), "--scheduler", address]) == 0
    text = capsys.readouterr().out
    assert "sweep on" not in text  # no progress bar when stdout is not a terminal
    assert "# ragged_all_to_all on mesh x=4,y=2, axis_name x,y (8 devices): nccl-tests AlltoAll" in text
    assert re.search(r"^\s+1024\s+-\s+int32\s+max\s+rejected: device 0: pmax: algorithm='recursive_doubling' needs "
                     r"a group size that is a power of two, got 6", text, re.M)
    rows = _rows(out)
    assert len(rows) == 24 and {r["network"] for r in rows} == {"torus", "fully_connected"}
    assert sum(1 for r in rows if r["error"]) == 8
    assert {r["dtype"] for r in rows if not r["error"]} == {"bfloat16", "int32"}
    lines = (out / "results.jsonl").read_text().splitlines(keepends=True)
    (out / "results.jsonl").write_text("".join(lines[:5]) + lines[5][:30])
    assert main(["sweep", str(path), "-o", str(out), "--scheduler", address, "--resume"]) == 0
    assert "24 points: 19 run now, 5 from results.jsonl" in capsys.readouterr().out
    assert sorted(r["key"] for r in _rows(out)) == sorted(p.key for p in load_sweep(path).points)
    assert main(["sweep", str(path), "-o", str(out), "--scheduler", address]) == 2
    assert "results.jsonl already holds 24 results; pass --resume" in capsys.readouterr().err


def test_ctrl_c_keeps_finished_points_for_resume(address, tmp_path, capsys):
    """Ctrl-C in the middle of a sweep: exit 130 with one line saying how many points are kept and to use
    --resume; the rows written stay, and --resume finishes the sweep."""
    path, out = _sweep(tmp_path, HUNDRED), tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "scenarios.cli", "sweep", str(path), "-o", str(out),
                                "--scheduler", address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _written(out) < 3:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    kept = len(_rows(out))
    assert process.returncode == 130 and 3 <= kept < 100
    assert err.decode().endswith(f"meshsim: interrupted; {out / 'results.jsonl'} keeps {kept} finished points: run "
                                 "the same command with --resume to finish the sweep\n")
    assert main(["sweep", str(path), "-o", str(out), "--scheduler", address, "--resume"]) == 0
    assert f"100 points: {100 - kept} run now, {kept} from results.jsonl" in capsys.readouterr().out


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_a_terminal_shows_a_progress_bar(address, tmp_path):
    """In a pseudo-terminal the command draws a progress bar of points done while they run, then the table."""
    import pty

    parent, child = pty.openpty()
    path = _sweep(tmp_path, 'collective = "psum"\nmesh = {x = 8}\nsize = ["1KiB", "2KiB", "4KiB"]\n')
    env = {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "scenarios.cli", "sweep", str(path), "-o", str(tmp_path / "o"),
                                "--scheduler", address], stdin=child, stdout=child, stderr=child, env=env)
    os.close(child)
    seen, deadline = bytearray(), time.monotonic() + 60
    try:
        while process.poll() is None or select.select([parent], [], [], 0)[0]:
            if time.monotonic() > deadline:
                break
            if select.select([parent], [], [], 0.1)[0]:
                try:
                    seen += os.read(parent, 4096)
                except OSError:  # the terminal closed with the process
                    break
    finally:
        process.kill()
        process.wait(timeout=30)
        os.close(parent)
    text = seen.decode(errors="replace")
    assert re.search(r"sweep on 2 worker\(s\).*0/3", text) and "# psum on mesh x=8" in text
    assert text.index("sweep on") < text.index("# psum on mesh x=8")


# ---------------------------------------------------------------------------------------------- outputs


def _row(**fields) -> dict:
    row = dict.fromkeys(COLUMNS)
    row.update(collective="psum", mesh="x=8", axis_name="x", devices=8, network="ring", algorithm="auto",
               dtype="float32", seed=0, error=None)
    row.update(fields)
    return row


def test_the_nccl_table_layout():
    """One block per collective x mesh with nccl-tests' columns; a table per network x algorithm, rows by size;
    times in us and bandwidths in GB/s with two decimals; rejected points show the message."""
    rows = [_row(size_bytes=4096, count=1024, time_s=4.33e-6, algbw_GB_per_s=0.9459, busbw_GB_per_s=1.6554,
                 algorithm_run="direct"),
            _row(size_bytes=1024, count=256, time_s=4.08e-6, algbw_GB_per_s=0.2509, busbw_GB_per_s=0.4392,
                 algorithm_run="direct"),
            _row(algorithm="recursive_doubling", mesh="x=6", axis_name=None, devices=None, size_bytes=1024,
                 error="device 0: psum: algorithm='recursive_doubling' needs a group size that is a power of two")]
    assert nccl_table(rows) == [
        "# psum on mesh x=8, axis_name x (8 devices): nccl-tests AllReduce, busbw = algbw x 2(n-1)/n",
        "#",
        "# network ring, algorithm auto",
        "#       size         count      type   redop        time     algbw     busbw  algorithm",
        "#        (B)    (elements)                          (us)    (GB/s)    (GB/s)  (ran)",
        "        1024           256     float     sum        4.08      0.25      0.44  direct",
        "        4096          1024     float     sum        4.33      0.95      1.66  direct",
        "",
        "# psum on mesh x=6: nccl-tests AllReduce, busbw = algbw x 2(n-1)/n",
        "#",
        "# network ring, algorithm recursive_doubling",
        "#       size         count      type   redop        time     algbw     busbw  algorithm",
        "#        (B)    (elements)                          (us)    (GB/s)    (GB/s)  (ran)",
        "        1024             -     float     sum  rejected: device 0: psum: algorithm='recursive_doubling' "
        "needs a group size that is a power of two",
        "",
    ]


def test_plot_svg_has_a_line_per_algorithm_and_png_its_magic(hundred, tmp_path):
    """The SVG parses as XML and holds, in each panel, one line per collective x algorithm measured (the
    parameters that vary); the PNG starts with PNG's signature."""
    rows = [{k: r.get(k) for k in COLUMNS} for r in _rows(hundred / "out")]
    plot(rows, tmp_path / "p.svg", "a hundred points")
    ids = [g.get("id") for g in ET.parse(tmp_path / "p.svg").iter("{http://www.w3.org/2000/svg}g")]
    expected = {f"{c}, {a}" for c, a in {(r["collective"], r["algorithm"]) for r in rows if not r["error"]}}
    assert len(expected) == 15 and set(series(rows)) == expected
    assert {i[len("time: "):] for i in ids if i and i.startswith("time: ")} == expected
    assert sorted(i[len("busbw: "):] for i in ids if i and i.startswith("busbw: ")) == sorted(expected)
    plot(rows, tmp_path / "p.png", "a hundred points")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_committed_picture_is_what_the_sweep_draws_today(address, tmp_path):
    """docs/sweep_psum_ring_vs_switch.svg, shown on docs/reference/sweep.md, equals what `meshsim sweep --plot`
    draws now."""
    out = tmp_path / "picture.svg"
    assert main(["sweep", str(PICTURED_SWEEP), "-o", str(tmp_path / "out"), "--scheduler", address, "--plot",
                 str(out), "--json"]) == 0
    assert out.read_text() == PICTURE.read_text(), (
        "regenerate: meshsim sweep scenarios/sweeps/psum_ring_vs_switch.toml -o /tmp/s --plot "
        "docs/sweep_psum_ring_vs_switch.svg")
    assert "](../sweep_psum_ring_vs_switch.svg)" in (REFERENCE / "sweep.md").read_text()


def test_point_tables_take_the_grid_as_defaults(tmp_path):
    """With [[point]] tables only they make points, each a grid over the top-level defaults; an empty one is the
    top-level grid itself; the same point twice runs once; the keys are stable and distinct."""
    extra = '[[point]]\n[[point]]\nalgorithm = ["ring", "auto"]\n[[point]]\nsize = 1024\n'
    path = _sweep(tmp_path, GRID.replace("1024", "[1024, 2048]") + extra)
    points = load_sweep(path).points
    assert [(p.size_bytes, p.algorithm) for p in points] == [
        (1024, "direct"), (2048, "direct"), (1024, "ring"), (1024, "auto"), (2048, "ring"), (2048, "auto")]
    assert [p.key for p in points] == [p.key for p in load_sweep(path).points] and len({p.key for p in points}) == 6
    assert points[0].network == {"topology": "fully_connected"} and points[0].dtype == "float32"


def test_every_bundled_sweep_file_loads_with_a_title_and_description():
    """Each file of scenarios/sweeps/ is a valid sweep with a title and a description, named on
    docs/reference/sweep-files.md."""
    files = sorted((ROOT / "scenarios" / "sweeps").glob("*.toml"))
    page = (REFERENCE / "sweep-files.md").read_text()
    assert len(files) >= 2
    for path in files:
        sweep = load_sweep(path)
        assert sweep.points and sweep.description.strip() and sweep.title != path.stem
        assert f"scenarios/sweeps/{path.name}" in page


# ---------------------------------------------------------------------------------------------- bad input

GRID = 'collective = "psum"\nmesh = {x = 8}\nsize = 1024\n'
BAD = [
    ("unknown-parameter", GRID + 'algoritm = "ring"\n', [],
     r"s\.toml:4: unknown key 'algoritm'; allowed keys: collective, mesh, axis_name, size, network, algorithm"),
    ("unknown-point-key", GRID + '[[point]]\nalgo = "ring"\n', [], r"s\.toml:5: \[\[point\]\] number 1: unknown key"),
    ("empty-list", GRID + "algorithm = []\n", [], r"s\.toml:4: algorithm=\[\] is empty, so the grid has no points"),
    ("empty-range", 'collective = "psum"\nmesh = {x = 8}\nsize = {from = "4KiB", to = "1KiB", factor = 2}\n', [],
     r"s\.toml:3: size from='4KiB' is more than to='1KiB', so the range is empty"),
    ("no-points", 'title = "nothing"\n', [], r"s\.toml: collective is missing; give it at the top level"),
    ("bad-size", GRID.replace("1024", '"12 parsecs"'), [], r"s\.toml:3: size=.12 parsecs. must be a positive"),
    ("huge-size", GRID.replace("1024", "1e300"), [], r"s\.toml:3: size=1e\+300 must be a positive number of bytes up"),
    ("bad-factor", GRID.replace("1024", '{from = 1, to = 8, factor = 1}'), [], r"factor=1 must be a number greater"),
    ("bad-collective", GRID.replace('"psum"', '"allreduce"'), [], r"s\.toml:1: collective='allreduce' must be one"),
    ("bad-mesh", GRID.replace("x = 8", "x = 0"), [], r"s\.toml:2: mesh=\{'x': 0\} must be a table"),
    ("bad-network", GRID + 'network = "rign"\n', [], r"s\.toml:4: network='rign': 'rign' is neither a topology"),
    ("bad-network-key", GRID + 'network = {topology = "ring", shape = [8]}\n', [],
     r"shape does not apply to topology='ring'"),
    ("bad-algorithm", GRID + 'algorithm = "fastest"\n', [], r"s\.toml:4: algorithm='fastest' must be one of"),
    ("bad-dtype", GRID + '[[point]]\ndtype = "complex64"\n', [],
     r"s\.toml:5: \[\[point\]\] number 1: dtype='complex64' must name a numeric"),
    ("bad-seed", GRID + "seed = -1\n", [], r"seed=-1 must be a non-negative integer"),
    ("bad-axis-name", GRID + "axis_name = 3\n", [], r"axis_name=3 must be an axis name"),
    ("size-and-sizes", GRID + "sizes = 8\n", [], r"give size or sizes, not both"),
    ("not-toml", "collective = \n", [], r"s\.toml:1: invalid TOML"),
    ("plot-suffix", GRID, ["--plot", "x.pdf"], r"--plot x\.pdf: unknown extension '\.pdf'; the plot must end"),
    ("workers-0", GRID, ["--workers", "0"], r"--workers='0' must be a positive integer"),
    ("workers-not-a-number", GRID, ["--workers", "two"], r"--workers='two' must be a positive integer"),
    ("workers-and-scheduler", GRID, ["--workers", "2", "--scheduler", "tcp://127.0.0.1:9"],
     r"--workers=2 applies to a local cluster; with --scheduler the cluster's own workers run the points"),
    ("unreachable-scheduler", GRID, ["--scheduler", "tcp://127.0.0.1:9"],
     r"cannot reach the Dask scheduler scheduler='tcp://127.0.0.1:9'"),
]


@pytest.mark.parametrize(("text", "extra", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_exits_2_with_its_message(tmp_path, capsys, monkeypatch, text, extra, message):
    """Each bad sweep file or option: exit 2 and one `meshsim: error:` line naming the file, line and key."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("scenarios.fleet._fleet.CONNECT_TIMEOUT_S", 2)  # the unreachable scheduler's wait
    (tmp_path / "s.toml").write_text(text)
    assert main(["sweep", "s.toml", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("meshsim: error: ") and err.count("\n") == 1
    assert re.search(message, err), err


def test_a_sweep_of_one_point_says_it_in_the_singular(address, tmp_path, capsys):
    """The summary line of a one-point sweep reads '1 point:', not '1 points:'."""
    path = _sweep(tmp_path, 'title = "one"\ncollective = "psum"\nmesh = {x = 4}\nsize = ["1KiB"]\n')
    assert main(["sweep", str(path), "-o", str(tmp_path / "out"), "--scheduler", address]) == 0
    assert "\n1 point: 1 run now, 0 from results.jsonl" in capsys.readouterr().out
