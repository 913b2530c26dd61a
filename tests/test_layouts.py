"""Layouts without JAX: geometry, encode/decode, tiling, Format rules, memories, and the bad-layout table."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layouts
import sim
from layouts import AUTO, Format, Layout

DTYPES = tuple(np.dtype(t) for t in ("bool", "int8", "uint8", "int16", "float16", "int32", "float32", "uint32",
                                     "int64", "float64", "complex64"))


@st.composite
def arrays_with_layouts(draw: st.DrawFn, max_rank: int = 4) -> tuple[np.ndarray, Layout]:
    """A random array of rank 0 to `max_rank` (dims 0 to 4) in any dtype, and any permutation layout."""
    rank = draw(st.integers(0, max_rank))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=rank, max_size=rank)))
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**32 - 1))
    return random_array(shape, dtype, seed), Layout(tuple(draw(st.permutations(range(rank)))))


def random_array(shape: tuple[int, ...], dtype: np.dtype, seed: int) -> np.ndarray:
    """Random bits of `dtype` (0/1 for bool), so NaN payloads and signed zeros are covered."""
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    if dtype.kind == "b":
        return rng.integers(0, 2, count).astype(bool).reshape(shape)
    return rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)


# ---------------------------------------------------------------------------------------------- geometry


def test_row_and_column_major_are_the_guide_s_orders():
    """(0, 1) is row-major and (1, 0) column-major, as the layout guide defines them."""
    array = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert layouts.encode(array, Layout.row_major(2)).view(np.int32).tolist() == [0, 1, 2, 3, 4, 5]
    assert layouts.encode(array, Layout.column_major(2)).view(np.int32).tolist() == [0, 3, 1, 4, 2, 5]
    assert Layout((1, 0)).minor_to_major == (0, 1)


@given(arrays_with_layouts())
def test_decode_inverts_encode_and_views_the_bytes(case):
    """decode(encode(x)) == x bit for bit, and the decoded array is a writable view of the bytes."""
    array, layout = case
    raw = layouts.encode(array, layout).copy()
    decoded = layouts.decode(raw, array.dtype, array.shape, layout)
    assert decoded.tobytes() == array.tobytes()
    if array.size:
        last = array.reshape(-1)[-1]
        decoded[(0,) * array.ndim] = last  # element (0, ..., 0) is the first in memory in every layout
        assert raw[:array.itemsize].tobytes() == np.asarray(last).tobytes()


@given(arrays_with_layouts())
def test_strides_and_offsets_derive_from_the_layout(case):
    """Each element sits at the byte offset the strides give, and the bytes are the transposed array's."""
    array, layout = case
    raw = layouts.encode(array, layout)
    assert raw.tobytes() == np.ascontiguousarray(array.transpose(layout.major_to_minor)).tobytes()
    for index in itertools.islice(np.ndindex(*array.shape), 20):
        at = layouts.offset(index, array.dtype, array.shape, layout)
        assert raw[at:at + array.itemsize].tobytes() == array[index].tobytes()


@pytest.mark.parametrize("shape, order, tiling, size", [
    ((2, 3), (0, 1), ((2, 2),), 32),             # the guide's finding: 1 x 2 tiles of 2 x 2 int32
    ((2, 3), (0, 1), ((8, 128),), 4096),
    ((2, 3), (1, 0), ((2,),), 24),               # minor dimension 2 needs no padding
    ((3,), (0,), ((2, 2),), 32),                 # a tile longer than the rank pads the missing dimension
    ((), (), ((2, 2),), 16),
    ((2, 3, 4), (2, 0, 1), ((2, 2),), 128),
    ((2, 3, 4), (1, 2, 0), ((8,), (2,)), 384),   # only the first tile pads
    ((2, 3), (0, 1), ((3, 5), (7,)), 60),
    ((0, 3), (1, 0), ((2, 2),), 0),
])
def test_size_in_bytes_is_xla_s_padded_size(shape, order, tiling, size):
    """Layout.size_in_bytes equals what XLA:CPU reports as on_device_size_in_bytes (int32), measured."""
    assert Layout(order, tiling).size_in_bytes(np.int32, shape) == size
    assert layouts.nbytes(np.int32, shape, Layout(order, tiling)) == int(np.prod(shape)) * 4


def test_tiled_order_follows_xla_s_tiles():
    """With apply_tiling, tiles are laid out tile by tile, padded; each further tile subdivides the last."""
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int8)
    assert layouts.encode(x, Layout((0, 1), ((2, 2),)), apply_tiling=True).tolist() == [1, 2, 4, 5, 3, 0, 6, 0]
    assert layouts.encode(x, Layout((0, 1), ((2,),)), apply_tiling=True).tolist() == [1, 2, 3, 0, 4, 5, 6, 0]
    two_level = layouts.encode(np.arange(1, 17, dtype=np.int8).reshape(4, 4), Layout((0, 1), ((4, 4), (2, 1))),
                               apply_tiling=True)
    assert two_level.tolist() == [1, 5, 2, 6, 3, 7, 4, 8, 9, 13, 10, 14, 11, 15, 12, 16]


@given(arrays_with_layouts(max_rank=3), st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=3),
                                                  min_size=1, max_size=2))
def test_tiled_order_round_trips(case, tiling):
    """decode(encode(x, apply_tiling=True), apply_tiling=True) == x for any tiling."""
    array, layout = case
    tiled = Layout(layout.major_to_minor, tuple(map(tuple, tiling)))
    raw = layouts.encode(array, tiled, apply_tiling=True)
    assert layouts.decode(raw, array.dtype, array.shape, tiled, apply_tiling=True).tobytes() == array.tobytes()


def test_tiling_changes_the_reported_size_not_the_bytes():
    """XLA:CPU's placement: the bytes of a tiled layout are the untiled ones; only the size grows."""
    x = np.arange(6, dtype=np.int32).reshape(2, 3) + 1
    assert layouts.encode(x, Layout((0, 1), ((2, 2),))).tobytes() == x.tobytes()


def test_layout_of_and_contiguous_runs():
    """layout_of reads a permutation off strides; contiguous_runs counts the runs a strided copy touches."""
    x = np.zeros((4, 6, 2))
    assert layout_of_orders(x) == (0, 1, 2) and layout_of_orders(x.transpose(2, 0, 1)) == (1, 2, 0)
    assert layouts.contiguous_runs(x) == 1 and layouts.contiguous_runs(x[:, :3]) == 4
    assert layouts.contiguous_runs(x[:, :, 0]) == 24 and layouts.contiguous_runs(x[:0]) == 0


def layout_of_orders(array: np.ndarray) -> tuple[int, ...]:
    return layouts.layout_of(array).major_to_minor


# ---------------------------------------------------------------------------------------------- Format


def test_format_needs_a_sharding_for_a_concrete_layout():
    """As in JAX: Format(AUTO) and Format() are fine without a sharding; a concrete layout is not."""
    assert Format(AUTO).is_auto and Format().layout is None
    with pytest.raises(ValueError, match=r"a concrete layout needs a sharding"):
        Format(Layout((1, 0)))
    assert Format(Layout((1, 0)), sim.SingleDeviceSharding(0)) == Format(Layout((1, 0)), sim.SingleDeviceSharding(0))


def test_auto_is_one_sentinel():
    """Layout.AUTO is a single object that survives pickling, and shows as AUTO."""
    import pickle

    assert Layout.AUTO is AUTO and pickle.loads(pickle.dumps(AUTO)) is AUTO and repr(AUTO) == "AUTO"


# ---------------------------------------------------------------------------------------------- memories


@given(arrays_with_layouts())
@settings(max_examples=50)
def test_memory_holds_encoded_bytes_and_reserves_the_padded_size(case):
    """A stored buffer's bytes are encode's; it reserves size_in_bytes; find() recognises its view."""
    array, layout = case
    tiled = Layout(layout.major_to_minor, ((2, 2),))
    memory = sim.LocalMemory(3)
    buffer = memory.store(array, tiled)
    assert memory.raw(buffer).tobytes() == layouts.encode(array, tiled).tobytes()
    assert buffer.on_device_size_in_bytes == tiled.size_in_bytes(array.dtype, array.shape)
    assert memory.size_bytes == buffer.offset + buffer.on_device_size_in_bytes
    if array.size:
        assert memory.find(memory.view(buffer)) == buffer


def test_resident_keeps_the_layout_of_a_foreign_block():
    """A column-major block copied into another memory stays column-major (no silent relayout)."""
    source = sim.LocalMemory(0)
    block = source.view(source.store(np.arange(6).reshape(2, 3), Layout((1, 0))))
    copy = sim.LocalMemory(1).resident(block)
    assert copy.layout == Layout((1, 0))


# ---------------------------------------------------------------------------------------------- bad layouts

BAD_LAYOUTS = [
    pytest.param(lambda: Layout((0, 0)), ValueError, r"major_to_minor=\(0, 0\) must be a permutation",
                 id="Layout((0,0))"),
    pytest.param(lambda: Layout((0, 2)), ValueError, r"must be a permutation of 0\.\.1", id="Layout((0,2))"),
    pytest.param(lambda: Layout(1), TypeError, r"major_to_minor=1 must be a tuple", id="Layout(1)"),
    pytest.param(lambda: Layout((0, 1), ((0, 2),)), ValueError, r"tile 0 has dimension 0; every tile dimension must be "
                 r"a positive int", id="Layout-tile-(0,2)"),
    pytest.param(lambda: Layout((0,), ((-1,),)), ValueError, r"dimension -1; every tile dimension must be a positive",
                 id="Layout-tile-(-1,)"),
    pytest.param(lambda: Layout((0,), ((),)), ValueError, r"tile 0 is empty", id="Layout-tile-()"),
    pytest.param(lambda: Layout((0,), ((2.0,),)), ValueError, r"dimension 2\.0", id="Layout-tile-(2.0,)"),
    pytest.param(lambda: Layout((0,), (2, 2)), TypeError, r"must be a tuple of tile shapes", id="Layout-tiling-(2,2)"),
    pytest.param(lambda: Layout((0, 1)).check_rank(3), ValueError, r"has 2 entries but the array has rank 3",
                 id="check_rank"),
    pytest.param(lambda: Layout((0, 1)).check_rank(3, "device 2: psum: out_layout"), ValueError,
                 r"^device 2: psum: out_layout: major_to_minor=\(0, 1\) has 2 entries", id="check_rank-where"),
    pytest.param(lambda: Format("row-major"), TypeError, r"layout='row-major' must be a layouts.Layout",
                 id="Format(str)"),
    pytest.param(lambda: layouts.decode(np.zeros(3, np.uint8), np.int32, (2,), Layout((0,))), ValueError,
                 r"raw has uint8\[3\] but a int32\[2\] array needs uint8\[8\]", id="decode-short"),
]


@pytest.mark.parametrize("call, error, match", BAD_LAYOUTS)
def test_bad_layouts_are_rejected_with_the_rule(call, error, match):
    """Each bad layout argument raises its error type, a MeshError too, with a message echoing the value and
    the rule."""
    with pytest.raises(error, match=match) as caught:
        call()
    assert isinstance(caught.value, layouts.MeshError)
