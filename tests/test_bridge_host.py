"""The bridge's host side and a run's block bookkeeping, each against the slower form it replaces.

A reshard or sharding constraint between two whole placements on the host (`oracles._bridge._placed`) gives
the value JAX's eager `bind` gives, bit for bit, dtype and shape included; `sim.program._blocks`' writers
and axis indices, kept per mesh shape, equal their computation from the mesh's coordinates device by device.
Each comparison is shown to fail on a wrong answer.
"""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as JP

import oracles
import sim
from oracles import _bridge
from sim.program import _blocks

DTYPES = (np.float32, np.int32, np.uint8, np.bool_, np.float16)


def _bits(a: object) -> tuple:
    array = np.asarray(a)
    return array.dtype.str, array.shape, array.tobytes()


def _bound(x: np.ndarray, primitive: str) -> np.ndarray:
    """What JAX's eager bind of a whole-placement reshard or sharding constraint gives for `x`."""
    mesh = jax.sharding.AbstractMesh((1,), ("i",), axis_types=(AxisType.Explicit,))
    sharding = jax.sharding.NamedSharding(mesh, JP())
    if primitive == "reshard":
        return np.asarray(jax.sharding.reshard(jax.numpy.asarray(x), sharding))
    return np.asarray(jax.lax.with_sharding_constraint(jax.numpy.asarray(x), jax.sharding.PartitionSpec()))


@st.composite
def _host_values(draw: st.DrawFn) -> np.ndarray:
    dtype = draw(st.sampled_from(DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    raw = draw(st.binary(min_size=int(np.prod(shape)) * np.dtype(dtype).itemsize,
                         max_size=int(np.prod(shape)) * np.dtype(dtype).itemsize))
    value = np.frombuffer(raw, np.uint8).view(dtype).reshape(shape) if raw else np.zeros(shape, dtype)
    return value.astype(np.bool_) if dtype is np.bool_ else value


def _placed(x: np.ndarray) -> object:
    return _bridge._placed(x, jax.ShapeDtypeStruct(x.shape, x.dtype))


@given(_host_values(), st.booleans())
def test_whole_placement_on_the_host_is_the_value_jax_binds(value, as_jax):
    """Numpy or JAX arrays of every dtype (random bits, NaN payloads included): the value passed on equals
    JAX's reshard of it bit for bit."""
    x = jax.numpy.asarray(value) if as_jax else value
    assert _bits(_placed(x)) == _bits(_bound(value, "reshard"))


def test_a_python_scalar_is_placed_in_its_aval_dtype():
    """A literal operand (a Python number) comes out as an array of the equation's dtype, as bind gives it."""
    found = _bridge._placed(2.5, jax.ShapeDtypeStruct((), np.float32))
    assert _bits(found) == _bits(_bound(np.float32(2.5), "reshard"))


def test_placement_comparison_can_fail():
    """A placement that changed one bit of the value is told apart from JAX's."""
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    wrong = value.copy()
    wrong.view(np.uint32)[1, 2] ^= 1
    assert _bits(_placed(wrong)) != _bits(_bound(value, "reshard"))


def test_a_program_with_host_reshards_equals_jitted_jax():
    """The gradient of a loss over two shard_maps with a sharding constraint between them: on the host JAX's
    jaxpr has a sharding constraint and a reshard (the loss's cotangent); the bridge's outputs equal jitted
    JAX's bit for bit, and the host binds neither placement."""
    n = len(jax.devices())
    mesh = jax.make_mesh((n,), ("i",), axis_types=(AxisType.Auto,))
    whole = jax.sharding.NamedSharding(mesh, JP())

    def h(x):
        y = jax.shard_map(lambda b: jax.lax.psum(b * b, "i"), mesh=mesh, in_specs=JP("i"), out_specs=JP())(x)
        y = jax.lax.with_sharding_constraint(y * 2.0, whole)
        return jax.shard_map(lambda b: b + jax.lax.axis_index("i"), mesh=mesh, in_specs=JP(), out_specs=JP("i"))(y)

    f = jax.jit(jax.grad(lambda x: jax.numpy.sum(h(x) ** 2)))
    x = np.linspace(-1.0, 1.0, 4 * n, dtype=np.float32)
    closed, _ = _bridge.traced(f, (x,))
    assert {"reshard", "sharding_constraint"} <= {e.primitive.name for e in _outer(closed.jaxpr)}
    bind = jax.extend.core.Primitive.bind
    bound: list[str] = []

    def watched(self, *args, **params):
        if self.name in ("reshard", "sharding_constraint"):
            bound.append(self.name)
        return bind(self, *args, **params)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jax.extend.core.Primitive, "bind", watched)
        found = oracles.simulate_jax(f, x).outputs
    assert _bits(found) == _bits(f(x))
    assert bound == []


def _outer(jaxpr) -> list:
    """The equations of `jaxpr` and of the call bodies it holds, shard_map bodies left out."""
    found = []
    for eqn in jaxpr.eqns:
        found.append(eqn)
        if eqn.primitive.name != "shard_map":
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                found += _outer(sub.jaxpr if hasattr(sub, "jaxpr") else sub)
    return found


@st.composite
def _meshes_and_specs(draw: st.DrawFn) -> tuple[sim.Mesh, sim.PartitionSpec]:
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    names = [f"a{k}" for k in range(len(sizes))]
    mesh = sim.Mesh(dict(zip(names, sizes)))
    chosen = draw(st.permutations(names))[:draw(st.integers(0, len(names)))]
    groups = draw(st.integers(0, len(chosen)))
    entries: list = [tuple(chosen[:groups]) if groups > 1 else (chosen[0] if groups else None)]
    entries += list(chosen[groups:])
    return mesh, sim.P(*entries)


def _writers_by_coords(mesh: sim.Mesh, spec: sim.PartitionSpec) -> list[int]:
    left_out = [a for a in mesh.axis_names if a not in spec.axes()]
    return [d for d in mesh.devices if not any(mesh.coords(d)[a] for a in left_out)]


def _indices_by_coords(mesh: sim.Mesh, names: tuple[str, ...]) -> list[int]:
    found = []
    for d in mesh.devices:
        index = 0
        for name in names:
            index = index * mesh.shape[name] + mesh.coords(d)[name]
        found.append(index)
    return found


@given(_meshes_and_specs())
def test_kept_writers_and_indices_equal_the_coordinates(mesh_and_spec):
    """On random meshes and specs (twice: computed, then kept): the writers are the devices at index 0 along
    every left-out axis, and each device's index along every axis and ordered tuple of axes is the row-major
    one of its coordinates."""
    mesh, spec = mesh_and_spec
    for _ in range(2):
        assert _blocks._writers(mesh, spec) == _writers_by_coords(mesh, spec)
        for count in range(1, len(mesh.axis_names) + 1):
            for names in itertools.permutations(mesh.axis_names, count):
                name = names if len(names) > 1 else names[0]
                assert _blocks._axis_indices(mesh, name).tolist() == _indices_by_coords(mesh, names)


def test_kept_indices_are_read_only_and_the_comparison_can_fail():
    """A kept index array cannot be written through; a wrong writer list or index is told apart."""
    mesh = sim.Mesh({"x": 2, "y": 3})
    kept = _blocks._axis_indices(mesh, "y")
    with pytest.raises(ValueError, match="read-only"):
        kept[0] = 5
    assert _blocks._writers(mesh, sim.P("y")) != _writers_by_coords(mesh, sim.P("x"))
    assert kept.tolist() != _indices_by_coords(mesh, ("x",))
