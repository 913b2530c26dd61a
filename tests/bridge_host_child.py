"""JAX's side of `test_bridge_host.py`, in its own process (the test process starts no JAX backend): a
reshard or sharding constraint between whole placements on the host (`oracles._bridge._placed`) gives the value
JAX's eager `bind` gives, bit for bit, and a jitted gradient with both on the host equals jitted JAX without
binding either. Each check's name is printed when it passes; the first failure exits non-zero.

    python tests/bridge_host_child.py
"""

from __future__ import annotations

import sys

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as JP

import oracles
from oracles import _bridge, _bridge_traces

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


@settings(derandomize=True, database=None, max_examples=60, deadline=None)  # a new signature compiles first
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
    closed, _ = _bridge_traces.traced(f, (x,))
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



CHECKS = (test_whole_placement_on_the_host_is_the_value_jax_binds, test_a_python_scalar_is_placed_in_its_aval_dtype,
          test_placement_comparison_can_fail, test_a_program_with_host_reshards_equals_jitted_jax)

if __name__ == "__main__":
    for check in CHECKS:
        check()
        print(check.__name__, flush=True)
    sys.exit(0)
