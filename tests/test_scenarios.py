"""Scenario files: every bundled one runs and matches plain numpy; broken ones fail with file, field and line.

The expected values come from `scenario_references.py`: the scenario's inputs with numpy alone (the ragged one by
transcribing the docs' SEND/RECEIVE loop); nothing below calls the simulator to get an expected value.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from scenario_references import reference

import layouts
import scenarios
import sim
from scenarios import ScenarioError

ROOT = Path(__file__).resolve().parents[1]
ALL_FILES = sorted((ROOT / "scenarios" / "library").glob("*.toml"))
# files with a [program] table run a whole program (tests/test_program_scenarios.py); these run one collective
# that the references below know (test_library.py checks every collective file against the executable spec)
SCENARIO_FILES = [p for p in ALL_FILES if tomllib.loads(p.read_text()).get("collective", {}).get("op") in
                  ("all_gather", "all_to_all", "ragged_all_to_all", "psum", "ppermute")]

DOCS_EXAMPLE = (ROOT / "scenarios" / "library" / "ragged_docs_example.toml").read_text()


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.stem)
def test_scenario_matches_numpy(path):
    """Every device's result equals the numpy reference, in value and dtype, and so does who wrote each row."""
    scenario = scenarios.load(path)
    result = scenarios.run(scenario)
    expected, senders, axis = reference(scenario)
    assert len(result.outputs) == scenario.mesh.size
    for d, output in enumerate(result.outputs):
        np.testing.assert_array_equal(output, expected[d])
        assert output.dtype == expected[d].dtype
        if senders[d] is None:
            assert result.provenance[d] is None
            continue
        assert result.provenance[d].axis == axis
        assert list(result.provenance[d].sources) == senders[d]


def test_bundled_scenarios_cover_every_op():
    """The bundled files include the docs example, the MoE dispatch, an all_gather and an all_to_all."""
    ops = {path.stem: scenarios.load(path).op for path in SCENARIO_FILES}
    assert ops["ragged_docs_example"] == ops["moe_dispatch"] == "ragged_all_to_all"
    assert {"all_gather", "all_to_all"} <= set(ops.values())


def test_docs_example_gives_the_documented_results():
    """The docs' 2-device ragged example gives [1, 3, 0, 0] and [2, 2, 4, 0], rows 2: and 3: kept from output."""
    result = scenarios.run(scenarios.load(ROOT / "scenarios" / "library" / "ragged_docs_example.toml"))
    assert [o.tolist() for o in result.outputs] == [[1, 3, 0, 0], [2, 2, 4, 0]]
    assert [p.sources for p in result.provenance] == [(0, 1, None, None), (0, 0, 1, None)]


def test_all_gather_groups_gives_the_documented_results():
    """The all_gather docs' groups [[0, 2], [3, 1]] give [x0, x2] on devices 0 and 2, [x3, x1] on 1 and 3."""
    result = scenarios.run(scenarios.load(ROOT / "scenarios" / "library" / "all_gather_groups.toml"))
    x = np.arange(16).reshape(4, 4)
    for d in range(4):
        assert result.outputs[d].tolist() == (x[[0, 2]] if d % 2 == 0 else x[[3, 1]]).tolist()


def test_moe_dispatch_is_uneven_with_empty_slices_and_padding():
    """MoE dispatch: 4 devices of 2-D float tokens, uneven counts with zero-size slices, padding in outputs."""
    scenario = scenarios.load(ROOT / "scenarios" / "library" / "moe_dispatch.toml")
    result = scenarios.run(scenario)
    sends = np.array([a["send_sizes"] for a in scenario.inputs])
    assert scenario.mesh.size == 4 and scenario.inputs[0]["operand"].ndim == 2
    assert scenario.inputs[0]["operand"].dtype == np.float32
    assert (sends == 0).any() and len(set(sends.ravel().tolist())) > 2
    assert all(None in p.sources for p in result.provenance)
    written = sum(sum(s is not None for s in p.sources) for p in result.provenance)
    assert written == sends.sum()
    assert all(m.size_bytes > 0 for m in result.trace)  # empty slices send no message


def test_end_time_is_the_last_arrival():
    """The reported simulated time is when the last message arrived, and no message arrives before it is sent."""
    for path in SCENARIO_FILES:
        result = scenarios.run(scenarios.load(path))
        assert result.end_time_s == max(m.arrival_time_s for m in result.trace)
        assert all(m.arrival_time_s >= m.send_time_s for m in result.trace)


def test_seeded_inputs_are_reproducible(tmp_path):
    """The same seed draws the same inputs, each device gets its own draw, and another seed draws others."""
    text = (ROOT / "scenarios" / "library" / "all_to_all_seeded.toml").read_text()
    first = scenarios.load(ROOT / "scenarios" / "library" / "all_to_all_seeded.toml")
    again = scenarios.load(ROOT / "scenarios" / "library" / "all_to_all_seeded.toml")
    (tmp_path / "other.toml").write_text(text.replace("seed = 0", "seed = 1"))
    other = scenarios.load(tmp_path / "other.toml")
    for a, b, c in zip(first.inputs, again.inputs, other.inputs):
        assert a["x"].dtype == np.float32 and a["x"].shape == (4, 3)
        np.testing.assert_array_equal(a["x"], b["x"])
        assert not np.array_equal(a["x"], c["x"])
    assert not np.array_equal(first.inputs[0]["x"], first.inputs[1]["x"])


def test_literal_dtypes_and_fill(tmp_path):
    """Integer literals become int32, a float anywhere makes data float32, `{fill, shape}` builds a constant."""
    path = tmp_path / "fill.toml"
    path.write_text(DOCS_EXAMPLE.replace("output = [0, 0, 0, 0]", "output = {fill = 7, shape = [4]}"))
    scenario = scenarios.load(path)
    assert scenario.inputs[0]["output"].tolist() == [7, 7, 7, 7]
    assert scenario.inputs[0]["operand"].dtype == np.int32 and scenario.inputs[0]["send_sizes"].dtype == np.int32
    path.write_text(DOCS_EXAMPLE.replace("operand = [1, 2, 2]", "operand = [1, 2, 2.5]"))
    scenario = scenarios.load(path)
    assert {a[name].dtype for a in scenario.inputs for name in ("operand", "output")} == {np.dtype(np.float32)}


_PSUM_OF = '[mesh]\naxes = {{x = 2}}\n[collective]\nop = "psum"\naxis_name = "x"\n{inputs}[[device]]\nx = {x}\n' \
    '[[device]]\nx = {other}\n'

# (id, [inputs] lines, device 0's x, device 1's x, message after the path): literals a dtype cannot hold
UNHELD = [
    ("1e40 as float32", "", "[1e40, 2]", "[1, 2]",
     r":7: \[\[device\]\] for device 0: x\[0\] holds 1e\+40, which float32 cannot hold: it would become inf; a finite "
     r"value must stay finite; change the value or \[inputs\] dtype"),
    ("70000.0 as float16", '[inputs]\ndtype = "float16"\n', "[70000.0, 1.0]", "[1.0, 2.0]",
     r":9: .*device 0: x\[0\] holds 70000.0, which float16 cannot hold: it would become inf"),
    ("16777217 as float32", '[inputs]\ndtype = "float32"\n', "[16777217, 1]", "[1, 2]",
     r":9: .*device 0: x\[0\] holds the integer 16777217, which float32 cannot represent exactly: it would become "
     r"16777216.0; an integer literal must be held exactly \(a literal with a fraction or an exponent rounds"),
    ("an integer among floats", "", "[1.5, 2.5]", "[0.5, 16777217]",
     r":9: .*device 1: x\[1\] holds the integer 16777217, which float32 cannot"),
    ("an index in two dimensions", "", "[[1, 2], [3, 4]]", "[[0.5, 2], [3, 16777217]]",
     r":9: .*device 1: x\[1, 1\] holds the integer 16777217"),
    ("a fill", '[inputs]\ndtype = "float16"\n', "{fill = 2049, shape = [2]}", "[1, 2]",
     r":9: .*device 0: x\[0\] holds the integer 2049, which float16 cannot represent exactly: it would become 2048.0"),
    ("a scalar past int64 in float64", '[inputs]\ndtype = "float64"\n', "9007199254740993", "1",
     r":9: .*device 0: x holds the integer 9007199254740993, which float64 cannot represent exactly"),
    ("a negative float8_e8m0fnu", '[inputs]\ndtype = "float8_e8m0fnu"\n', "[-2.0]", "[2.0]",
     r":9: .*device 0: x\[0\] holds -2.0, which float8_e8m0fnu cannot hold: it would become nan"),
    ("300 as int8", '[inputs]\ndtype = "int8"\n', "[1, 300]", "[1, 2]",
     r":9: .*device 0: x\[1\] holds 300, which int8 cannot represent exactly"),
]


@pytest.mark.parametrize("inputs, x, other, message", [row[1:] for row in UNHELD], ids=[row[0] for row in UNHELD])
def test_literals_the_dtype_cannot_hold_are_refused(tmp_path, inputs, x, other, message):
    """A literal the cast would change beyond rounding (a finite value overflowing to inf or NaN, an integer
    literal the float dtype rounds, a value an integer dtype lacks) is refused naming the device, the array,
    the index and the rule, never cast silently."""
    path = tmp_path / "bad.toml"
    path.write_text(_PSUM_OF.format(inputs=inputs, x=x, other=other))
    with pytest.raises(ScenarioError, match=re.escape(str(path)) + message):
        scenarios.load(path)


@pytest.mark.parametrize(("dtype", "x", "expected"), [
    ("float16", "[0.1, 1e-3]", [np.float16(0.1), np.float16(1e-3)]),  # decimals take the nearest float
    ("float32", "[16777217.0, 1e20]", [16777216.0, np.float32(1e20)]),  # float literals round too
    ("float32", "[1e-50, -0.0]", [0.0, -0.0]),  # below the smallest subnormal: the nearest is zero
    ("float32", "[inf, -inf]", [np.inf, -np.inf]),  # infinities stay infinite
    ("float32", "[16777216, -16777216]", [16777216.0, -16777216.0]),  # integers it holds
    ("float64", "[9007199254740992, 0.5]", [2.0**53, 0.5]),
    ("bfloat16", "[256, 0.1]", [256.0, float(np.asarray(0.1).astype(layouts.BFLOAT16))]),
])
def test_literals_rounding_to_the_nearest_float_are_accepted(tmp_path, dtype, x, expected):
    """A literal with a fraction or an exponent becomes the float dtype's nearest value, as numpy reads it;
    integers the dtype holds, infinities and values that round to zero are kept."""
    path = tmp_path / "ok.toml"
    path.write_text(_PSUM_OF.format(inputs=f'[inputs]\ndtype = "{dtype}"\n', x=x, other=x))
    held = scenarios.load(path).inputs[0]["x"]
    assert held.astype(np.float64).tolist() == [float(np.asarray(e).astype(held.dtype)) for e in expected]
    assert np.signbit(held).tolist() == np.signbit(np.asarray(expected, np.float64)).tolist()


def test_program_arguments_follow_the_same_rule(tmp_path):
    """An `[[args]]` value is held to the rule of `[[device]]` literals: 1e40 as float32 is refused, 0.1 rounds."""
    program = ('[mesh]\naxes = {{i = 2}}\n[program]\nsource = """\ndef f(x):\n    return x\n"""\n'
               'in_specs = "P()"\nout_specs = "P()"\n[[args]]\nvalue = [0.1, {v}]\n')
    path = tmp_path / "args.toml"
    path.write_text(program.format(v="1e40"))
    with pytest.raises(ScenarioError, match=r"\[\[args\]\] number 0: value\[1\] holds 1e\+40, which float32 cannot "
                                            r"hold: it would become inf"):
        scenarios.load(path)
    path.write_text(program.format(v="16777216"))
    assert scenarios.load(path).args[0].tolist() == [np.float32(0.1), 16777216.0]


def test_inputs_and_outputs_are_read_only():
    """A loaded scenario and its result cannot be changed in place."""
    result = scenarios.run(scenarios.load(ROOT / "scenarios" / "library" / "ragged_docs_example.toml"))
    with pytest.raises(ValueError, match="read-only"):
        result.inputs[0]["operand"][0] = 9
    with pytest.raises(ValueError, match="read-only"):
        result.outputs[0][0] = 9


# One row per broken file: (id, edits applied to the docs example, expected message after "bad.toml").
BAD = [
    ("unknown op", [('op = "ragged_all_to_all"', 'op = "foo"')],
     r":12: \[collective\] op='foo' must be one of 'all_gather', 'all_to_all', 'ragged_all_to_all'"),
    ("toml syntax", [("axes = {x = 2}", "axes = {x = 2")], r":9: invalid TOML: .*line 9"),
    ("unknown axis", [('axis_name = "x"', 'axis_name = "y"')], r":13: \[collective\] axis_name='y': unknown axis"),
    ("zero axis size", [("axes = {x = 2}", "axes = {x = 0}")], r":9: \[mesh\] axes=\{'x': 0\} must be"),
    ("param of another op", [('axis_name = "x"', 'axis_name = "x"\ntiled = true')],
     r":14: \[collective\] unknown key 'tiled'; allowed keys: op, axis_name, axis_index_groups"),
    ("param type", [('axis_name = "x"', "axis_name = 3")], r":13: \[collective\] axis_name=3 must be a mesh axis"),
    ("bad groups", [('axis_name = "x"', 'axis_name = "x"\naxis_index_groups = [[0], [0]]')],
     r":14: \[collective\] axis_index_groups=\[\[0\], \[0\]\] .* must cover every axis index exactly once"),
    ("negative latency", [("[collective]", "[network]\nlatency_s = -1\n\n[collective]")],
     r":12: \[network\] latency_s=-1 must be a finite number >= 0"),
    ("infinite latency", [("[collective]", "[network]\nlatency_s = inf\n\n[collective]")],
     r":12: \[network\] latency_s=inf must be a finite number >= 0"),
    ("one device table", [("axes = {x = 2}", "axes = {x = 1}")],
     r":15: there are 2 \[\[device\]\] tables but the mesh has 1 device; give one per device"),
    ("unknown topology", [("[collective]", '[network]\ntopology = "mesh"\n\n[collective]')],
     r":12: \[network\] topology='mesh' must be one of fully_connected, switch, ring, torus, hierarchical"),
    ("unknown preset", [("[collective]", '[network]\npreset = "tpu-v9"\n\n[collective]')],
     r":12: \[network\] preset='tpu-v9' is not a known preset; known presets: tpu-v4p, "),
    ("torus too big", [("[collective]", '[network]\ntopology = "torus"\nshape = [2, 2]\n\n[collective]')],
     r":13: \[network\] a mesh of 2 devices does not fit torus shape=\(2, 2\) \(4 devices\)"),
    ("shape of a switch", [("[collective]", '[network]\ntopology = "switch"\nshape = [2]\n\n[collective]')],
     r":13: \[network\] shape does not apply to topology='switch'; it applies to: torus"),
    ("preset with a latency", [("[collective]", '[network]\npreset = "tpu-v5e"\nlatency_s = 1\n\n[collective]')],
     r":13: \[network\] latency_s cannot go with preset='tpu-v5e'"),
    ("unknown calibration", [("[collective]", '[network]\npreset = "tpu-v5e"\ncalibration = "x"\n\n[collective]')],
     r":13: \[network\] calibration='x' must be 'measured' \(fitted to published measurements\) or 'ideal'"),
    ("calibration without a preset", [("[collective]", '[network]\ncalibration = "ideal"\n\n[collective]')],
     r":12: \[network\] calibration='ideal' goes with a preset"),
    ("bad wraparound", [("[collective]", '[network]\ntopology = "torus"\nwraparound = [true, false]\n\n[collective]')],
     r":13: \[network\] wraparound=\(True, False\) must have one entry per dimension of shape=\(2,\)"),
    ("wraparound type", [("[collective]", '[network]\ntopology = "ring"\nwraparound = "no"\n\n[collective]')],
     r":13: \[network\] wraparound='no' must be true, false or a list of them"),
    ("missing argument", [("recv_sizes = [1, 1]\n", "")],
     r":15: \[\[device\]\] for device 0: recv_sizes is missing"),
    ("misspelt argument", [("recv_sizes = [2, 1]", "recv_size = [2, 1]")],
     r":29: \[\[device\]\] for device 1: unknown key 'recv_size'"),
    ("ragged nesting", [("operand = [3, 4, 0]", "operand = [[3], [4, 0]]")],
     r":24: \[\[device\]\] for device 1: operand=\[\[3\], \[4, 0\]\] must be a number or a rectangular array"),
    ("shape differs", [("operand = [3, 4, 0]", "operand = [3, 4, 0, 5]")],
     r":24: \[\[device\]\] for device 1: operand has shape \[4\] but device 0's has \[3\]"),
    ("float size", [("send_sizes = [1, 1]", "send_sizes = [1.5, 1]")], r":27: .*send_sizes=.* must hold integers"),
    ("lossy dtype", [("operand = [3, 4, 0]", "operand = [3, 4.5, 0]"),
                     ("[[device]]  # device 0", '[inputs]\ndtype = "int32"\n\n[[device]]')],
     r":27: \[\[device\]\] for device 1: operand\[1\] holds 4.5, which int32 cannot represent exactly"),
    ("bad dtype", [("[[device]]  # device 0", '[inputs]\ndtype = "complex"\n\n[[device]]')],
     r":16: \[inputs\] dtype='complex' must name a numeric numpy dtype"),
    ("bad fill", [("output = [0, 0, 0, 0]", "output = {fill = 0}")],
     r":17: .*output=\{'fill': 0\} must be an array or"),
    ("device count", [("[[device]]  # device 1", "[[dev]]")], r":23: unknown key 'dev'"),
    ("seed for ragged", [("[[device]]  # device 0", "[inputs]\nseed = 1\nshape = [3]\n\n[[device]]")],
     r":19: \[\[device\]\] tables and \[inputs\] seed/shape are alternatives"),
    ("missing collective", [("[collective]", "[other]")], r":11: unknown key 'other'"),
]


@pytest.mark.parametrize("edits, message", [row[1:] for row in BAD], ids=[row[0] for row in BAD])
def test_broken_file_names_file_field_and_line(tmp_path, edits, message):
    """A broken scenario raises ScenarioError reading `path:line: [table] field=value must ...`."""
    _load_edited(tmp_path, DOCS_EXAMPLE, edits, message)


def _load_edited(tmp_path, text: str, edits, message: str) -> None:
    """Load `text` with `edits` applied; it must fail with `message` after the file's path."""
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=re.escape(str(path)) + message):
        scenarios.load(path)


def test_wrong_device_count_is_reported(tmp_path):
    """A [[device]] table count other than the mesh size is an error naming both numbers."""
    path = tmp_path / "bad.toml"
    path.write_text(DOCS_EXAMPLE.replace("axes = {x = 2}", "axes = {x = 4}"))
    with pytest.raises(ScenarioError, match=r"bad.toml:15: there are 2 \[\[device\]\] tables but the mesh has 4"):
        scenarios.load(path)


def test_one_device_table_is_said_in_the_singular(tmp_path):
    """One [[device]] table for a mesh of two devices: 'there is 1 [[device]] table', never '1 tables'."""
    path = tmp_path / "one.toml"
    path.write_text(_PSUM_OF.format(inputs="", x="[1, 2]", other="[3, 4]").rsplit("[[device]]", 1)[0])
    with pytest.raises(ScenarioError, match=r"one.toml:6: there is 1 \[\[device\]\] table but the mesh has 2 devices"):
        scenarios.load(path)


def test_missing_file_is_reported():
    """An unreadable path is a ScenarioError naming it, not an OSError."""
    with pytest.raises(ScenarioError, match=r"nope\.toml: cannot read the scenario file"):
        scenarios.load("nope.toml")


def test_simulator_rejection_is_a_scenario_error(tmp_path):
    """Inputs the simulator rejects give a ScenarioError naming the file and carrying the simulator's reasons."""
    path = tmp_path / "sizes.toml"
    path.write_text(DOCS_EXAMPLE.replace("send_sizes = [1, 2]", "send_sizes = [1, 1]"))
    scenario = scenarios.load(path)
    with pytest.raises(ScenarioError, match="(?s)" + re.escape(str(path)) + r": the simulator rejected .*"
                                            r"send_sizes must equal the all_to_all of recv_sizes"):
        scenarios.run(scenario)


def test_seed_draws_only_the_one_array_ops(tmp_path):
    """`[inputs] seed` is refused for ragged_all_to_all, whose offsets and sizes must be written out."""
    path = tmp_path / "seeded_ragged.toml"
    path.write_text(DOCS_EXAMPLE.split("[[device]]")[0] + "[inputs]\nseed = 0\nshape = [3]\n")
    with pytest.raises(ScenarioError, match=r"seeded_ragged.toml:16: \[inputs\] seed draws the one array x of "
                                            r"a collective that takes only x; ragged_all_to_all needs literal"):
        scenarios.load(path)


def test_all_empty_slices_keep_every_row(tmp_path):
    """A ragged call whose slices are all empty sends nothing, takes no time, and keeps every output row."""
    path = tmp_path / "empty.toml"
    text = re.sub(r"(send_sizes|recv_sizes) = \[\d, \d\]", r"\1 = [0, 0]", DOCS_EXAMPLE)
    path.write_text(text.replace("output = [0, 0, 0, 0]", "output = [5, 6, 7, 8]"))
    result = scenarios.run(scenarios.load(path))
    assert len(result.trace) == 0 and result.end_time_s == 0
    assert [o.tolist() for o in result.outputs] == [[5, 6, 7, 8], [5, 6, 7, 8]]
    assert [p.sources for p in result.provenance] == [(None,) * 4] * 2


# Rows for the collectives beyond the docs' three: (id, bundled file, edits, expected message after the path).
BAD_PARAMS = [
    ("unknown algorithm", "psum_ring", [('algorithm = "ring"', 'algorithm = "butterfly"')],
     r":13: \[collective\] algorithm='butterfly' must be one of 'direct', 'ring', 'recursive_doubling'"),
    ("perm not pairs", "ppermute_shift", [("perm = [[0, 1], [1, 0]]", "perm = [0, 1]")],
     r":11: \[collective\] perm=\[0, 1\] must be a list of \[source, destination\] pairs"),
    ("perm missing", "ppermute_shift", [("perm = [[0, 1], [1, 0]]\n", "")],
     r":8: \[collective\] perm is missing; it is required"),
    ("key of another collective", "psum_ring", [('algorithm = "ring"', "tiled = true")],
     r":13: \[collective\] unknown key 'tiled'; allowed keys: op, axis_name, axis_index_groups, algorithm"),
]


@pytest.mark.parametrize("name, edits, message", [row[1:] for row in BAD_PARAMS], ids=[row[0] for row in BAD_PARAMS])
def test_parameters_follow_their_definition_rules(tmp_path, name, edits, message):
    """Each collective's parameters are checked by the rules of its definition, naming the file and line."""
    _load_edited(tmp_path, (ROOT / "scenarios" / "library" / f"{name}.toml").read_text(), edits, message)


PVARY = """
[mesh]
axes = {x = 2, y = 2}

[collective]
op = "pvary"
axis_name = "x"

[[device]]
x = [1, 2]

[[device]]
x = [3, 4]

[[device]]
x = [1, 2]

[[device]]
x = [3, 4]
"""


def test_invariant_operands_are_passed_once_and_checked(tmp_path):
    """pvary takes an operand invariant along its axis: devices that differ only along it must agree
    (else the file is refused naming both devices); the result keeps each device's value and sends nothing."""
    path = tmp_path / "pvary.toml"
    path.write_text(PVARY)
    result = scenarios.run(scenarios.load(path))
    assert [o.tolist() for o in result.outputs] == [[1, 2], [3, 4], [1, 2], [3, 4]]
    assert len(result.trace) == 0 and result.provenance == (None,) * 4
    path.write_text(PVARY.replace("x = [3, 4]", "x = [3, 5]", 1))
    with pytest.raises(ScenarioError, match=r"pvary.toml:\d+: \[\[device\]\] for device 3: x differs from "
                                            r"device 1's, but pvary takes an operand invariant along "
                                            r"axis_name='x'"):
        scenarios.load(path)


def test_seeded_invariant_operands_share_their_draw(tmp_path):
    """Drawn from a seed, pscatter's operand is one draw per row of devices along the other axes."""
    path = tmp_path / "pscatter.toml"
    path.write_text(PVARY.split("[[device]]")[0].replace("pvary", "pscatter")
                    + "[inputs]\nseed = 3\nshape = [2, 3]\n")
    scenario = scenarios.load(path)
    x = [a["x"] for a in scenario.inputs]
    assert x[0] is x[2] and x[1] is x[3] and not np.array_equal(x[0], x[1])
    result = scenarios.run(scenario)
    assert [o.tolist() for o in result.outputs] == [x[0][0].tolist(), x[1][0].tolist(), x[0][1].tolist(),
                                                    x[1][1].tolist()]


def test_axis_index_needs_no_inputs(tmp_path):
    """axis_index takes no arrays: a file without [[device]] tables gives each device its index, tuple
    axis names row-major in the tuple's order."""
    path = tmp_path / "axis_index.toml"
    path.write_text('[mesh]\naxes = {x = 2, y = 2}\n\n[collective]\nop = "axis_index"\naxis_name = ["y", "x"]\n')
    result = scenarios.run(scenarios.load(path))
    assert [int(o) for o in result.outputs] == [0, 2, 1, 3] and len(result.trace) == 0


def test_network_keys_build_the_topology(tmp_path):
    """`[network]` keys: a torus shaped like the mesh by default, a ring with its wraparound, a hierarchical
    network with its node figures, and a preset over the mesh's shape; `meshsim run --json` states them."""
    base = (ROOT / "scenarios" / "library" / "all_to_all_seeded.toml").read_text()
    tables = {
        'topology = "torus"\nwraparound = [true, false]': ("torus", (2, 2), (True, False)),
        'topology = "ring"\nwraparound = false': ("ring", (4,), (False,)),
        'topology = "hierarchical"\nnode_size = 2\ninter_bandwidth_bytes_per_s = 1e9': ("hierarchical", (2, 2), None),
        'preset = "tpu-v5e"': ("torus", (2, 2), (False, False)),
        'preset = "tpu-v5e"\ncalibration = "ideal"': ("torus", (2, 2), (False, False)),
        'topology = "switch"\nstore_and_forward = true': ("switch", None, None),
    }
    for table, (topology, shape, wraparound) in tables.items():
        text = base.replace("latency_s = 5e-6\nbandwidth_bytes_per_s = 25e9", table)
        path = tmp_path / "network.toml"
        path.write_text(text)
        network = scenarios.load(path).mesh.network
        facts = scenarios.run(scenarios.load(path)).to_dict()["network"]
        assert (network.topology, network.shape, network.wraparound) == (topology, shape, wraparound), table
        assert facts["topology"] == topology and facts.get("wraparound") == (None if wraparound is None
                                                                              else list(wraparound))
    library = scenarios.load(ROOT / "scenarios" / "library" / "moe_all_to_all_tpu_v5e.toml")
    assert library.mesh.network == sim.Network.preset("tpu-v5e", (2, 4))
    path.write_text(base.replace("latency_s = 5e-6\nbandwidth_bytes_per_s = 25e9",
                                 'preset = "tpu-v5e"\ncalibration = "ideal"'))
    ideal = scenarios.load(path).mesh.network
    assert ideal == sim.Network.preset("tpu-v5e", (2, 2), "ideal") != sim.Network.preset("tpu-v5e", (2, 2))
    assert "costs" not in scenarios.run(scenarios.load(path)).to_dict()["network"]
    measured = scenarios.run(library).to_dict()["network"]["costs"]
    assert measured["efficiency"] == sim.Network.preset("tpu-v5e").costs.efficiency < 1


def test_network_keys_set_routing_and_fabric(tmp_path):
    """`multipath` on a ring or torus and the leaf/spine keys of a hierarchical network reach the `Network`;
    a key on a topology it does not apply to, or of the wrong type, is an error on its line."""
    base = (ROOT / "scenarios" / "library" / "all_to_all_seeded.toml").read_text()
    path = tmp_path / "network.toml"
    path.write_text(base.replace("latency_s = 5e-6\nbandwidth_bytes_per_s = 25e9",
                                 'topology = "torus"\nmultipath = true'))
    assert scenarios.load(path).mesh.network.multipath
    path.write_text(base.replace("latency_s = 5e-6\nbandwidth_bytes_per_s = 25e9",
                                 'topology = "hierarchical"\nnode_size = 1\nleaf_size = 2\noversubscription = 2\n'
                                 'spine_latency_s = 1e-6'))
    network = scenarios.load(path).mesh.network
    assert (network.leaf_size, network.oversubscription, network.spine_latency_s) == (2, 2, 1e-6)
    assert network.route(0, 3) == (("nic_out", 0), ("up", 0), ("down", 1), ("nic_in", 3))
    for table, message in (('topology = "switch"\nmultipath = true', r"multipath does not apply to "
                                                                       r"topology='switch'"),
                           ('topology = "ring"\nmultipath = 1', r"multipath"),
                           ('topology = "hierarchical"\nnode_size = 1\noversubscription = 0', r"oversubscription")):
        path.write_text(base.replace("latency_s = 5e-6\nbandwidth_bytes_per_s = 25e9", table))
        with pytest.raises(ScenarioError, match=message):
            scenarios.load(path)


def test_sweeps_take_a_calibration_with_a_preset():
    """A sweep's network table may name a preset's calibration (and only a preset's); its label says which."""
    from scenarios.sweep._sweep_values import build_network, check_network, network_label
    table = check_network({"preset": "tpu-v5e", "calibration": "ideal"})
    assert build_network(table, (2, 4)) == sim.Network.preset("tpu-v5e", (2, 4), "ideal")
    assert network_label(table) == "tpu-v5e calibration=ideal"
    with pytest.raises(sim.InvalidArgumentError, match="calibration='ideal' goes with a preset"):
        check_network({"topology": "ring", "calibration": "ideal"})


def test_the_scenario_file_page_lists_every_key_the_loader_reads():
    """docs/reference/scenario-files.md names every `[network]` key the loader takes (with every topology and
    preset), every `[inputs]` key and the `{bits = [...]}` form of an array."""
    from scenarios._load import _NETWORK_KEYS

    page = (ROOT / "docs" / "reference" / "scenario-files.md").read_text()
    network = page[page.index("## The network"):page.index("(program-format)=")]
    missing = [key for key in _NETWORK_KEYS if f"`{key}`" not in network]
    missing += [f'"{name}"' for name in (*sim.TOPOLOGIES, *sim.PRESETS, *sim.CALIBRATIONS)
                if f'`"{name}"`' not in network]
    missing += [key for key in ("seed", "shape", "dtype", "index_dtype") if f"`{key}`" not in page]
    assert missing == [] and "{bits = [" in page
