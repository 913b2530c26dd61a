"""Guards before allocation: memory estimates, mesh sizes and shapes checked first; exit 2 with one message.

Every reproducer runs through `meshsim run` (`scenarios.cli.main`) and must end with exit 2 and a single
`meshsim: error: ...` line on stderr (no traceback), or run; odd but valid files still run.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import scenarios
import sim
from scenarios.cli import main

_PSUM = '[collective]\nop = "psum"\naxis_name = "x"\n'
_PROGRAM = """[mesh]
axes = {x = 2}

[program]
source = '''
def f(a):
    return psum(a, 'x')
'''
in_specs = "P('x')"
out_specs = "P()"
"""


def _write(tmp_path: Path, text: str, name: str = "scenario.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _refused(capsys: pytest.CaptureFixture, argv: list[str], *fragments: str) -> str:
    """Run `argv`; assert exit 2 and one error line holding every fragment; return the line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("meshsim: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


_DEEP = "[" * 3000 + "]" * 3000
REPRODUCERS = [
    ("nested_3000_deep", f'[mesh]\naxes = {{x = 2}}\n{_PSUM}[[device]]\nx = {_DEEP}\n[[device]]\nx = 1\n',
     ("invalid TOML", "nested too deeply")),
    ("fill_100000_squared", '[mesh]\naxes = {x = 2}\n' + _PSUM
     + "[[device]]\nx = {fill = 0, shape = [100000, 100000]}\n" * 2,
     ("scenario.toml:7:", "needs about", "inputs 74.5 GiB", "--max-memory SIZE", "max_memory_bytes=")),
    ("seed_100000_squared", f'[mesh]\naxes = {{x = 2}}\n{_PSUM}[inputs]\nseed = 0\nshape = [100000, 100000]\n',
     ("scenario.toml:8:", "needs about", "inputs 74.5 GiB", "--max-memory SIZE")),
    ("mesh_of_100000", f'[mesh]\naxes = {{x = 100000}}\n{_PSUM}[inputs]\nseed = 0\nshape = [2]\n',
     ("scenario.toml:2:", "needs about", "trace", "--max-memory SIZE")),
    ("mesh_of_2_to_the_31", f'[mesh]\naxes = {{x = 65536, y = 32768}}\n{_PSUM}[inputs]\nseed = 0\nshape = [2]\n',
     ("scenario.toml:2:", "2147483648 devices", "at most 1048576")),
    ("args_shape_0", _PROGRAM + "[[args]]\nshape = 0\n",
     ("scenario.toml:12:", "[[args]] number 0: shape=0 must be a list of non-negative integers")),
    ("args_seed_negative", _PROGRAM + "[[args]]\nshape = [4]\nseed = -3\n",
     ("scenario.toml:13:", "[[args]] number 0: seed=-3 must be a non-negative integer")),
    ("args_shape_negative", _PROGRAM + "[[args]]\nshape = [4, -1]\n", ("shape=[4, -1] must be a list",)),
    ("args_dtype_unknown", _PROGRAM + "[[args]]\nshape = [4]\ndtype = \"float7\"\n", ("dtype='float7' must name",)),
    ("args_value_ragged", _PROGRAM + "[[args]]\nvalue = [[1, 2], [3]]\n", ("value=[[1, 2], [3]] must be",)),
    ("args_not_tables", "args = 3\n" + _PROGRAM, ("args must be an array of tables",)),
    ("args_unknown_key", _PROGRAM + "[[args]]\nshape = [4]\nsead = 1\n", ("unknown key 'sead'",)),
    ("args_too_large", _PROGRAM + "[[args]]\nshape = [100000, 100000]\n", ("needs about", "--max-memory SIZE")),
]


@pytest.mark.parametrize(("text", "fragments"), [r[1:] for r in REPRODUCERS], ids=[r[0] for r in REPRODUCERS])
def test_reproducer_exits_2_with_one_message(tmp_path: Path, capsys: pytest.CaptureFixture, text: str,
                                             fragments: tuple[str, ...]) -> None:
    """Each reproducer ends with exit 2 and one message naming the rule (and, for memory, the estimate and
    the knob), quickly: nothing large is allocated before the refusal."""
    start = time.perf_counter()
    _refused(capsys, ["run", _write(tmp_path, text)], *fragments)
    assert time.perf_counter() - start < 30


@pytest.mark.parametrize("name", ["missing.py", "missing.toml"])
def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture, name: str) -> None:
    """A scenario path that does not exist is one message naming it, exit 2."""
    _refused(capsys, ["run", str(tmp_path / name)], name, "cannot read the scenario file")


def test_mesh_of_1000_devices_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A 1,000-device mesh runs (device programs are greenlets, not threads): a ring shift ends with each
    device holding its left neighbour's value."""
    perm = ", ".join(f"[{i}, {(i + 1) % 1000}]" for i in range(1000))
    text = f'[mesh]\naxes = {{x = 1000}}\n[collective]\nop = "ppermute"\naxis_name = "x"\nperm = [{perm}]\n' \
           f'[inputs]\nseed = 0\nshape = [2]\n'
    path = _write(tmp_path, text)
    assert main(["run", path]) == 0
    assert "1000 messages" in capsys.readouterr().out
    result = scenarios.run(scenarios.load(path))
    assert np.array_equal(result.outputs[5], result.inputs[4]["x"])


ODD_BUT_VALID = [
    ("scalar_inputs", f'[mesh]\naxes = {{x = 2}}\n{_PSUM}[inputs]\nseed = 3\nshape = []\n'),
    ("empty_inputs", f'[mesh]\naxes = {{x = 2}}\n{_PSUM}[inputs]\nseed = 0\nshape = [0, 5]\n'),
    ("empty_fill", '[mesh]\naxes = {x = 2}\n' + _PSUM + "[[device]]\nx = {fill = 1, shape = [0, 3]}\n" * 2),
    ("ten_dimensions", f'[mesh]\naxes = {{x = 2}}\n{_PSUM}[inputs]\nseed = 0\nshape = {[1] * 9 + [2]}\n'),
    ("nested_30_deep", '[mesh]\naxes = {x = 2}\n' + _PSUM
     + f'[[device]]\nx = {"[" * 30 + "1" + "]" * 30}\n[[device]]\nx = {"[" * 30 + "2" + "]" * 30}\n'),
    ("one_device", f'[mesh]\naxes = {{x = 1}}\n{_PSUM}[inputs]\nseed = 0\nshape = [3]\n'),
    ("many_axes_of_size_1", '[mesh]\naxes = {a = 1, b = 1, c = 1, x = 2}\n' + _PSUM
     + "[inputs]\nseed = 0\nshape = [3]\n"),
    ("pvary_on_4096", '[mesh]\naxes = {x = 4096}\n[collective]\nop = "pvary"\naxis_name = "x"\n'
     "[inputs]\nseed = 0\nshape = [2]\n"),
    ("args_scalar_and_seedless", _PROGRAM + "[[args]]\nshape = [2]\n"),
    ("args_value_int_dtype", _PROGRAM + '[[args]]\nvalue = [1, 2]\ndtype = "int32"\n'),
]


@pytest.mark.parametrize("text", [r[1] for r in ODD_BUT_VALID], ids=[r[0] for r in ODD_BUT_VALID])
def test_odd_but_valid_files_run(tmp_path: Path, capsys: pytest.CaptureFixture, text: str) -> None:
    """Scalars, empty arrays, many dimensions, deep-but-legal nesting, one device, size-1 axes, a few
    thousand devices without messages, and unusual `[[args]]` all still run with exit 0."""
    assert main(["run", "--allow-code", _write(tmp_path, text)]) == 0, capsys.readouterr().err


def test_max_memory_option(capsys: pytest.CaptureFixture) -> None:
    """`--max-memory` lowers the limit (a library scenario is refused, with the estimate) and a bad size
    is argparse's message, with run's usage; a generous limit runs it."""
    path = "scenarios/library/psum_ring.toml"
    line = _refused(capsys, ["run", path, "--max-memory", "1KB"], "needs about", "max_memory_bytes=1000 (1000 B)")
    assert "devices 64 KiB" in line
    with pytest.raises(SystemExit) as exit_info:  # a bad size is argparse's bad argument, with run's usage
        main(["run", path, "--max-memory", "lots"])
    assert exit_info.value.code == 2
    assert "meshsim run: error: argument --max-memory: --max-memory='lots' must be a positive size" in \
        capsys.readouterr().err
    assert main(["run", path, "--max-memory", "1GiB"]) == 0


@pytest.mark.parametrize(("text", "expected"), [
    ("4GiB", 4 << 30), ("500MB", 500_000_000), ("1.5 gib", 3 << 29), ("123", 123), ("2kib", 2048), ("1e3", 1000),
])
def test_parse_bytes(text: str, expected: int) -> None:
    """Sizes read with decimal (KB, MB, GB, TB) and binary (KiB ... TiB) units, case-insensitively."""
    assert sim.parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "0", "-4GiB", "4 GiBs", "nan", "inf", "GiB"])
def test_parse_bytes_refuses(text: str) -> None:
    """Anything but a positive size is refused, echoing the value."""
    with pytest.raises(sim.InvalidArgumentError, match="must be a positive size"):
        sim.parse_bytes(text)


def test_load_takes_max_memory_bytes(tmp_path: Path) -> None:
    """`scenarios.load(path, max_memory_bytes=...)` refuses past the limit and loads under it; a limit that
    is not a positive int is the caller's error."""
    path = _write(tmp_path, f'[mesh]\naxes = {{x = 2}}\n{_PSUM}[inputs]\nseed = 0\nshape = [1000]\n')
    with pytest.raises(scenarios.ScenarioError, match=r"needs about .* more than max_memory_bytes=10000 "):
        scenarios.load(path, max_memory_bytes=10_000)
    assert scenarios.load(path, max_memory_bytes=1 << 20).mesh.size == 2
    with pytest.raises(sim.InvalidTypeError, match="max_memory_bytes='4GiB' must be an int"):
        scenarios.load(path, max_memory_bytes="4GiB")
    with pytest.raises(sim.InvalidArgumentError, match="max_memory_bytes=0 must be positive"):
        scenarios.load(path, max_memory_bytes=0)


@pytest.mark.parametrize("axes", [{"x": sim.MAX_DEVICES + 1}, {"x": 65536, "y": 32768}, {"x": 2**62, "y": 2**62}])
def test_mesh_refuses_too_many_devices(axes: dict[str, int]) -> None:
    """`sim.Mesh` refuses more than 2**20 devices before allocating anything (no overflow for huge axes)."""
    with pytest.raises(sim.InvalidArgumentError, match=r"devices; a mesh may have at most 1048576 \(2\*\*20\)"):
        sim.Mesh(axes)


def test_mesh_refuses_beyond_its_memory_limit() -> None:
    """`sim.Mesh(..., max_memory_bytes=...)` refuses a mesh whose devices alone exceed the limit, giving
    the estimate; the default limit is half the machine's memory (positive)."""
    with pytest.raises(sim.InvalidArgumentError, match=r"a mesh of 1000 devices needs about 15.6 MiB .* more "
                                                       r"than max_memory_bytes=1000000 "):
        sim.Mesh({"x": 1000}, max_memory_bytes=1_000_000)
    assert sim.Mesh({"x": 1000}, max_memory_bytes=1 << 30).size == 1000
    assert sim.default_max_memory_bytes() > 0
