"""The program scenarios: the transposes note's five examples, run forwards, backwards and back again; a
program's floating-point warnings at its own line."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import numpy as np
import pytest

import scenarios
import sim
from scenarios.cli import main

ROOT = Path(__file__).resolve().parents[1] / "scenarios" / "library"
EXAMPLES = {  # file: (ops of the transposed program, network bytes it sends)
    "transpose_1_psum_unmapped.toml": (["pvary", "multiply"], 0),
    "transpose_2_psum_mapped.toml": (["multiply", "psum_invariant", "pvary", "multiply"], 4 * 3 * 2 * 4),
    "transpose_3_cursed_identity.toml": ([], 0),
    "transpose_4_all_gather_invariant.toml": (["pscatter"], 0),
    "transpose_5_all_gather_mapped.toml": (["multiply", "psum_scatter"], 4 * 3 * 1 * 4),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_transposes_efficiently_and_back(name):
    """The transposed program is the note's efficient one, sends what it says, satisfies the adjoint
    identity, and transposing again gives the original program op for op."""
    result = scenarios.run(scenarios.load(ROOT / name))
    ops, sent = EXAMPLES[name]
    assert result.transposed.program.ops() == ops
    assert result.transposed.network_bytes == sent
    assert result.no_growth
    assert result.twice.network_bytes == result.forward.network_bytes
    assert np.isclose(*result.adjoint, rtol=1e-5)


def test_every_program_scenario_is_listed():
    """Each bundled program scenario has its expectations here."""
    assert {p.name for p in ROOT.glob("transpose_*.toml")} == set(EXAMPLES)


def test_cli_prints_the_typed_programs(capsys):
    """`meshsim run` shows the typed forward and transposed programs and the round trip."""
    assert main(["run", "--allow-code", str(ROOT / "transpose_1_psum_unmapped.toml")]) == 0
    out = capsys.readouterr().out
    assert "psum_invariant[axis_name='i']" in out and "pvary[axis_name='i']" in out
    assert "transposing twice gives the original program, op for op" in out


def test_broken_program_source_is_a_scenario_error(tmp_path):
    """Source that does not run is reported with the file and field."""
    text = (ROOT / "transpose_1_psum_unmapped.toml").read_text().replace("return psum", "return psumm")
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(scenarios.ScenarioError, match=r"bad.toml.*the simulator rejected the program|psumm"):
        scenarios.run(scenarios.load(tmp_path / "bad.toml"))


def test_a_failing_program_is_reported_at_its_line_in_the_file(tmp_path):
    """An exception raised inside the program (here in a helper the program calls) names the scenario file's
    line where the program's innermost frame ran."""
    (tmp_path / "bad.toml").write_text("""title = "a failing helper"
[mesh]
axes = {i = 2}
[program]
source = '''
def helper(v):
    return v + undefined_name

def f(x):
    return helper(psum(x, 'i'))
'''
in_specs = "P('i')"
out_specs = "P()"
transpose = false
[[args]]
shape = [4]
""")
    with pytest.raises(scenarios.ScenarioError, match=r"bad\.toml:7: \[program\] source failed: NameError: name "
                                                      r"'undefined_name' is not defined"):
        scenarios.run(scenarios.load(tmp_path / "bad.toml", allow_code=True))


_DIVIDING = """[mesh]
axes = {i = 4}
[program]
source = '''
def f(x):
    y = psum(x, 'i')
    return y / 0.0
'''
in_specs = "P('i')"
out_specs = "P()"
transpose = false
[[args]]
shape = [8]
"""


def test_a_programs_float_warning_points_at_its_own_line(tmp_path):
    """A division by zero in a program warns as numpy does (RuntimeWarning, 'divide by zero encountered') at
    the program's line in the scenario file, never at the simulator's wrapper; once for all four devices
    under Python's default filter, and not at all under the caller's np.errstate(divide='ignore'), which
    reaches every device's program; 'raise' makes it the program's error."""
    path = tmp_path / "divide.toml"
    path.write_text(_DIVIDING)
    scenario = scenarios.load(path, allow_code=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scenarios.run(scenario)
    assert [(w.category, str(w.message), w.filename, w.lineno) for w in caught] == \
        [(RuntimeWarning, "divide by zero encountered", str(path), 7)] * 4
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        scenarios.run(scenario)
    assert len(caught) == 1
    with warnings.catch_warnings(record=True) as caught, np.errstate(divide="ignore"):
        warnings.simplefilter("always")
        assert np.isinf(scenarios.run(scenario).forward.outputs).all()
    assert caught == []
    failed = r"divide\.toml:7: \[program\] source failed: FloatingPointError"
    with np.errstate(divide="raise"), pytest.raises(scenarios.ScenarioError, match=failed):
        scenarios.run(scenario)


def test_a_shard_map_bodys_float_warning_points_at_the_callers_line():
    """From Python, the warning of a numpy operation inside a `sim.shard_map` body names the body's line, and
    a body's own np.errstate rules inside it."""
    def body(x):
        return np.log(x - x)  # log(0): divide by zero

    def quiet(x):
        with np.errstate(divide="ignore"):
            return np.log(x - x)

    line = inspect.getsourcelines(body)[1] + 1
    mesh = sim.Mesh({"i": 2})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sim.shard_map(body, mesh=mesh, in_specs=sim.P("i"), out_specs=sim.P("i"))(np.ones(4))
        sim.shard_map(quiet, mesh=mesh, in_specs=sim.P("i"), out_specs=sim.P("i"))(np.ones(4))
    assert [(w.filename, w.lineno, str(w.message)) for w in caught] == [(__file__, line, "divide by zero "
                                                                                         "encountered")] * 2
