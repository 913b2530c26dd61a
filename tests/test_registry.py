"""The registry: every collective is defined once and covered everywhere, derived from `collectives.REGISTRY`.

Nothing here lists the collectives by hand. For each registered one: its definition agrees with its
public function's signature; it has a scenario schema, an executable spec, a JAX binding the worker
runs, a transpose rule that satisfies the adjoint identity (or a `NotLinear` marker that
`linear_transpose` reports), a device-variance rule its results follow, and a strategy the generated
tests draw from; and a scenario file written from a drawn case loads, runs and equals the spec. Every other
fact of the record is checked too, so a forgotten one fails a test that names it: the batching rule
against a loop, each `Algorithm` record (its schedule, closed form, message count, reordering bound, text),
the reduction, sizes, sweep and drawing facts, and a definition missing a fact is refused by name.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import reduction_cases
import strategies
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scenario_text import scenario_text
from strategies import Case, Fill, check_agreement, differences, run_spec

import collectives
import scenarios
import sim
from collectives import NotLinear, Vma
from oracles import jax_oracle, spec
from sim import P

OPS = list(collectives.REGISTRY)
# A one-sided collective runs beside its partner (precv after a psend): its generated calls are the partner's,
# which run both, so the tests that run a drawn call take the partner only.
ALONE = [op for op in OPS if collectives.definition(op).partner is None]
ROOT = Path(__file__).resolve().parents[1]
_FEW = max(5, settings().max_examples // 30)
_IOTA = st.just(Fill("iota", 0).array)  # readable integers: exact sums, exact in TOML


def _definition(op: str) -> collectives.Definition:
    return collectives.definition(op)


# ---------------------------------------------------------------------------------------------- the record


@pytest.mark.parametrize("op", OPS)
def test_definition_matches_the_public_function(op):
    """The record's function is `collectives.<op>`; its arrays are the leading positional parameters and its
    params the rest, in order, with the signature's defaults; only `out_layout` (a `layouts.Layout`, no
    scenario value) is left out."""
    d = _definition(op)
    assert getattr(collectives, op) is d.function and op in collectives.__all__ and d.function.__name__ == op
    assert collectives.REGISTRY.of(d.function) is d and collectives.REGISTRY[op] is d
    signature = inspect.signature(d.function).parameters
    names = list(signature)
    assert tuple(names[:len(d.arrays)]) == d.arrays
    assert [p.name for p in d.params] == [n for n in names[len(d.arrays):] if n != "out_layout"]
    for p in d.params:
        default = signature[p.name].default
        assert p.required == (default is inspect.Parameter.empty), p.name
        assert p.required or p.default == default, p.name


@pytest.mark.parametrize("op", OPS)
def test_every_parameter_has_a_scenario_rule(op):
    """Each parameter states its rule for scenario files, and accepts its own default where TOML can write it."""
    for p in _definition(op).params:
        assert p.rule and callable(p.accepts) and callable(p.from_toml)
        if not p.required and p.default is not None:
            assert p.accepts(p.default), f"{op}: {p.name}={p.default!r} breaks its own rule {p.rule!r}"
        assert not p.choices or all(p.accepts(c) for c in p.choices)


@pytest.mark.parametrize("op", OPS)
def test_every_collective_has_a_spec_and_a_jax_binding(op):
    """The executable spec registers a function for the definition; the oracle knows its arity and JAX name;
    each JAX primitive it binds leads back to it (the one map the JAX interpreter reads)."""
    d = _definition(op)
    assert spec.of(d).__name__ == op
    assert jax_oracle.ARITY[op] == len(d.arrays) and jax_oracle.JAX_NAMES[op] == d.jax.name
    assert callable(d.jax.bind)
    for primitive in d.jax.primitives:
        assert collectives.REGISTRY.by_primitive(primitive) is d


def test_the_design_note_names_map_to_jax_names():
    """psum_invariant is JAX's psum_invariant and pvary JAX's pvary, in both directions."""
    assert jax_oracle.JAX_NAMES["psum_invariant"] == "psum_invariant" and jax_oracle.JAX_NAMES["pvary"] == "pvary"
    assert collectives.REGISTRY.by_primitive("psum_invariant") is _definition("psum_invariant")
    assert collectives.REGISTRY.by_primitive("pvary") is _definition("pvary")


def test_unknown_names_are_refused_naming_the_collectives():
    """A name no collective has is an InvalidArgumentError that lists the registered ones."""
    with pytest.raises(sim.InvalidArgumentError, match=r"op='pfoo' must name a collective: one of 'all_gather'"):
        collectives.definition("pfoo")


def test_collectives_import_neither_jax_nor_hypothesis():
    """The definitions hold JAX bindings and test strategies without importing jax, hypothesis or the layers
    above (the modules are handed in)."""
    code = "import sys, collectives; print(sorted(m for m in ('jax', 'hypothesis', 'oracles', 'scenarios') " \
           "if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


def test_generated_tests_cover_every_collective():
    """The JAX docs' collectives have their generated differential tests; every other registered one is in
    the generated simulator == spec == JAX tests of test_reductions*.py."""
    import test_differential

    assert set(strategies.DOCUMENTED) | set(reduction_cases.OPS) == set(OPS)
    for op in strategies.DOCUMENTED:
        assert callable(getattr(test_differential, f"test_{op}_agrees"))


# ---------------------------------------------------------------------------------------------- behaviour


def _program(case: Case) -> tuple[sim.ShardMapped, tuple[np.ndarray, ...]]:
    """The case as a typed shard_map program over global arrays: every block split over the whole mesh,
    or, for an operand the collective takes invariant, over the other axes only (as a JAX user passes it)."""
    d = _definition(case.op)
    mesh = sim.Mesh(dict(case.mesh_shape))
    holders, in_spec = list(mesh.devices), P(mesh.axis_names)
    if d.invariant_operand:
        along = mesh.axis_names_of(case.params["axis_name"])
        holders = [i for i in mesh.devices if all(mesh.coords(i)[a] == 0 for a in along)]
        others = tuple(a for a in mesh.axis_names if a not in along)
        in_spec = P(others) if others else P()
    f = sim.shard_map(lambda *blocks: d.call(*(b[0] for b in blocks), **case.params)[None], mesh=mesh,
                      in_specs=(in_spec,) * len(case.args), out_specs=P(mesh.axis_names))
    return f, tuple(np.stack([np.asarray(arg[i]) for i in holders]) for arg in case.args)


@pytest.mark.parametrize("op", ALONE)
@settings(max_examples=_FEW)
@given(data=st.data())
def test_strategy_draws_calls_the_simulator_and_spec_agree_on(op, data):
    """Every definition's strategy draws valid calls: simulator == spec, bit for bit, on every device."""
    check_agreement(data.draw(strategies.cases(op), label="case"))


@pytest.mark.parametrize("op", ALONE)
@settings(max_examples=_FEW)
@given(data=st.data())
def test_results_vary_as_the_vma_rule_says(op, data):
    """With every input varying along the whole mesh (an invariant operand along the other axes), the
    collective's recorded result varies along: reduce, the other axes (all of them over smaller groups);
    keep and introduce, every axis; index, the named axes."""
    case = data.draw(strategies.cases(op), label="case")
    d = _definition(op)
    f, primals = _program(case)
    run = f.run(*primals)
    everything = frozenset(case.mesh_shape)
    along = frozenset(sim.Mesh(dict(case.mesh_shape)).axis_names_of(case.params["axis_name"]))
    groups = case.params.get("axis_index_groups")
    grouped = groups is not None and len(groups) > 1  # one group is the whole axis
    want = {Vma.REDUCE: everything if grouped else everything - along, Vma.KEEP: everything,
            Vma.INTRODUCE: everything, Vma.INDEX: along, Vma.INVARIANT: frozenset()}[d.vma]
    # the pvarys sim inserts to meet out_specs record `axes`; the collective's own equation does not
    recorded = [eq for eq in run.program(0).equations
                if eq.op in collectives.REGISTRY and "axes" not in dict(eq.params)]
    if not recorded:  # a call JAX folds to a constant (axis_size) records nothing: its result is a constant
        assert want == frozenset() and isinstance(run.program(0).outputs[0], sim.Const), str(run.program(0))
        return
    assert recorded[-1].outputs[0].vma == want, str(run.program(0))


@pytest.mark.parametrize("op", [op for op in OPS if _definition(op).linear])
@settings(max_examples=_FEW)
@given(data=st.data())
def test_transpose_rules_satisfy_the_adjoint_identity(op, data):
    """<A x, y> == <x, A^T y> for the program of a drawn call, linear in its data arrays (offsets and sizes
    are fixed), with float64 values that are small integers (sums exact; pmean's 1/n rounds)."""
    case = data.draw(strategies.cases(op, dtypes=st.just(np.dtype("float64")), fillers=_IOTA, transposable=True),
                     label="case")
    f, primals = _program(case)
    d = _definition(op)
    linear = tuple(k for k, name in enumerate(d.arrays) if name not in d.index_arrays)
    out = f(*primals)
    ct = np.random.default_rng(data.draw(st.integers(0, 99), label="seed")).integers(-9, 10, out.shape) * 1.0
    others = [p for k, p in enumerate(primals) if k not in linear]
    back = collectives.linear_transpose(f, *primals, linear_argnums=linear)(*others, ct)
    back = back if isinstance(back, tuple) else (back,)
    rhs = sum(float(np.vdot(primals[k], b)) for k, b in zip(linear, back))
    assert np.isclose(float(np.vdot(out, ct)), rhs, rtol=1e-12, atol=0)


@pytest.mark.parametrize("op", [op for op in OPS if not _definition(op).linear and _definition(op).arrays
                                and _definition(op).alone is None])
def test_not_linear_collectives_are_refused_with_their_reason(op):
    """Transposing a program through a collective marked NotLinear fails naming it and the marker's reason."""
    d = _definition(op)
    f = sim.shard_map(lambda x: d.function(x, "i"), mesh=sim.Mesh({"i": 2}), in_specs=P("i"), out_specs=P("i"))
    pattern = rf"'{op}' has no transpose rule .*: {re.escape(d.transpose.reason)}"
    with pytest.raises(sim.InvalidArgumentError, match=pattern):
        collectives.linear_transpose(f, np.ones(4)).run(np.ones(4))
    assert isinstance(d.transpose, NotLinear)


# ---------------------------------------------------------------------------------------------- scenarios


@pytest.mark.parametrize("op", ALONE)
@settings(max_examples=_FEW)
@given(data=st.data())
def test_a_scenario_file_of_every_collective_runs_and_equals_the_spec(op, data, tmp_path_factory):
    """A scenario file written from a drawn call of the collective loads (its schema takes every parameter),
    runs through `scenarios.run`, and gives the spec's results on every device, bit for bit."""
    case = data.draw(strategies.cases(op, fillers=_IOTA), label="case")
    path = tmp_path_factory.mktemp("scenario") / f"{op}.toml"
    path.write_text(scenario_text(case))
    scenario = scenarios.load(path)
    assert scenario.op == op and scenario.definition is _definition(op)
    result = scenarios.run(scenario)
    found = differences(run_spec(case), list(result.outputs), "spec", "scenario")
    assert not found, path.read_text() + "\n".join(found)


def test_the_scenario_file_page_lists_every_collective_with_its_arrays_and_keys():
    """The table of scenario ops (docs/reference/scenario-files.md) has one row per registered collective, with
    its arrays and its required and optional keys as the definition gives them."""
    rows = {}
    for line in (ROOT / "docs" / "reference" / "scenario-files.md").read_text().splitlines():
        found = re.match(r"\| `(\w+)` \| (.*?) \| (.*?) \|$", line)
        if found:
            rows[found.group(1)] = (found.group(2), found.group(3))
    for op in OPS:
        d = _definition(op)
        arrays = ", ".join(f"`{a}`" for a in d.arrays) or "none"
        keys = ", ".join(f"`{k}`" for k in d.required) + ("; " + ", ".join(f"`{k}`" for k in d.optional)
                                                            if d.optional else "")
        want = f"| `{op}` | {arrays} | {keys} |"
        assert rows.get(op) == (arrays, keys), f"docs/reference/scenario-files.md row for {op}: want {want}"


# ---------------------------------------------------------------------------------------------- the facts

_FACTS = ("batch", "algorithms", "reduction", "sizes", "sweep", "drawing")
ALGORITHMS = [(op, a.name) for op in OPS for a in _definition(op).algorithms]


@pytest.mark.parametrize("op", OPS)
def test_every_definition_states_every_fact(op):
    """Every fact a definition carries has its type and agrees with the rest of the record: the batching rule,
    the algorithms ('direct' first, one 'auto', their names the `algorithm` parameter's choices), what it
    reduces (a collective that adds its operands reduces by a sum), how its bytes scale, its sweep facts,
    its drawing (an axis parameter it has) and its explain text (paragraphs for every algorithm)."""
    d = _definition(op)
    assert callable(d.batch)
    names = tuple(a.name for a in d.algorithms)
    assert all(isinstance(a, collectives.Algorithm) for a in d.algorithms) and names[0] == "direct"
    assert [a.name for a in d.algorithms if a.auto] == ["auto"] and d.param("algorithm").choices == names
    assert d.reduction is None or isinstance(d.reduction, collectives.Reduction)
    assert not d.sums or (d.reduction is not None and not d.reduction.extreme), "a sum must say what it reduces"
    assert isinstance(d.sizes, collectives.Sizes) and isinstance(d.drawing, collectives.Drawing)
    # nobody sends to others exactly when the result is made on the device: from an operand it already holds
    # (introduce), from its position (index), or from no operand at all (axis_size's constant)
    assert (d.sizes.peers is collectives.Peers.NONE) == (d.vma in (Vma.INTRODUCE, Vma.INDEX) or not d.arrays)
    assert d.drawing.axis is None or d.takes(d.drawing.axis)
    if d.sweep is not None:
        assert isinstance(d.sweep, collectives.Sweep) and d.sweep.busbw_factor(4) > 0
        assert d.sweep.blocks != "gathered" or d.sizes.gathered
    for a in d.algorithms:
        told = d.explain({"algorithm": a.name}, 4)
        assert told and all(isinstance(t, str) and t for t in told), (op, a.name)


@pytest.mark.parametrize("op, name", ALGORITHMS, ids=[f"{op}-{name}" for op, name in ALGORITHMS])
def test_every_algorithm_states_its_facts(op, name):
    """Each algorithm record: a paragraph naming it, the group sizes it fits, a schedule (except 'auto', which
    runs another's), a message bound, a stated bound exactly when it reorders a float reduction, an inner
    algorithm when it works one mesh axis at a time."""
    a = _definition(op).algorithm(name)
    assert a.text.lower().replace(" ", "_").startswith(name.lower()), a.text
    assert a.fits(4) and a.fits(8) and a.fits(6) != a.power_of_two
    assert (a.schedule is None) == a.auto and a.messages_per_peer >= 1
    assert bool(a.bound) == a.reorders and (a.closed_form is None or callable(a.closed_form))
    assert not a.grid or a.inner in _definition(op).algorithms
    if a.schedule is not None:
        steps = a.steps((2, 2) if a.grid else (4,), 4096)
        assert steps and all(isinstance(p, collectives.Pattern) and size > 0 and repeat >= 1
                             for p, size, repeat in steps)


_FORMS = [(op, name) for op, name in ALGORITHMS if _definition(op).algorithm(name).closed_form is not None]


@pytest.mark.parametrize("op, name", _FORMS, ids=[f"{op}-{name}" for op, name in _FORMS])
@pytest.mark.parametrize("p", [2, 4, 8])
def test_every_closed_form_is_the_cost_model_on_dedicated_links(op, name, p):
    """On the fully connected network the cost model's estimate of the algorithm's schedule is its record's
    alpha-beta closed form (MPICH's n: the gathered array for a gather, the operand otherwise)."""
    d, b = _definition(op), 4096 * p
    mesh = sim.Mesh({"x": p}, network=sim.Network.fully_connected(latency_s=2e-6, bandwidth_bytes_per_s=1e10))
    record = d.algorithm(name)
    got = collectives.cost_s(record, mesh, tuple(range(p)), (p,), b)
    assert got == pytest.approx(record.closed_form(p, d.sizes.result_bytes(b, p), 2e-6, 1e-10))


_COUNTED = [(op, name) for op, name in ALGORITHMS
            if _definition(op).sweep is not None and _definition(op).algorithm(name).messages is not None]


@pytest.mark.parametrize("op, name", _COUNTED, ids=[f"{op}-{name}" for op, name in _COUNTED])
def test_every_algorithm_sends_the_messages_its_record_says(op, name):
    """Run as a sweep point (the definition's own `Sweep` call) on 4 devices, or a 2 x 2 grid for an algorithm
    that works one axis at a time (on a switch that reduces for 'in_network'), each member sends
    `messages(shape)` messages to other members."""
    from scenarios.sweep import Point, measure

    record = _definition(op).algorithm(name)
    mesh = {"x": 2, "y": 2} if record.grid else {"x": 4}
    shape = tuple(mesh.values())
    network = {"preset": "h100-nvlink", "shape": [4]} if record.in_network else {"topology": "fully_connected"}
    point = Point(op, mesh, None, 4096, network, name, "float32", 0)
    row = measure(point)
    assert row["error"] is None, row["error"]
    assert row["between_devices"] == 4 * record.over(shape).messages(shape)


@pytest.mark.parametrize("op", [op for op in OPS if _definition(op).arrays and _definition(op).alone is None])
@settings(max_examples=_FEW)
@given(data=st.data())
def test_every_batching_rule_equals_a_loop_over_the_batch(op, data):
    """`Definition.batch` under `collectives.vmap` on a drawn call, batched with a second entry (every data
    array flipped), gives on every device the two entries' results of one call each, stacked."""
    case = data.draw(strategies.cases(op), label="case")
    d = _definition(op)
    assume(all(isinstance(x, np.ndarray) for per_device in case.args for x in per_device))
    assume(not (d.index_arrays and case.params.get("axis_index_groups") is not None))  # JAX has no rule there
    flip = [name in d.data_arrays for name in d.arrays]
    stacked = [np.stack([np.stack([x, np.flip(x) if f else x]) for x in per_device])
               for per_device, f in zip(case.args, flip)]

    def body(*blocks):
        xs = [b[0] for b in blocks]
        batched = collectives.vmap(d.function)(*xs, **case.params)
        looped = np.stack([np.asarray(d.function(*(x[k] for x in xs), **case.params)) for k in range(2)])
        return np.asarray(batched)[None], looped[None]

    spec_ = P(tuple(case.mesh_shape))
    f = sim.shard_map(body, mesh=sim.Mesh(dict(case.mesh_shape)), in_specs=(spec_,) * len(stacked),
                      out_specs=(spec_, spec_), check_vma=False)
    batched, looped = f(*stacked)
    assert (batched.dtype, batched.shape) == (looped.dtype, looped.shape)
    assert batched.tobytes() == looped.tobytes()  # bit for bit: NaN payloads and signed zeros included


@pytest.mark.parametrize("field", _FACTS)
def test_a_definition_missing_a_fact_is_refused_naming_it(field):
    """A definition that leaves out a required fact is refused when it is made, with the collective's name and
    the field's (the checklist of CONTRIBUTING.md, "Adding a collective")."""
    model = _definition("ppermute")
    given_ = {f.name: getattr(model, f.name) for f in dataclasses.fields(collectives.Definition)}
    given_.update(name="pfoo", params=model.params[:-1])
    del given_[field]
    with pytest.raises(sim.InvalidArgumentError, match=rf"Definition 'pfoo' must give {field}="):
        collectives.Definition(**given_)


def test_a_definition_with_a_fact_of_the_wrong_kind_is_refused_naming_it():
    """A fact of the wrong type, or algorithms without 'direct' first and one 'auto', is refused by name."""
    model = _definition("ppermute")
    given_ = {f.name: getattr(model, f.name) for f in dataclasses.fields(collectives.Definition)}
    given_.update(name="pfoo", params=model.params[:-1])
    with pytest.raises(sim.InvalidArgumentError, match=r"Definition 'pfoo': sizes='many' must be Sizes"):
        collectives.Definition(**{**given_, "sizes": "many"})
    with pytest.raises(sim.InvalidArgumentError, match=r"Definition 'pfoo': algorithms=.* 'direct' first"):
        collectives.Definition(**{**given_, "algorithms": model.algorithms[::-1]})


# ---------------------------------------------------------------------------------------------- JAX


@pytest.mark.differential
@pytest.mark.parametrize("op", ALONE)
@settings(max_examples=3)
@given(data=st.data())
def test_the_worker_runs_every_collective(op, data, jax_oracle):
    """The JAX worker's dispatch table, built from the registry, runs every collective: simulator == spec ==
    real JAX on drawn calls."""
    check_agreement(data.draw(strategies.cases(op), label="case"), jax_oracle)
