"""Device-variance types: inputs from in_specs, n-ary promotion, the collectives' table, out_specs checks, and a
program's listing with runs of equations recorded late."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import collectives as C
import sim
from sim import P

MESH = sim.Mesh({"x": 2, "y": 2})


def output_types(body, in_specs, out_specs, *args, check_vma=True):
    """The vma of every output (device 0's program) and the program itself."""
    f = sim.shard_map(body, mesh=MESH, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma)
    program = f.run(*args).program()
    return [set(o.vma) if isinstance(o, sim.Var) else set() for o in program.outputs], program


A = np.zeros((4, 4), np.float32)


@pytest.mark.parametrize("spec, vma", [(P(), set()), (P("x"), {"x"}), (P(None, "y"), {"y"}),
                                       (P(("x", "y")), {"x", "y"}), (P("y", "x"), {"x", "y"})])
def test_inputs_vary_along_the_axes_their_spec_names(spec, vma):
    """An input varies exactly along the mesh axes its in_spec splits it over."""
    types, _ = output_types(lambda a: a, spec, spec, A)
    assert types == [vma]


def test_outputs_are_raised_to_their_out_specs():
    """As in JAX, an output invariant along an axis its out_spec splits over is raised to vary along it by a
    recorded pvary (its transpose then sums the copies)."""
    types, program = output_types(lambda a: a * 2.0, P("x"), P("x", "y"), A)
    assert types == [{"x", "y"}] and program.ops() == ["multiply", "pvary"]


def test_nary_ops_promote_with_recorded_pvary():
    """Mixing {x} and {y} gives {x, y}; each operand is first raised by a pvary that moves no data."""
    types, program = output_types(lambda a, b: a * b + 1.0, (P("x"), P("y")), P("x", "y"), A, A)
    assert types == [{"x", "y"}]
    assert program.ops() == ["pvary", "pvary", "multiply", "add"]
    assert "{V:x,y}" in str(program)


def test_check_vma_false_inserts_nothing_and_checks_nothing():
    """With check_vma=False no pvary is recorded, types stay empty and all_gather may feed P()."""
    types, program = output_types(lambda a: C.all_gather(a, "x", tiled=True), P("x"), P(), np.zeros(4),
                                  check_vma=False)
    assert types == [set()] and program.ops() == ["all_gather"]


COLLECTIVE_TYPES = [  # (id, body, in_spec, out_spec, expected output vma) on mesh {x: 2, y: 2}
    ("psum: varying -> invariant", lambda a: C.psum(a, "x"), P("x", "y"), P(None, "y"), {"y"}),
    ("psum of invariant: pvary first", lambda a: C.psum(a, "x"), P(None, "y"), P(None, "y"), {"y"}),
    ("psum over groups stays varying", lambda a: C.psum(a, ("x", "y"), axis_index_groups=[[0, 1], [2, 3]]),
     P(("x", "y")), P(("x", "y")), {"x", "y"}),
    ("pmax", lambda a: C.pmax(a, ("x", "y")), P(("x", "y")), P(), set()),
    ("pmean", lambda a: C.pmean(a, "y"), P(("x", "y")), P("x"), {"x"}),
    ("psum_invariant", lambda a: C.psum_invariant(a, "y"), P("y"), P(), set()),
    ("pvary: invariant -> varying", lambda a: C.pvary(a, "y"), P("x"), P("x", "y"), {"x", "y"}),
    ("all_gather: varying -> varying", lambda a: C.all_gather(a, "x", tiled=True), P("x"), P("x"), {"x"}),
    ("all_gather of invariant", lambda a: C.all_gather(a, "x", tiled=True), P(), P("x"), {"x"}),
    ("all_gather_invariant", lambda a: C.all_gather_invariant(a, "x", tiled=True), P("x"), P(), set()),
    ("pscatter", lambda a: C.pscatter(a, "y", tiled=True), P(), P("y"), {"y"}),
    ("psum_scatter", lambda a: C.psum_scatter(a, "x", tiled=True), P("y"), P(("y", "x")), {"x", "y"}),
    ("all_to_all", lambda a: C.all_to_all(a, "y", 0, 0, tiled=True), P("x"), P(("x", "y")), {"x", "y"}),
    ("ppermute", lambda a: C.ppermute(a, "x", [(0, 1), (1, 0)]), P("x"), P("x"), {"x"}),
    ("axis_index", lambda a: a + C.axis_index("y"), P(), P("y"), {"y"}),
]


@pytest.mark.parametrize("body, in_spec, out_spec, vma", [c[1:] for c in COLLECTIVE_TYPES],
                         ids=[c[0] for c in COLLECTIVE_TYPES])
def test_collective_types_follow_the_note(body, in_spec, out_spec, vma):
    """Every collective produces the variance the design note's table gives."""
    types, _ = output_types(body, in_spec, out_spec, A)
    assert types == [vma]


@pytest.mark.parametrize("op", ["psum", "pmean", "psum_scatter"])
def test_sums_need_uniform_variance_over_their_axes(op):
    """Summing over ('x', 'y') a value varying along x only is rejected, as JAX does; pmax accepts it."""
    body = lambda a: getattr(C, op)(a, ("x", "y"), **({"tiled": True} if op == "psum_scatter" else {}))
    f = sim.shard_map(body, mesh=MESH, in_specs=P("x"), out_specs=P(("x", "y")))
    with pytest.raises(sim.InvalidTypeError, match=rf"device 0: {op}: the operand varies along \['x'\] but not "
                                                   r"along \['y'\]"):
        f(np.zeros(8, np.float32))
    types, _ = output_types(lambda a: C.pmax(a, ("x", "y")), P("x"), P(), np.zeros(8, np.float32))
    assert types == [set()]


def test_program_prints_like_a_jaxpr():
    """The recorded program prints typed equations with {V:...} annotations."""
    _, program = output_types(lambda a: C.psum(a * 2.0, "x"), P("x"), P(), np.zeros(4, np.float32))
    assert str(program) == (
        "{ lambda ; a:f32[2]{V:x}. let\n"
        "    b:f32[2]{V:x} = multiply a 2.0\n"
        "    c:f32[2] = psum_invariant[axis_name='x'] b\n"
        "  in (c,) }")


def test_numpys_array_methods_work_on_a_programs_values():
    """A program's value is a numpy array: its methods (`var` and `std` among them: the value's record is its
    `variable`, not an attribute hiding numpy's `var`) give numpy's answers and are recorded."""
    x = np.arange(8.0, dtype=np.float32)
    f = sim.shard_map(lambda v: C.psum(v.var(keepdims=True) + v.std(keepdims=True) + v.mean(keepdims=True), "x"),
                      mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P())
    halves = x[:4], x[4:]
    assert f(x).tolist() == [sum(np.float32(h.var() + h.std() + h.mean()) for h in halves)]
    assert "psum_invariant" in str(f.last_run.programs[0])


def test_false_replication_is_rejected_before_values_are_compared():
    """An output typed as varying along an axis its out_spec omits is an error naming output and axis,
    even when the values happen to agree."""
    f = sim.shard_map(lambda a: C.all_gather(a, "x", tiled=True), mesh=MESH, in_specs=P("x"), out_specs=P())
    with pytest.raises(sim.InvalidArgumentError, match=r"out: out_specs entry P\(\) claims the output is replicated "
                                                       r"along mesh axis 'x'"):
        f(np.zeros(4))


def test_device_dependent_branches_keep_types():
    """Types follow values through device-dependent control flow; 0-d results stay typed."""
    def body(a):
        first = a[0]
        return a * 2 if first > 0 else a + first

    types, _ = output_types(body, P("x"), P("x"), np.array([-1.0, 0, 1, 2]))
    assert types == [{"x"}]


def _listing(deferred: bool) -> tuple[sim.Program, list[int]]:
    """A program of neg, a run of two equations (mul of a pvary, as a segment records them), then add; the run
    recorded late (`Program.defer`) or in place; and how many times the late run was made."""
    f32, none, x = np.dtype(np.float32), frozenset(), frozenset({"x"})
    program, made = sim.Program(), []
    a = program.new_var(f32, (2,), x)
    program.inputs.append(a)
    b = program.new_var(f32, (2,), x)
    program.record("neg", {}, [a], [b])

    def run(first: int) -> list:
        made.append(first)
        w = sim.Program.numbered(first, f32, (2,), none)
        raised, c = sim.Program.numbered(first + 1, f32, (2,), x), sim.Program.numbered(first + 2, f32, (2,), x)
        return [sim.Equation("pvary", (("axes", ("x",)),), (w,), (raised,)),
                sim.Equation("mul", (), (b, raised), (c,))]

    if deferred:
        first = program.defer(run, 3)
    else:
        first = program.take(3)
        program.recorded += run(first)
    c = program.equations[-1].outputs[0] if not deferred else sim.Program.numbered(first + 2, f32, (2,), x)
    d = program.new_var(f32, (2,), x)
    program.record("add", {}, [c, b], [d])
    program.outputs.append(d)
    return program, made


def test_a_run_recorded_late_reads_as_if_recorded_in_place():
    """Equations given by `Program.defer` are made once, when the program is first read, in their place and
    with the variable numbers taken when they ran; the variables after them are numbered past them; a copy
    or pickle of a program holds them; a run put anywhere else is told apart."""
    late, made = _listing(deferred=True)
    assert made == []
    now, _ = _listing(deferred=False)
    assert str(late) == str(now) and late.ops() == ["neg", "pvary", "mul", "add"] and made == [2]
    assert [o.name for e in late.equations for o in e.outputs] == ["b", "d", "e", "f"]
    late.ops()
    assert made == [2]
    again, _ = _listing(deferred=True)
    assert str(pickle.loads(pickle.dumps(again))) == str(now) == str(copy.deepcopy(_listing(deferred=True)[0]))
    moved, _ = _listing(deferred=True)
    moved.recorded.append(moved.recorded.pop(1))
    assert str(moved) != str(now)
