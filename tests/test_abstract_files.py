"""Abstract payloads from files: `payload = "abstract"` in a scenario gives the trace and end time of the same
file with bytes, for every library `[collective]` scenario; `meshsim run` prints and `--json` writes the
arrays as shapes and dtypes, `check` and `explain` refuse them with the reason; a sweep's `payload` axis
gives rows equal to the bytes rows but for the column; bad values refused naming the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import scenarios
import sim
from scenarios import ScenarioError
from scenarios.sweep import load_sweep
from scenarios.sweep._measure import measure

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = sorted(p for p in (ROOT / "scenarios" / "library").glob("*.toml") if "[program]" not in p.read_text())


def _abstract_copy(path: Path, tmp_path: Path) -> Path:
    """The scenario file at `path` with `payload = "abstract"` as its first key."""
    copy = tmp_path / path.name
    copy.write_text('payload = "abstract"\n' + path.read_text())
    return copy


def _records(result) -> tuple:
    return json.dumps(result.trace.to_json()), result.end_time_s, [
        (c.device, c.collective, c.call, c.enter_s, c.met_s, c.exit_s) for c in result.run.calls]


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.stem)
def test_library_scenarios_abstract_equal_bytes(path: Path, tmp_path: Path) -> None:
    """Every library [collective] scenario run with abstract payloads has the bytes run's trace, end time and
    call records; each device's result is a ShapeDtypeStruct of the real result's shape and dtype."""
    real = scenarios.run(scenarios.load(path))
    abstract = scenarios.run(scenarios.load(_abstract_copy(path, tmp_path)))
    assert _records(abstract) == _records(real)
    for mine, theirs in zip(abstract.outputs, real.outputs, strict=True):
        assert isinstance(mine, sim.ShapeDtypeStruct)
        assert (mine.shape, mine.dtype) == (theirs.shape, theirs.dtype)


_BIG = """title = "ring all_gather of 64 MiB per device on 8 devices"
payload = "{payload}"
[mesh]
axes = {{x = 8}}
[collective]
op = "all_gather"
axis_name = "x"
tiled = true
algorithm = "ring"
[inputs]
seed = 0
shape = [16777216]
"""


def test_big_scenario_abstract_loads_without_bytes(tmp_path: Path) -> None:
    """A seeded scenario of 64 MiB per device asks for no values with payload = "abstract": none is drawn, and a
    budget far below the bytes it stands for takes it; with bytes the same budget refuses it."""
    path = tmp_path / "big.toml"
    path.write_text(_BIG.format(payload="abstract"))
    scenario = scenarios.load(path, max_memory_bytes=64 << 20)
    assert scenario.payload == "abstract" and sim.memory.is_abstract(scenario.inputs[0]["x"])
    result = scenarios.run(scenario)
    assert result.outputs[0] == sim.ShapeDtypeStruct((8 << 24,), "float32")
    assert result.trace.total_bytes == 8 * 7 * (64 << 20)
    path.write_text(_BIG.format(payload="bytes"))
    with pytest.raises(ScenarioError, match="max_memory_bytes"):
        scenarios.load(path, max_memory_bytes=64 << 20)


def test_an_abstract_scenario_needs_no_seed(tmp_path: Path) -> None:
    """Nothing is drawn for abstract inputs, so `[inputs] seed` may be left out; with bytes it is still
    required, and a bad seed is refused either way."""
    path = tmp_path / "unseeded.toml"
    path.write_text(_BIG.format(payload="abstract").replace("seed = 0\n", ""))
    assert sim.memory.is_abstract(scenarios.load(path).inputs[0]["x"])
    path.write_text(_BIG.format(payload="bytes").replace("seed = 0\n", ""))
    with pytest.raises(ScenarioError, match="seed=None must be a non-negative integer"):
        scenarios.load(path, max_memory_bytes=8 << 30)
    path.write_text(_BIG.format(payload="abstract").replace("seed = 0", "seed = -1"))
    with pytest.raises(ScenarioError, match="seed=-1 must be a non-negative integer"):
        scenarios.load(path)


@pytest.mark.parametrize(("text", "match"), [
    ('payload = "hollow"\n', "payload='hollow' must be one of 'bytes', 'abstract'"),
    ('payload = 1\n', "payload=1 must be one of"),
])
def test_bad_payload_refused(tmp_path: Path, text: str, match: str) -> None:
    """A payload other than "bytes" or "abstract" is refused naming the field and its line."""
    path = tmp_path / "bad.toml"
    path.write_text(text + (ROOT / "scenarios" / "library" / "psum_ring.toml").read_text())
    with pytest.raises(ScenarioError, match=match):
        scenarios.load(path)


def _meshsim(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    return subprocess.run([sys.executable, "-m", "scenarios.cli", *args], cwd=ROOT, env={**env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=300)


def test_cli_faces(tmp_path: Path) -> None:
    """`meshsim run` prints abstract arrays as shapes and dtypes, `--json` writes them as such; `check` and
    `explain` refuse an abstract scenario with exit 2 and the reason."""
    path = tmp_path / "big.toml"
    path.write_text(_BIG.format(payload="abstract"))
    shown = _meshsim("run", str(path))
    assert shown.returncode == 0, shown.stderr
    assert "x       abstract float32[16777216] (no values)" in shown.stdout
    assert "result  abstract float32[134217728] (no values)" in shown.stdout
    written = _meshsim("run", str(path), "--json")
    document = json.loads(written.stdout)
    assert document["devices"][0]["output"] == {"abstract": True, "shape": [134217728], "dtype": "float32"}
    for command, match in (("check", "no values to check"), ("explain", "payload='abstract' has none")):
        refused = _meshsim(command, str(path))
        assert refused.returncode == 2 and match in refused.stderr and "Traceback" not in refused.stderr


_PROGRAM = """title = "a tensor-parallel layer"
{payload}
[mesh]
axes = {{tp = 4}}
[program]
source = '''
def f(x, w1, w2, scale):
    h = np.maximum(x @ w1, 0) * scale
    return psum(h @ w2, 'tp')
'''
in_specs = "(P(), P(None, 'tp'), P('tp', None), P())"
out_specs = "P()"
{transpose}
[[args]]
shape = [{rows}, 64]
[[args]]
shape = [64, 256]
[[args]]
shape = [256, 64]
[[args]]
value = 0.5
"""


def _program(tmp_path: Path, payload: str, rows: int = 8, transpose: str = "transpose = false") -> Path:
    path = tmp_path / f"program_{payload}.toml"
    path.write_text(_PROGRAM.format(payload=f'payload = "{payload}"', rows=rows, transpose=transpose))
    return path


def test_an_abstract_program_scenario_has_the_trace_and_times_of_its_bytes(tmp_path: Path) -> None:
    """A `[program]` scenario with `payload = "abstract"`: each `shape` argument is abstract (a `value` one
    stays real), the program (matmuls included) runs forward only, with the bytes run's program, messages,
    trace and time; its outputs are shapes and dtypes. A million rows per device cost no memory (it was
    refused: "payload goes with a [collective] scenario")."""
    found = {}
    for payload in ("bytes", "abstract"):
        scenario = scenarios.load(_program(tmp_path, payload), allow_code=True)
        assert scenario.payload == payload and not scenario.transpose
        found[payload] = scenarios.run(scenario)
    real, abstract = found["bytes"].forward, found["abstract"].forward
    assert str(abstract.program) == str(real.program)
    assert (abstract.messages, abstract.network_bytes, abstract.end_time_s) == \
        (real.messages, real.network_bytes, real.end_time_s)
    assert (abstract.outputs.shape, abstract.outputs.dtype) == (real.outputs.shape, real.outputs.dtype)
    assert sim.memory.is_abstract(abstract.outputs) and found["abstract"].transposed is None
    huge = scenarios.load(_program(tmp_path, "abstract", rows=1 << 20), allow_code=True)
    assert scenarios.run(huge).forward.outputs.shape == (1 << 20, 64)


def test_an_abstract_program_refuses_its_transposes_and_explain(tmp_path: Path) -> None:
    """`transpose = true` needs values for the adjoint identity: refused at its line; `explain` refuses the
    file and `run --json` writes the outputs as shapes and dtypes."""
    with pytest.raises(ScenarioError, match=r":13: \[program\] transpose = true checks the adjoint identity"):
        scenarios.load(_program(tmp_path, "abstract", transpose="transpose = true"), allow_code=True)
    path = _program(tmp_path, "abstract")
    written = _meshsim("run", "--allow-code", "--json", str(path))
    assert written.returncode == 0, written.stderr
    assert json.loads(written.stdout)["forward"]["outputs"] == [{"abstract": True, "shape": [8, 64],
                                                                 "dtype": "float32"}]
    refused = _meshsim("explain", "--allow-code", str(path))
    assert refused.returncode == 2 and "payload='abstract' has none" in refused.stderr


_SWEEP = """title = "bytes against abstract"
collective = ["all_gather", "psum", "psum_scatter", "all_to_all", "ragged_all_to_all"]
mesh = {x = 4}
size = ["4KiB", "256KiB"]
algorithm = ["direct", "ring"]
payload = ["bytes", "abstract"]
"""


def test_sweep_payload_axis(tmp_path: Path) -> None:
    """A sweep's payload axis: each abstract row equals its bytes row but for key and payload; the bytes points
    keep the keys they had before the axis existed."""
    path = tmp_path / "sweep.toml"
    path.write_text(_SWEEP)
    points = load_sweep(path).points
    rows = {(p.collective, p.size_bytes, p.algorithm, p.payload): measure(p) for p in points}
    figures = ("time_s", "messages", "between_devices", "bytes_sent", "count", "algbw_GB_per_s", "error",
               "algorithm_run")
    for (op, size, algorithm, payload), row in rows.items():
        if payload == "abstract":
            twin = rows[(op, size, algorithm, "bytes")]
            assert [row[k] for k in figures] == [twin[k] for k in figures]
    plain = [p for p in points if p.payload == "bytes"]
    assert "payload" not in plain[0].params and "payload" in points[1].params
    path.write_text(_SWEEP.replace('["bytes", "abstract"]', '"empty"'))
    with pytest.raises(ScenarioError, match="payload='empty' must be"):
        load_sweep(path)


def test_an_abstract_program_past_the_address_space_limit_says_why(tmp_path: Path) -> None:
    """Abstract arrays take address space, not memory: past the scenario code's address-space cap
    (`max_memory_bytes` over the process's size now) the run stops with a ScenarioError naming the knob, and an
    abstract array that no longer fits says that the cap counts it at its full size; with the cap raised the
    same file runs."""
    path = _program(tmp_path, "abstract", rows=1 << 22)  # a 1 GiB argument, and larger intermediates
    with pytest.raises(ScenarioError, match=r"ran out of memory.*--max-memory SIZE"):
        scenarios.run(scenarios.load(path, allow_code=True, max_memory_bytes=1 << 30))
    assert scenarios.run(scenarios.load(path, allow_code=True, max_memory_bytes=64 << 30)).forward.messages == 16
    code = ("import resource, sim\n"
            "size = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
            "resource.setrlimit(resource.RLIMIT_AS, (size + (256 << 20), resource.RLIM_INFINITY))\n"
            "try:\n    sim.memory.hollow_empty((1 << 30,), 'float32')\n"
            "except MemoryError as error:\n    print(error)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "needs 4294967296 bytes of address space" in done.stdout, done.stderr
    assert "counts abstract arrays at their full size, which they never take in memory" in done.stdout
