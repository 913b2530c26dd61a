"""`meshsim check`: the simulator against the executable spec and real JAX, and the report it rests on.

The command runs in-process through `scenarios.cli.main`; tests that start the JAX worker are marked
`differential`. A deliberately wrong simulator (a collective's `_protocol` replaced through `monkeypatch`,
as in test_mutation.py) must be reported, device by device, with exit 1.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import collectives._all_gather
import oracles
from oracles import Call
from scenarios.cli import main

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "scenarios" / "library"
COLLECTIVE_SCENARIOS = sorted(p for p in LIBRARY.glob("*.toml") if "\n[collective]" in p.read_text())
GROUPS = "scenarios/library/all_gather_groups.toml"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(autouse=True)
def wide_plain_output(monkeypatch):
    """Run from the repository root, uncoloured, wide enough that table cells do not wrap."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "240")
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)


def check(capsys, *args: str) -> tuple[int, str, str]:
    """`meshsim check *args` in-process: exit code, stdout without colour codes, stderr."""
    code = main(["check", *args])
    captured = capsys.readouterr()
    return code, _ANSI.sub("", captured.out), captured.err


def _rotated(protocol):
    """all_gather whose received chunks land one place further along the gather axis (wrapping)."""
    def mutant(port, args):
        result = yield from protocol(port, args)
        return np.roll(result, result.shape[args.axis] // port.group.size, axis=args.axis)
    return mutant


def _plus_zero(protocol):
    """all_gather that adds 0.0 to its result: equal values, but -0.0 becomes +0.0."""
    def mutant(port, args):
        result = yield from protocol(port, args)
        return result + np.zeros((), result.dtype)
    return mutant


def _scenario(tmp_path: Path, text: str) -> str:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    return str(path)


# ---------------------------------------------------------------------------------------------- agreement


def test_the_library_has_collective_scenarios():
    """The parametrised check below covers the library's [collective] files (none are silently missed)."""
    assert {p.name for p in COLLECTIVE_SCENARIOS} >= {"ragged_docs_example.toml", "psum_ring.toml",
                                                      "all_gather_groups.toml", "moe_dispatch.toml"}


@pytest.mark.differential
@pytest.mark.parametrize("path", COLLECTIVE_SCENARIOS, ids=lambda p: p.stem)
def test_every_library_collective_scenario_checks_clean(path, capsys, jax_oracle):
    """Every [collective] scenario of the library: simulator == spec == JAX on every device, exit 0."""
    code, out, err = check(capsys, str(path.relative_to(ROOT)))
    assert (code, err) == (0, ""), out
    assert out.rstrip().endswith("all agree")
    assert "DIFFER" not in out and "skipped" not in out and "JAX path: " in out
    devices = int(re.search(r"\) on (\d+) devices", out).group(1))
    assert len(re.findall(r"│\s+\d+ │ [^│]+│ agree +│ agree +│", out)) == devices


@pytest.mark.differential
def test_ragged_names_the_path_jax_took(capsys, jax_oracle):
    """For ragged_all_to_all on XLA:CPU the report says JAX ran its own primitive through the CPU lowering, and why."""
    code, out, _ = check(capsys, "scenarios/library/ragged_docs_example.toml")
    assert code == 0
    assert "JAX path: cpu lowering (XLA:CPU cannot compile ragged_all_to_all: JAX ran its own primitive" in out


@pytest.mark.differential
@pytest.mark.parametrize(("name", "line"), [
    ("pbroadcast_tree", "JAX path: cpu lowering (XLA:CPU cannot compile pbroadcast: JAX ran its own primitive"),
    ("psend_pipeline", "JAX path: equivalent (XLA:CPU cannot run psend and no lowering can be registered for it: "
                       "JAX ran the equivalent its docs give: a ppermute with the same perm"),
    ("psum_ring", "JAX path: real (JAX ran the op itself)"),
])
def test_the_report_names_how_xla_cpu_ran_each_op(capsys, jax_oracle, name, line):
    """The JAX path follows the collective's binding: its own lowering, its documented equivalent, or the op."""
    code, out, _ = check(capsys, f"scenarios/library/{name}.toml")
    assert code == 0 and line in " ".join(out.split())


def test_no_jax_checks_against_the_spec_and_says_so(capsys):
    """`--no-jax` compares with the spec only; the JAX column reads 'skipped' with the reason."""
    code, out, _ = check(capsys, "--no-jax", GROUPS)
    assert code == 0 and out.rstrip().endswith("all agree")
    assert "JAX skipped: --no-jax given; checked against the spec only" in out
    assert len(re.findall(r"│ agree +│ skipped +│", out)) == 4


def test_a_mesh_larger_than_the_oracle_is_checked_against_the_spec(capsys, tmp_path):
    """On 16 devices JAX is skipped (the oracle runs at most 8) with the reason; not a failure: exit 0."""
    path = _scenario(tmp_path, '[mesh]\naxes = {i = 16}\n[collective]\nop = "psum"\naxis_name = "i"\n'
                               '[inputs]\nseed = 1\nshape = [3]\ndtype = "int32"\n')
    code, out, _ = check(capsys, path)
    assert code == 0 and out.rstrip().endswith("all agree")
    assert "JAX skipped: the mesh has 16 devices and the JAX oracle runs at most 8" in out
    assert len(re.findall(r"│ agree +│ skipped +│", out)) == 16


_RING = ('[mesh]\naxes = {{i = 16}}\n[collective]\nop = "{op}"\naxis_name = "i"\nalgorithm = "{algorithm}"\n'
         '[inputs]\nseed = 3\nshape = [64]\ndtype = "float32"\n')


@pytest.mark.parametrize("op", ["psum", "pmean", "pmax"])
@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling"])
def test_a_reordered_float_reduction_agrees_within_its_bound(op, algorithm, capsys, tmp_path):
    """A float reduction whose algorithm adds in another order than XLA's is compared within that order's
    rounding bound (the 16-device ring psum differs from the spec in the last bits, and agrees)."""
    code, out, _ = check(capsys, _scenario(tmp_path, _RING.format(op=op, algorithm=algorithm)))
    assert code == 0 and out.rstrip().endswith("all agree"), out
    assert f"algorithm='{algorithm}' adds in its own documented order" in out


def test_a_reduction_off_by_more_than_its_bound_is_reported(capsys, monkeypatch, tmp_path):
    """A ring psum whose result is off by one part in a thousand breaks the bound: exit 1 on every device."""
    import collectives._allreduce

    ring = collectives._allreduce._PROTOCOLS[collectives._allreduce.RING]

    def off(port, args):
        result = yield from ring(port, args)
        return result * np.float32(1.001)

    monkeypatch.setitem(collectives._allreduce._PROTOCOLS, collectives._allreduce.RING, off)
    code, out, _ = check(capsys, _scenario(tmp_path, _RING.format(op="psum", algorithm="ring")))
    assert code == 1 and out.rstrip().endswith("16 disagreements"), out


# ---------------------------------------------------------------------------------------------- disagreement


def test_a_wrong_simulator_is_reported_with_exit_1(capsys, monkeypatch):
    """A rotated all_gather: every device DIFFERs from the spec, with the first differing element's index,
    both values and bits, and the final line counts the disagreements."""
    monkeypatch.setattr(collectives._all_gather, "_protocol", _rotated(collectives._all_gather._protocol))
    code, out, _ = check(capsys, "--no-jax", GROUPS)
    assert code == 1
    assert len(re.findall(r"│ DIFFER +│ skipped +│ \[0, 0\]: simulator \d+ \(0x[0-9a-f]{8}\), spec \d+ "
                          r"\(0x[0-9a-f]{8}\); \d+ elements differ", out)) == 4
    assert out.rstrip().endswith("4 disagreements")


@pytest.mark.differential
def test_a_wrong_simulator_disagrees_with_jax_too(capsys, monkeypatch, jax_oracle):
    """With JAX running, the rotated all_gather differs from both the spec and JAX on every device: exit 1."""
    monkeypatch.setattr(collectives._all_gather, "_protocol", _rotated(collectives._all_gather._protocol))
    code, out, _ = check(capsys, GROUPS)
    assert code == 1
    assert len(re.findall(r"│ DIFFER +│ DIFFER +│ \[0, 0\]: simulator", out)) == 4
    assert out.rstrip().endswith("8 disagreements")


def test_bytes_not_values_are_compared(capsys, monkeypatch, tmp_path):
    """A simulator that turns -0.0 into +0.0 (equal values) is caught: the bits 0x00000000 vs 0x80000000."""
    monkeypatch.setattr(collectives._all_gather, "_protocol", _plus_zero(collectives._all_gather._protocol))
    path = _scenario(tmp_path, '[mesh]\naxes = {x = 2}\n[collective]\nop = "all_gather"\naxis_name = "x"\n'
                               '[[device]]\nx = [-0.0, 1.0]\n[[device]]\nx = [2.0, 3.0]\n')
    code, out, _ = check(capsys, "--no-jax", path)
    assert code == 1
    assert out.count("[0, 0]: simulator 0.0 (0x00000000), spec -0.0 (0x80000000); 1 element differ") == 2
    assert out.rstrip().endswith("2 disagreements")


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("args, message", [
    pytest.param(["missing.toml"], r"missing\.toml: cannot read the scenario file", id="missing-file"),
    pytest.param(["scenarios/library/transpose_1_psum_unmapped.toml"],
                 r"transpose_1_psum_unmapped\.toml: a \[program\] has no independent answer .*check supports "
                 r"\[collective\] scenarios", id="program-scenario"),
    pytest.param(["scenarios/library/layout_guide.py"],
                 r"layout_guide\.py: a Python script gives no collective call to compare; check supports "
                 r"\[collective\] scenarios", id="python-script"),
])
def test_bad_input_exits_2_with_one_message(args, message, capsys):
    """Unreadable files and scenarios without a collective call exit 2 with one `meshsim: error:` line."""
    code, out, err = check(capsys, *args)
    assert code == 2 and out == ""
    assert re.fullmatch(rf"meshsim: error: .*{message}.*\n", err, flags=re.DOTALL)


def test_a_broken_scenario_exits_2_naming_file_line_and_field(capsys, tmp_path):
    """A scenario breaking the format: exit 2, the message names the file, the line and the field."""
    path = _scenario(tmp_path, '[mesh]\naxes = {x = 2}\n[collective]\nop = "psum"\naxis_name = "z"\n'
                               '[inputs]\nseed = 0\nshape = [2]\n')
    code, _, err = check(capsys, path)
    assert code == 2
    assert re.match(rf"meshsim: error: {re.escape(path)}:5: \[collective\] .*axis_name", err)


def test_help_lists_check(capsys):
    """`meshsim --help` lists `check` with its one-line help."""
    with pytest.raises(SystemExit):
        main(["--help"])
    assert re.search(r"check\s+compare the simulator with the executable spec and real JAX", capsys.readouterr().out)


# ---------------------------------------------------------------------------------------------- the report


def test_report_gives_first_index_values_and_bits_of_a_difference():
    """`oracles.check` on a hand-made wrong answer: the difference names device, count, first index, both
    values and both bit patterns; a NaN payload change counts."""
    quiet, payload = np.array([0x7FC00000, 0x7FC00001], np.uint32).view(np.float32)
    xs = (np.array([1.0, quiet], np.float32), np.array([2.0, 3.0], np.float32))
    call = Call("psum", {"i": 2}, (xs,), {"axis_name": "i"})
    wrong = [np.array([3.0, quiet], np.float32), np.array([3.0, payload], np.float32)]
    report = oracles.check(call, wrong, None, jax_skipped="not asked")
    assert report.disagreements == 1 and not report.agree
    assert report.spec.on(0) == [] and report.jax.skipped == "not asked"
    (difference,) = report.spec.on(1)
    assert (difference.kind, difference.device, difference.count, difference.first_index) == ("bytes", 1, 1, (1,))
    assert difference.first_bits() == ("0x7fc00000", "0x7fc00001")


def test_report_names_a_dtype_difference():
    """An answer in another dtype with equal values is an "aval" difference."""
    call = Call("all_gather", {"x": 2}, ((np.array([1], np.int32), np.array([2], np.int32)),), {"axis_name": "x"})
    wrong = [np.array([[1], [2]], np.int64)] * 2
    report = oracles.check(call, wrong, None, jax_skipped="not asked")
    assert [d.kind for d in report.spec.differences] == ["aval", "aval"]
    assert oracles.describe(report.spec.differences[0]) == \
        "device 0: simulator != spec: simulator gives int64[2, 1], spec gives int32[2, 1]"
