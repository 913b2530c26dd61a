"""`--max-memory` while running: the simulator's count of device memory, and the address-space limit of a
scenario's code (`scenarios.address_space_limit`), from the API and from `meshsim run` in a child process."""

from __future__ import annotations

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


def test_a_run_past_the_mesh_limit_stops_naming_device_and_array():
    """A program whose 20 psums fit the estimate but not the limit stops at the psum result that passes it,
    with MemoryLimitError; the same run under a larger limit (or the Simulation's own) finishes."""
    x = np.ones((2, 1_000_000), np.float32)
    small = sim.Mesh({"x": 2}, max_memory_bytes=50_000_000)
    mapped = sim.shard_map(_psum_loop, mesh=small, in_specs=sim.P("x"), out_specs=sim.P("x"))
    with pytest.raises(sim.MemoryLimitError, match=r"^device [01]: a new array float32\[1, 1000000\] \(3.81 MiB\) "
                                                   r"would bring the run's device memory from .* to .*, more than "
                                                   r"max_memory_bytes=50000000 \(47.7 MiB\)"):
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
        kept = [np.ones(100_000_000 // 8) for _ in range(3)]
        assert not kept
    assert resource.getrlimit(resource.RLIMIT_AS) == before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS holds on Linux")
def test_max_memory_stops_a_program_appending_arrays_near_the_limit(tmp_path):
    """The acceptance case: under `--max-memory 500MB` a `[program]` appending 100 MB arrays forever stops
    with exit 2 and one `meshsim: error:` line, its peak memory grown by at most 10% past the limit over
    the same file that appends nothing (and by at least 80% of it: it ran, and was stopped by the limit)."""
    keeps = _write(tmp_path, _KEEPS_ARRAYS.format(forever="True"), "keeps.toml")
    still = _write(tmp_path, _KEEPS_ARRAYS.format(forever="False"), "still.toml")
    done, peak = _child_peak(tmp_path, "run", "--allow-code", "--max-memory", "500MB", keeps)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"meshsim: error: {keeps}: ")
    assert "out of memory" in done.stderr and "--max-memory" in done.stderr and "Traceback" not in done.stderr
    base_done, base = _child_peak(tmp_path, "run", "--allow-code", "--max-memory", "500MB", still)
    assert base_done.returncode == 0, base_done.stderr
    growth = peak - base
    assert 0.8 * _LIMIT_BYTES <= growth <= 1.1 * _LIMIT_BYTES, (growth, peak, base)


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
