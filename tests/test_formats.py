"""Placing arrays with a Format: device memories byte-exact with JAX's CPU buffers, single-device and sharded.

The differential tests place the same array with the same Format in the simulator and with
`jax.device_put`, then compare, per device, the bytes holding the values (read in the worker through
`unsafe_buffer_pointer()`), the reported `on_device_size_in_bytes`, the shard's index and the layout JAX
reports. Bytes past the values (tile padding) are never compared: XLA:CPU does not allocate them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_layouts import DTYPES, random_array

import sim
from layouts import AUTO, Format, Layout
from oracles.jax_oracle import OracleError, device_put_bytes
from sim import P

MESHES = ({"x": 2}, {"x": 4}, {"x": 2, "y": 2}, {"x": 8}, {"x": 2, "y": 4}, {"x": 4, "y": 2})


def tilings(rank: int) -> st.SearchStrategy[tuple]:
    """No tiling (often), or one or two levels of tiles of 1 to rank + 1 dimensions sized 1 to 5."""
    tile = st.lists(st.integers(1, 5), min_size=1, max_size=rank + 1).map(tuple)
    return st.one_of(st.just(()), st.lists(tile, min_size=1, max_size=2).map(tuple))


@st.composite
def placements(draw: st.DrawFn) -> tuple[np.ndarray, Layout]:
    """An array of rank 0 to 4 (dims 0 to 4, any dtype, random bits) and a layout: any permutation, any tiling."""
    rank = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=rank, max_size=rank)))
    array = random_array(shape, draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**32 - 1)))
    order = tuple(draw(st.permutations(range(rank))))
    return array, Layout(order, draw(tilings(rank)))


@st.composite
def sharded_placements(draw: st.DrawFn) -> tuple[np.ndarray, Layout, dict[str, int], tuple]:
    """A mesh of 2, 4 or 8 devices, a PartitionSpec over it and an array whose split dims divide evenly."""
    mesh_shape = draw(st.sampled_from(MESHES))
    rank = draw(st.integers(1, 4))
    free, spec, shape = list(mesh_shape), [], []
    for _ in range(rank):
        names = draw(st.lists(st.sampled_from(free), unique=True, max_size=2)) if free else []
        free = [n for n in free if n not in names]
        count = int(np.prod([mesh_shape[n] for n in names]))
        spec.append(None if not names else names[0] if len(names) == 1 else tuple(names))
        shape.append(count * draw(st.integers(0 if not names else 1, 3)))
    array = random_array(tuple(shape), draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**32 - 1)))
    layout = Layout(tuple(draw(st.permutations(range(rank)))), draw(tilings(rank)))
    return array, layout, mesh_shape, tuple(spec)


def check_same_bytes(array: sim.Array, jax_shards: list) -> None:
    """Every device: same index, same value bytes, same reported size and layout as JAX's shard."""
    assert [s.device for s in array.shards] == [s.device for s in jax_shards]
    for mine, theirs in zip(array.shards, jax_shards):
        where = f"device {mine.device}"
        assert tuple((s.start, s.stop) for s in mine.index) == theirs.index, where
        assert mine.raw().tobytes() == theirs.raw, f"{where}: bytes differ"
        assert mine.on_device_size_in_bytes == theirs.on_device_size_in_bytes, where
        assert (array.layout.major_to_minor, array.layout.tiling) == theirs.layout, where


# ---------------------------------------------------------------------------------------------- no JAX


def test_device_put_commits_and_lays_out_each_block():
    """With a Format the array is committed and each device's block holds its slice in the layout."""
    mesh = sim.Mesh({"x": 2})
    x = np.arange(12, dtype=np.int16).reshape(4, 3)
    a = sim.device_put(x, Format(Layout((1, 0)), sim.NamedSharding(mesh, P("x"))))
    assert a.committed and a.format.layout == Layout((1, 0)) and np.asarray(a).tolist() == x.tolist()
    assert a.shard(1).raw().view(np.int16).tolist() == [6, 9, 7, 10, 8, 11]


def test_uncommitted_arrays_are_row_major_on_device_0():
    """Without a target the array is uncommitted, row-major, on device 0; a bare sharding commits."""
    a = sim.device_put(np.ones((2, 3)))
    assert not a.committed and a.format == Format(Layout((0, 1)), sim.SingleDeviceSharding(0))
    assert sim.device_put(np.ones(2), sim.SingleDeviceSharding(1)).committed


def test_replicated_axes_hold_copies():
    """Devices along mesh axes the spec leaves out hold the same block."""
    a = sim.device_put(np.arange(8).reshape(4, 2), Format(Layout((1, 0)), sim.NamedSharding(sim.Mesh({"x": 2, "y": 2}),
                                                                                             P("x"))))
    assert a.shard(0).raw().tobytes() == a.shard(1).raw().tobytes() != a.shard(2).raw().tobytes()


def test_placement_into_given_memories():
    """memories= places the blocks into existing device memories (here a Simulation's)."""
    simulation = sim.Simulation(sim.Mesh({"x": 2}))
    a = sim.device_put(np.arange(4), sim.NamedSharding(simulation.mesh, P("x")), memories=simulation.memories)
    assert all(s.memory is simulation.memories[s.device] for s in a.shards)


BAD_PLACEMENTS = [
    pytest.param(lambda: sim.device_put(np.ones(2), Format(AUTO, sim.SingleDeviceSharding(0))),
                 sim.InvalidArgumentError, r"Layout\.AUTO is only for compiled functions", id="device_put-AUTO"),
    pytest.param(lambda: sim.device_put(np.ones(2), Format(Layout((1, 0)), sim.SingleDeviceSharding(0))),
                 sim.InvalidArgumentError, r"major_to_minor=\(1, 0\) has 2 entries but the array has rank 1",
                 id="device_put-rank"),
    pytest.param(lambda: sim.device_put(np.ones(3), sim.NamedSharding(sim.Mesh({"x": 2}), P("x"))),
                 sim.InvalidArgumentError, r"dimension 0 of size 3 must be divisible by the 2 devices of 'x'",
                 id="device_put-uneven"),
    pytest.param(lambda: sim.device_put(np.ones(3), "cpu:0"), sim.InvalidTypeError,
                 r"target='cpu:0' must be a sim.NamedSharding or sim.SingleDeviceSharding", id="device_put-str"),
    pytest.param(lambda: sim.NamedSharding(sim.Mesh({"x": 2}), P("z")), sim.InvalidArgumentError, r"unknown axis 'z'",
                 id="NamedSharding-unknown-axis"),
    pytest.param(lambda: sim.SingleDeviceSharding(-1), sim.InvalidTypeError, r"device=-1 must be a device id",
                 id="SingleDeviceSharding(-1)"),
]


@pytest.mark.parametrize("call, error, match", BAD_PLACEMENTS)
def test_bad_placements_are_rejected_with_the_rule(call, error, match):
    """Each bad placement raises its error type with a message naming the value and the rule."""
    with pytest.raises(error, match=match):
        call()


# ---------------------------------------------------------------------------------------------- against JAX


@pytest.mark.differential
@settings(max_examples=150)
@given(placements())
def test_single_device_bytes_equal_jax_cpu_buffers(jax_oracle, case):
    """device_put with Format(Layout(order, tiling), SingleDeviceSharding): the simulated device memory holds
    exactly the bytes of JAX's CPU buffer, for every rank 0-4, dtype of 1-8 bytes, permutation and tiling."""
    array, layout = case
    mine = sim.device_put(array, Format(layout, sim.SingleDeviceSharding(0)))
    check_same_bytes(mine, device_put_bytes(jax_oracle, array, layout.major_to_minor, layout.tiling, device=0))


@pytest.mark.differential
@settings(max_examples=100)
@given(sharded_placements())
def test_sharded_bytes_equal_jax_cpu_shards(jax_oracle, case):
    """The same on 2-, 4- and 8-device meshes with a NamedSharding: each device's bytes equal JAX's shard's."""
    array, layout, mesh_shape, spec = case
    mine = sim.device_put(array, Format(layout, sim.NamedSharding(sim.Mesh(mesh_shape), P(*spec))))
    theirs = device_put_bytes(jax_oracle, array, layout.major_to_minor, layout.tiling, mesh_shape=mesh_shape, spec=spec)
    check_same_bytes(mine, theirs)


@pytest.mark.differential
@pytest.mark.parametrize("tiling", [((0,),), ((2, 0),), ((),), ((2,), (0,))], ids=repr)
def test_tilings_jax_rejects_are_rejected_here(jax_oracle, tiling):
    """A zero or empty tile: XLA:CPU refuses it ("invalid tiles"), and so does Layout, naming the rule."""
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(OracleError, match=r"invalid tiles"):
        device_put_bytes(jax_oracle, x, (0, 1), tiling, device=0)
    with pytest.raises(ValueError, match=r"tile \d (has dimension 0|is empty)"):
        Layout((0, 1), tiling)


@pytest.mark.differential
def test_a_negative_tile_is_rejected_by_both(jax_oracle):
    """XLA cannot parse a negative tile dimension; Layout says it must be positive."""
    with pytest.raises(OracleError, match=r"Error parsing user-specified layout"):
        device_put_bytes(jax_oracle, np.zeros(3), (0,), ((-1,),), device=0)
    with pytest.raises(ValueError, match=r"every tile dimension must be a positive int"):
        Layout((0,), ((-1,),))
