"""`--max-memory` while running: the simulator's count of device memory, and the address-space limit of a
scenario's code (`scenarios.address_space_limit`), from the API and from `meshsim run` in a child process."""

from __future__ import annotations

import re
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import collectives
import scenarios
import sim
from layouts import Layout
from scenarios import ScenarioError
from scenarios.fleet import fleet
from scenarios.sweep import Point, _measure, finish, load_sweep, measure, run_points

ROOT = Path(__file__).resolve().parents[1]
_LIMIT_BYTES = 500_000_000
_BACKSTOP_BYTES = 3 << 30

# A library-style scenario whose program keeps 100 MB arrays alive until something stops it.
_KEEPS_ARRAYS = """title = "a program that keeps 100 MB arrays"
description = "Appends np.ones(100 MB) to a list, forever: only a memory limit that holds while running stops it."

[mesh]
axes = {{x = 2}}

[program]
source = '''
kept = []
while {forever}:
    kept.append(np.ones(100_000_000 // 8))
def f(x):
    return x
'''
in_specs = "P('x')"
out_specs = "P('x')"

[[args]]
shape = [2]
"""

_PSUM_LOOP = """[mesh]
axes = {x = 2}

[program]
source = '''
def f(x):
    for _ in range(20):
        x = psum(x, 'x')
    return x
'''
in_specs = "P('x')"
out_specs = "P('x')"
transpose = false

[[args]]
shape = [2, 1000000]
"""


def _write(tmp_path: Path, text: str, name: str = "scenario.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _psum_loop(x: np.ndarray) -> np.ndarray:
    for _ in range(20):
        x = collectives.psum(x, "x")
    return x


def test_a_meter_counts_and_refuses_past_its_limit():
    """A `MemoryMeter` adds each charge, refuses the one past the limit without counting it, and names the
    device, the array, the total it would make and the knob."""
    meter = sim.MemoryMeter(1000)
    meter.charge(0, "a new array", np.dtype("float32"), (100,), 400)
    with pytest.raises(sim.MemoryLimitError, match=r"device 3: a new array float64\[2, 50\] \(800 B\) would bring "
                                                   r"the run's device memory from 400 B to 1.17 KiB, more than "
                                                   r"max_memory_bytes=1000 .*--max-memory SIZE"):
        meter.charge(3, "a new array", np.dtype("float64"), (2, 50), 800)
    assert meter.held_bytes == 400
    meter.charge(1, "a new array", np.dtype("int8"), (600,), 600)
    assert meter.held_bytes == 1000


def test_a_memory_charges_every_array_it_comes_to_hold():
    """Allocations, adopted inputs and taken reservations are all charged (padded tiles at their reserved
    size); a memory taken into a run charges what it already holds."""
    meter = sim.MemoryMeter(1 << 20)
    memory = sim.LocalMemory(0, meter)
    memory.alloc(np.float32, (10,))
    memory.adopt(np.zeros((4, 4), np.int8))
    region = np.zeros((3,), np.float64)
    memory.reserve(region)
    memory.alloc(np.float64, (3,))
    assert meter.held_bytes == 40 + 16 + 24
    other = sim.LocalMemory(1)
    other.store(np.ones(100, np.uint8), Layout.row_major(1))
    other.count_in(meter)
    assert meter.held_bytes == 80 + 100
    other.alloc(np.int32, (5,))
    assert meter.held_bytes == 200


def test_a_run_past_the_mesh_limit_stops_naming_device_and_call():
    """A program whose 20 psums fit the estimate but not the limit stops at the psum whose results would pass
    it, before they are allocated, with MemoryLimitError naming the call's estimate and what the memories
    already hold; the same run under a larger limit (or the Simulation's own) finishes."""
    x = np.ones((2, 1_000_000), np.float32)
    small = sim.Mesh({"x": 2}, max_memory_bytes=50_000_000)
    mapped = sim.shard_map(_psum_loop, mesh=small, in_specs=sim.P("x"), out_specs=sim.P("x"))
    with pytest.raises(sim.MemoryLimitError, match=r"^device [01]: psum of 3.81 MiB per device in groups of 2 on 2 "
                                                   r"devices needs about 7.63 MiB of memory \(outputs 7.63 MiB, "
                                                   r"trace 2 KiB\) on top of the .* the run's memories hold, more "
                                                   r"than max_memory_bytes=50000000 \(47.7 MiB\)"):
        mapped.run(x)
    large = sim.Mesh({"x": 2}, max_memory_bytes=500_000_000)
    run = sim.shard_map(_psum_loop, mesh=large, in_specs=sim.P("x"), out_specs=sim.P("x")).run(x)
    np.testing.assert_array_equal(run.outputs, x * 2.0**20)


def test_a_simulation_takes_its_limit_from_the_mesh_or_its_own():
    """`Simulation` holds its memories to the mesh's limit unless given one; `RunOptions` carries it."""
    mesh = sim.Mesh({"x": 2}, max_memory_bytes=123456)
    assert sim.Simulation(mesh).options.max_memory_bytes == 123456
    assert sim.Simulation(mesh, max_memory_bytes=99).meter.max_memory_bytes == 99
    assert sim.Simulation(sim.Mesh({"x": 2})).meter.max_memory_bytes == sim.default_max_memory_bytes()


def test_a_loaded_program_run_past_the_limit_is_a_scenario_error(tmp_path):
    """`scenarios.load(..., max_memory_bytes=N)` of a program whose estimate fits: running it past N is one
    ScenarioError naming the file and the memory limit, not a crash; a larger limit runs it."""
    path = _write(tmp_path, _PSUM_LOOP)
    scenario = scenarios.load(path, max_memory_bytes=150_000_000)
    with pytest.raises(ScenarioError, match=rf"^{path}: .*(memory limit|out of memory).*max_memory_bytes="):
        scenarios.run(scenario)
    result = scenarios.run(scenarios.load(path, max_memory_bytes=2_000_000_000))
    assert result.forward.messages > 0


def test_the_address_space_limit_is_restored_after_user_code(tmp_path):
    """The cap holds only while the code runs: the process's RLIMIT_AS is the same before and after, both when
    the code finishes and when it runs out of memory; a MemoryError in the block is one ScenarioError."""
    before = resource.getrlimit(resource.RLIMIT_AS)
    with scenarios.address_space_limit(_LIMIT_BYTES, "here"):
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        assert soft != resource.RLIM_INFINITY
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    with (pytest.raises(ScenarioError, match=r"^x\.py: the scenario's code ran out of memory: it may grow the "
                                             r"process by at most max_memory_bytes=100000000 \(95.4 MiB\)"),
          scenarios.address_space_limit(100_000_000, "x.py")):
        # malloc may first reuse free space the process already holds (earlier tests' freed arrays), which the
        # cap does not count: allocate until the cap stops it (untouched pages, so an uncapped run fails the
        # assert below without using the memory)
        kept = [np.empty(100_000_000 // 8) for _ in range(1000)]
        assert not kept
    assert resource.getrlimit(resource.RLIMIT_AS) == before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS holds on Linux")
def test_max_memory_stops_a_program_appending_arrays_near_the_limit(tmp_path):
    """The acceptance case: under `--max-memory 500MB` a `[program]` appending 100 MB arrays forever stops
    with exit 2 and one `meshsim: error:` line, its peak memory grown by at most 10% past the limit over
    the same file that appends nothing. It grows by at least 60% of the limit (it ran, and the limit stopped
    it): the arrays come in 100 MB steps, and the fifth fits only when nothing else in the process has
    reserved address space since the code started."""
    keeps = _write(tmp_path, _KEEPS_ARRAYS.format(forever="True"), "keeps.toml")
    still = _write(tmp_path, _KEEPS_ARRAYS.format(forever="False"), "still.toml")
    done, peak = _child_peak(tmp_path, "run", "--allow-code", "--max-memory", "500MB", keeps)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"meshsim: error: {keeps}: ")
    assert "out of memory" in done.stderr and "--max-memory" in done.stderr and "Traceback" not in done.stderr
    base_done, base = _child_peak(tmp_path, "run", "--allow-code", "--max-memory", "500MB", still)
    assert base_done.returncode == 0, base_done.stderr
    growth = peak - base
    assert 0.6 * _LIMIT_BYTES <= growth <= 1.1 * _LIMIT_BYTES, (growth, peak, base)


# `meshsim ARGS` with the first argument a file that receives, at exit, the process's own peak resident memory
# (VmHWM, of the process as it runs meshsim: not the high-water mark a child inherits from its parent at fork).
_LAUNCH = """import atexit, runpy, sys
peak_file = sys.argv.pop(1)
def record():
    status = open('/proc/self/status').read()
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith('VmHWM:'))
    open(peak_file, 'w').write(kib)
atexit.register(record)
sys.argv[0] = 'meshsim'
runpy.run_module('scenarios.cli', run_name='__main__', alter_sys=True)
"""


def _outer_limit() -> None:
    """A backstop for the child (far above what it needs): were `--max-memory` not to hold, the test fails
    at a few GB instead of taking the machine's memory."""
    resource.setrlimit(resource.RLIMIT_AS, (_BACKSTOP_BYTES, resource.getrlimit(resource.RLIMIT_AS)[1]))


def _child_peak(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, int]:
    """`meshsim ARGS` in a child process, and that process's own peak resident memory in bytes."""
    peak_file = tmp_path / "peak"
    done = subprocess.run([sys.executable, "-c", _LAUNCH, str(peak_file), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, preexec_fn=_outer_limit)
    return done, int(peak_file.read_text()) * 1024


def _point(size_bytes: int, algorithm: str = "direct") -> Point:
    return Point("psum", {"x": 4}, None, size_bytes, {"topology": "fully_connected"}, algorithm, "float32", 0)


@pytest.mark.parametrize(("raised", "match"), [
    (MemoryError("Unable to allocate 1.00 GiB"), r"^out of memory on the worker \(MemoryError: Unable to allocate "
                                                 r"1.00 GiB\); a smaller size or mesh, or a worker with more memory"),
    (MemoryError(), r"^out of memory on the worker \(MemoryError\); "),
    (RuntimeError("boom"), r"^the point failed: RuntimeError: boom$"),
])
def test_a_point_that_fails_is_its_own_error_row(monkeypatch, raised, match):
    """Whatever a point's run raises (MemoryError, any other exception) becomes that point's error row, never
    an exception out of `measure`; the figures stay None."""
    def failing(*args, **kwargs):
        raise raised

    monkeypatch.setattr(_measure, "_inputs", failing)
    row = measure(_point(1024))
    assert re.match(match, row["error"]), row["error"]
    assert row["time_s"] is None and row["devices"] == 4


def test_a_point_past_the_device_memory_limit_is_an_error_row():
    """A ring psum of 1 MiB on 4 devices: its estimate (12 MiB) fits 12.7 MB but its ring's staging buffers take
    the device memories past it, so the run stops at that allocation (the simulator's count) with an error row
    naming the device, the array and the limit; with room to spare it runs."""
    row = measure(_point(1 << 20, "ring"), max_memory_bytes=12_700_000)
    assert re.match(r"device \d: a new array float32\[\d+\] \(.*\) would bring the run's device memory from .* "
                    r"more than max_memory_bytes=12700000", row["error"] or ""), row["error"]
    assert measure(_point(1 << 20, "ring"), max_memory_bytes=100_000_000)["error"] is None


def _cap_address_space(extra_bytes: int) -> int:
    """In a worker: cap its address space at its size now plus `extra_bytes`; return the size."""
    size = scenarios._address_space.address_space_bytes()
    resource.setrlimit(resource.RLIMIT_AS, (size + extra_bytes, resource.getrlimit(resource.RLIMIT_AS)[1]))
    return size


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS holds on Linux")
def test_a_sweep_goes_on_past_a_point_out_of_memory_on_its_worker(tmp_path):
    """A sweep of three points on one worker whose memory is capped: the 256 MiB point runs out of memory
    there and is an error row; the small points still have their rows, and the sweep finishes."""
    path = tmp_path / "sweep.toml"
    path.write_text('title = "one point too big for its worker"\ncollective = "psum"\nmesh = {x = 4}\n'
                    'size = ["1KiB", "256MiB", "4KiB"]\n', encoding="utf-8")
    sweep = load_sweep(str(path))
    with fleet(workers=1) as client:
        client.run(_cap_address_space, 300_000_000)
        run_points(client, sweep.points, tmp_path)
    rows = finish(sweep, tmp_path)
    assert [row["error"] is None for row in rows] == [True, False, True]
    assert rows[1]["error"].startswith("out of memory on the worker (MemoryError: Unable to allocate")
    assert rows[0]["time_s"] > 0 and rows[2]["time_s"] > 0
