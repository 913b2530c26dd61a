"""The compile model: the layout guide's example, the AUTO rule, committed vs uncommitted, constraints."""

from __future__ import annotations

import contextlib
import io
import runpy
from pathlib import Path

import numpy as np
import pytest

import collectives
import sim
from layouts import AUTO, Format, Layout
from sim import P

# The guide's printed outcomes, verbatim.
GUIDE_OUTPUT = """\
-- uncommitted with mismatched layout:
x major_to_minor = (0, 1)
y major_to_minor = (0, 1)
-> `apply` called successfully

-- uncommitted with matching layout:
x major_to_minor = (0, 1)
y major_to_minor = (1, 0)
-> `apply` called successfully

-- committed with matching layout:
x major_to_minor = (0, 1)
y major_to_minor = (1, 0)
-> `apply` called successfully

-- committed with mismatched layout:
x major_to_minor = (0, 1)
y major_to_minor = (0, 1)
-> error: mismatched input layouts

"""


LAYOUT_GUIDE = Path(__file__).resolve().parents[1] / "scenarios" / "library" / "layout_guide.py"


def test_layout_guide_example(capsys):
    """The guide's whole example, transcribed: AUTO picks (0, 1) for x and (1, 0) for y, init_fn is compiled
    to produce those, and the four calls print exactly the guide's outcomes."""
    def init_fn(x, y):
        return x * 2, y * 3

    def apply_fn(x, y):
        return x[0, :], y[:, 0]

    shape = (4 * 128, 8 * 128)
    duck = sim.ShapeDtypeStruct(shape, np.float32)
    apply_exe = sim.jit(apply_fn, in_shardings=Format(Layout.AUTO),
                        out_shardings=Format(Layout.AUTO)).trace(duck, duck).lower().compile()
    arg_formats, kwarg_formats = apply_exe.input_formats
    assert len(kwarg_formats) == 0
    assert arg_formats[0].layout.major_to_minor == (0, 1)
    assert arg_formats[1].layout.major_to_minor == (1, 0)
    init_exe = sim.jit(init_fn, out_shardings=arg_formats).trace(duck, duck).lower().compile()
    assert init_exe.output_formats == arg_formats

    def test(x, y, msg):
        print(f'-- {msg}:')
        print('x major_to_minor =', x.format.layout.major_to_minor)
        print('y major_to_minor =', y.format.layout.major_to_minor)
        try:
            apply_exe(x, y)
            print('-> `apply` called successfully')
        except ValueError as e:
            assert 'does not match' in str(e)
            print('-> error: mismatched input layouts')
        print()

    ones = np.ones(shape, np.float32)
    x1 = y1 = sim.device_put(ones)
    test(x1, y1, 'uncommitted with mismatched layout')
    x2, y2 = init_exe(x1, y1)
    test(x2, y2, 'uncommitted with matching layout')
    x3 = sim.device_put(ones)
    y3 = sim.device_put(ones, Format(Layout(major_to_minor=(1, 0)), sim.SingleDeviceSharding(0)))
    test(x3, y3, 'committed with matching layout')
    x4 = sim.device_put(ones)
    y4 = sim.device_put(ones, Format(Layout(major_to_minor=(0, 1)), sim.SingleDeviceSharding(0)))
    test(x4, y4, 'committed with mismatched layout')
    assert capsys.readouterr().out == GUIDE_OUTPUT


def test_layout_guide_scenario_prints_the_guide_s_outcomes():
    """`scenarios/library/layout_guide.py` prints the guide's outcomes, then the relayout the first call made."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        runpy.run_path(str(LAYOUT_GUIDE), run_name="__main__")
    text = printed.getvalue()
    assert text.startswith(GUIDE_OUTPUT)
    assert "relayout of argument y on device 0, 2097152 bytes" in text


@pytest.fixture(scope="module")
def apply_exe() -> sim.Compiled:
    duck = sim.ShapeDtypeStruct((4, 8), np.float32)
    return sim.jit(lambda x, y: (x[0, :], y[:, 0]), in_shardings=Format(AUTO),
                   out_shardings=Format(AUTO)).trace(duck, duck).lower().compile()


def test_mismatch_error_names_the_argument_and_both_layouts(apply_exe):
    """A committed argument in the wrong layout is refused, naming it, the passed and the required layout."""
    y = sim.device_put(np.ones((4, 8), np.float32), Format(Layout((0, 1)), sim.SingleDeviceSharding(0)))
    with pytest.raises(sim.InvalidArgumentError, match=r"argument y with shape float32\[4, 8\]: passed layout "
                       r"Layout\(major_to_minor=\(0, 1\)\) does not match the required layout "
                       r"Layout\(major_to_minor=\(1, 0\)\)"):
        apply_exe(np.ones((4, 8), np.float32), y)


def test_uncommitted_argument_is_relaid_out_and_the_copy_is_traced(apply_exe):
    """An uncommitted row-major y is copied to column-major before the call: one relayout record, timed by
    CopyCost (one run per element when transposing), and the results are right."""
    y = np.arange(32, dtype=np.float32).reshape(4, 8)
    run = apply_exe.run(np.zeros((4, 8), np.float32), y)
    (record,) = run.trace
    assert (record.kind, record.detail["what"], record.size_bytes, record.detail["runs"]) == \
        ("relayout", "argument y", 128, 32)
    assert record.arrival_time_s - record.start_time_s == pytest.approx(sim.DEFAULT_COPY_COST.time_s(128, 32))
    assert run.end_time_s == pytest.approx(record.arrival_time_s)
    assert np.asarray(run.outputs[1]).tolist() == y[:, 0].tolist()
    assert not run.outputs[0].committed


@pytest.mark.parametrize("fn, shape, expected", [
    (lambda x: x[0, :], (4, 8), (0, 1)),
    (lambda x: x[:, 0], (4, 8), (1, 0)),
    (lambda x: x[2:4, 1], (4, 8), (1, 0)),
    (lambda x: x[:, 0, :], (2, 3, 4), (1, 0, 2)),
    (lambda x: x[0, :, 0], (2, 3, 4), (0, 2, 1)),
    (lambda x: x[..., 1], (2, 3, 4), (2, 0, 1)),
    (lambda x: (x[:, 0], x[0, :]), (8, 2), (1, 0)),   # the larger read (8 elements) decides
    (lambda x: x * 2, (4, 8), (0, 1)),                # elementwise: no preference, row-major
    (lambda x: x[[0, 1]], (4, 8), (0, 1)),            # advanced indexing is not a basic read
    (lambda x: (x * 2)[:, 0], (4, 8), (0, 1)),        # a derived array's reads do not count
], ids=["x[0,:]", "x[:,0]", "x[2:4,1]", "x[:,0,:]", "x[0,:,0]", "x[...,1]", "largest-read", "x*2", "x[[0,1]]",
        "(x*2)[:,0]"])
def test_auto_rule(fn, shape, expected):
    """AUTO puts the integer-indexed dimensions most major, so the selected elements are contiguous."""
    exe = sim.jit(fn, in_shardings=Format(AUTO)).trace(sim.ShapeDtypeStruct(shape, np.int32)).compile()
    assert exe.input_formats[0][0].layout.major_to_minor == expected


def test_auto_output_keeps_the_order_it_was_produced_in():
    """x.T of a row-major x comes out column-major (no copy, as XLA:CPU chooses); fresh arrays row-major."""
    duck = sim.ShapeDtypeStruct((2, 3), np.int32)
    exe = sim.jit(lambda x: (x.T, x + 1), out_shardings=Format(AUTO)).trace(duck).compile()
    assert [f.layout.major_to_minor for f in exe.output_formats] == [(1, 0), (0, 1)]
    both = sim.jit(lambda x: (x[:, 0], x.T), in_shardings=Format(AUTO),
                   out_shardings=Format(AUTO)).trace(duck).compile()
    assert both.input_formats[0][0].layout.major_to_minor == (1, 0)  # so x.T of it comes out row-major
    assert [f.layout.major_to_minor for f in both.output_formats] == [(0,), (0, 1)]


def test_with_layout_constraint_pins_an_intermediate():
    """The guide's f: x.T pinned row-major is materialised by a traced relayout; the values are x.T * 2."""
    @sim.jit
    def f(x):
        y = x.T
        y = sim.with_layout_constraint(y, Layout(major_to_minor=(0, 1)))
        return y * 2

    x = np.arange(6.0).reshape(2, 3)
    compiled = f.trace(x).compile()
    run = compiled.run(x)
    assert np.asarray(run.outputs).tolist() == (x.T * 2).tolist()
    assert [(r.kind, r.detail["what"], r.detail["major_to_minor"]) for r in run.trace] == \
        [("relayout", "with_layout_constraint", (0, 1))]


def test_with_layout_constraint_in_shard_map_keeps_the_type_and_skips_needless_copies():
    """Inside shard_map the constrained value keeps its device-variance type; constraining it again to the
    layout it has is free and copies nothing."""
    seen = {}

    def body(x):
        y = sim.with_layout_constraint(x[0], Layout((1, 0)))
        seen[sim.current().device] = (sim.vma_of(y), sim.with_layout_constraint(y, Layout((1, 0))) is y)
        return collectives.all_gather(y, "x")[None]

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"))
    out = f(np.arange(12).reshape(2, 2, 3))
    assert out[1].tolist() == np.arange(12).reshape(2, 2, 3).tolist()
    assert seen == {0: (frozenset({"x"}), True), 1: (frozenset({"x"}), True)}


def test_compiled_function_with_a_collective_over_a_named_sharding():
    """fn runs per device on its block, like a shard_map body; a column-major operand is gathered and the
    result assembled by the out sharding's spec."""
    mesh = sim.Mesh({"x": 4})
    fmt_in = Format(Layout((1, 0)), sim.NamedSharding(mesh, P("x")))
    fmt_out = Format(AUTO, sim.NamedSharding(mesh, P()))
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    exe = sim.jit(lambda b: collectives.all_gather(b, "x", tiled=True), in_shardings=fmt_in,
                  out_shardings=fmt_out).trace(sim.device_put(x, fmt_in)).compile()
    run = exe.run(sim.device_put(x, fmt_in))
    assert np.asarray(run.outputs).tolist() == x.tolist() and run.outputs.committed
    assert len([m for m in run.trace if m.src != m.dst]) == 12


def test_a_replication_claim_is_checked():
    """An out sharding that replicates a result the devices computed differently is refused."""
    mesh = sim.Mesh({"x": 2})
    fmt = Format(Layout((0,)), sim.NamedSharding(mesh, P("x")))
    exe = sim.jit(lambda b: b, in_shardings=fmt, out_shardings=sim.NamedSharding(mesh, P())).trace(
        sim.ShapeDtypeStruct((4,), np.int32, fmt.sharding)).compile()
    with pytest.raises(sim.InvalidArgumentError, match=r"devices 0 and 1 hold the same block, but their values differ"):
        exe(sim.device_put(np.arange(4, dtype=np.int32), fmt))


DUCK = sim.ShapeDtypeStruct((2, 3), np.float32)
MESH = sim.Mesh({"x": 2})

BAD_COMPILES = [
    pytest.param(lambda: sim.jit(lambda x, y: x, in_shardings=(Format(AUTO),)).trace(DUCK, DUCK).compile(),
                 sim.InvalidArgumentError, r"in_shardings has 1 entries but there are 2 values",
                 id="in_shardings-count"),
    pytest.param(lambda: sim.jit(lambda x: x, in_shardings=Format(Layout((0,)), sim.SingleDeviceSharding(0)))
                 .trace(DUCK).compile(), sim.InvalidArgumentError, r"argument x: major_to_minor=\(0,\) has 1 entries",
                 id="in-layout-rank"),
    pytest.param(lambda: sim.jit(lambda x: x, in_shardings=sim.NamedSharding(MESH, P("x"))).trace(
        sim.ShapeDtypeStruct((4,), np.int32)).compile(), sim.InvalidArgumentError,
                 r"out_shardings for result 0 has no sharding", id="out-sharding-missing"),
    pytest.param(lambda: sim.jit(lambda x: x).trace(DUCK).compile()(np.ones((3, 2), np.float32)),
                 sim.InvalidArgumentError, r"argument x is float32\[3, 2\] but the function was compiled for "
                 r"float32\[2, 3\]", id="call-shape"),
    pytest.param(lambda: sim.jit(lambda x: x).trace(DUCK).compile()(
        sim.device_put(np.ones((2, 3), np.float32), sim.SingleDeviceSharding(1))), sim.InvalidArgumentError,
                 r"argument x is committed to sharding .*device=1.* does not match the compiled sharding",
                 id="call-sharding"),
    pytest.param(lambda: sim.jit(sim.shard_map(lambda v: v, mesh=MESH, in_specs=P("x"), out_specs=P("x"))),
                 sim.InvalidTypeError, r"fn is a sim.shard_map \(of '<lambda>'\), which maps its body over the mesh "
                 r"itself; sim.jit maps a per-device function", id="jit-of-shard_map"),
    pytest.param(lambda: sim.device_put(DUCK, sim.NamedSharding(MESH, P("x"))), sim.InvalidTypeError,
                 r"device_put: x is abstract \(ShapeDtypeStruct\(.*\): a shape and dtype, no values\); device_put "
                 r"places values", id="device_put-abstract"),
    pytest.param(lambda: sim.with_layout_constraint(np.ones(2), AUTO), sim.InvalidTypeError,
                 r"layout=AUTO must be a concrete layouts.Layout", id="with_layout_constraint-AUTO"),
    pytest.param(lambda: sim.with_layout_constraint(np.ones(2), Layout((1, 0))), sim.InvalidArgumentError,
                 r"has 2 entries but the array has rank 1", id="with_layout_constraint-rank"),
]


@pytest.mark.parametrize("call, error, match", BAD_COMPILES)
def test_bad_compiles_and_calls_are_rejected_with_the_rule(call, error, match):
    """Each bad compile or call raises its error type with a message naming the argument and the rule."""
    with pytest.raises(error, match=match):
        call()
