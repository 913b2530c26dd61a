"""The registry: every collective is defined once and covered everywhere, derived from `collectives.REGISTRY`.

Nothing here lists the collectives by hand. For each registered one: its definition agrees with its
public function's signature; it has a scenario schema, an executable spec, a JAX binding the worker
runs, a transpose rule that satisfies the adjoint identity (or a `NotLinear` marker that
`linear_transpose` reports), a device-variance rule its results follow, and a strategy the generated
tests draw from; and a scenario file written from a drawn case loads, runs and equals the spec.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import strategies
import test_reductions
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import Case, Fill, check_agreement, differences, run_spec

import collectives
import scenarios
import sim
from collectives import NotLinear, Vma
from oracles import jax_oracle, spec
from sim import P

OPS = list(collectives.REGISTRY)
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

    assert set(strategies.DOCUMENTED) | set(test_reductions.OPS) == set(OPS)
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
    f = sim.shard_map(lambda *blocks: d.function(*(b[0] for b in blocks), **case.params)[None], mesh=mesh,
                      in_specs=(in_spec,) * len(case.args), out_specs=P(mesh.axis_names))
    return f, tuple(np.stack([np.asarray(arg[i]) for i in holders]) for arg in case.args)


@pytest.mark.parametrize("op", OPS)
@settings(max_examples=_FEW)
@given(data=st.data())
def test_strategy_draws_calls_the_simulator_and_spec_agree_on(op, data):
    """Every definition's strategy draws valid calls: simulator == spec, bit for bit, on every device."""
    check_agreement(data.draw(strategies.cases(op), label="case"))


@pytest.mark.parametrize("op", OPS)
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
    grouped = case.params.get("axis_index_groups") is not None
    want = {Vma.REDUCE: everything if grouped else everything - along, Vma.KEEP: everything,
            Vma.INTRODUCE: everything, Vma.INDEX: along}[d.vma]
    # the pvarys sim inserts to meet out_specs record `axes`; the collective's own equation does not
    recorded = [eq for eq in run.program(0).equations
                if eq.op in collectives.REGISTRY and "axes" not in dict(eq.params)]
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


@pytest.mark.parametrize("op", [op for op in OPS if not _definition(op).linear and _definition(op).arrays])
def test_not_linear_collectives_are_refused_with_their_reason(op):
    """Transposing a program through a collective marked NotLinear fails naming it and the marker's reason."""
    d = _definition(op)
    f = sim.shard_map(lambda x: d.function(x, "i"), mesh=sim.Mesh({"i": 2}), in_specs=P("i"), out_specs=P("i"))
    pattern = rf"'{op}' has no transpose rule .*: {re.escape(d.transpose.reason)}"
    with pytest.raises(sim.InvalidArgumentError, match=pattern):
        collectives.linear_transpose(f, np.ones(4)).run(np.ones(4))
    assert isinstance(d.transpose, NotLinear)


# ---------------------------------------------------------------------------------------------- scenarios


def _toml(value: Any) -> str:
    """A TOML literal of a scenario value: names, ints, booleans, lists, and (nested) lists of numbers."""
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(float(value)) if isinstance(value, (float, np.floating)) else str(int(value))


def _array_toml(array: np.ndarray) -> str:
    """An array as a TOML literal; an empty one as `{fill, shape}` (a literal [] would lose its shape)."""
    if array.size == 0:
        return f"{{fill = 0, shape = {_toml(list(array.shape))}}}"
    return _toml(array.tolist()) if array.ndim else _toml(array.item())


def scenario_text(case: Case) -> str:
    """A scenario file for `case`: its mesh, its `[collective]` table and one `[[device]]` table per device."""
    d = _definition(case.op)
    params = {k: v for k, v in case.params.items() if v is not None}
    lines = ["[mesh]", "axes = {" + ", ".join(f"{a} = {n}" for a, n in case.mesh_shape.items()) + "}", "",
             "[collective]", f'op = "{case.op}"', *(f"{k} = {_toml(v)}" for k, v in params.items())]
    if d.arrays:
        dtype = np.asarray(case.args[d.arrays.index(d.data_arrays[0])][0]).dtype
        lines += ["", "[inputs]", f'dtype = "{dtype}"']
        for i in range(case.devices):
            lines += ["", "[[device]]", *(f"{name} = {_array_toml(np.asarray(arg[i]))}"
                                          for name, arg in zip(d.arrays, case.args))]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("op", OPS)
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


def test_readme_lists_every_collective_with_its_arrays_and_keys():
    """The README's table of scenario ops has one row per registered collective, with its arrays and its
    required and optional keys as the definition gives them."""
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        found = re.match(r"\| `(\w+)` \| (.*?) \| (.*?) \|$", line)
        if found:
            rows[found.group(1)] = (found.group(2), found.group(3))
    for op in OPS:
        d = _definition(op)
        arrays = ", ".join(f"`{a}`" for a in d.arrays) or "none"
        keys = ", ".join(f"`{k}`" for k in d.required) + ("; " + ", ".join(f"`{k}`" for k in d.optional)
                                                            if d.optional else "")
        assert rows.get(op) == (arrays, keys), f"README row for {op}: want | `{op}` | {arrays} | {keys} |"


# ---------------------------------------------------------------------------------------------- JAX


@pytest.mark.differential
@pytest.mark.parametrize("op", OPS)
@settings(max_examples=3)
@given(data=st.data())
def test_the_worker_runs_every_collective(op, data, jax_oracle):
    """The JAX worker's dispatch table, built from the registry, runs every collective: simulator == spec ==
    real JAX on drawn calls."""
    check_agreement(data.draw(strategies.cases(op), label="case"), jax_oracle)
