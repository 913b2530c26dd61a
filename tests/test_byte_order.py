"""Arrays in non-native byte order: converted to native once where they enter meshsim (shard_map's inputs,
device_put, jit, ShapeDtypeStruct, precv's out_shape) or where a value made inside a program reaches a
collective, so that memories, collectives and outputs hold native dtypes with the same values."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import collectives
import layouts
import sim
from sim import P

OTHER = ">" if sys.byteorder == "little" else "<"  # the byte order this machine does not use
CODES = ["c8", "c16", "i4", "i8", "u2", "f2", "f4", "f8"]


def other(x: np.ndarray) -> np.ndarray:
    """`x`'s values in the byte order this machine does not use."""
    return x.astype(x.dtype.newbyteorder(OTHER))


def mapped(body, check_vma: bool = False):
    return sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"), check_vma=check_vma)


def values(code: str, n: int = 4) -> np.ndarray:
    x = np.arange(1, n + 1).astype(code)
    return x * (1 + 1j) if x.dtype.kind == "c" else x


def assert_native_and_equal(got, want) -> None:
    assert got.dtype.isnative and got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.tobytes() == want.tobytes()


def test_the_reported_calls_give_the_sums():
    """psum of a big-endian complex64 input gives the sums (not zeros) and of a big-endian int32 no TypeError,
    both in native dtypes, as JAX gives after converting the inputs."""
    f = mapped(lambda b: collectives.psum(b, "x"))
    got = f(np.array([1 + 1j, 2 + 2j, 3 + 3j, 4 + 4j], ">c8"))
    assert got.dtype == np.complex64 and got.tolist() == [4 + 4j, 6 + 6j] * 2
    got = f(np.arange(4, dtype=">i4"))
    assert got.dtype == np.int32 and got.tolist() == [2, 4] * 2


CALLS = {
    "psum": lambda b: collectives.psum(b, "x"),
    "psum ring": lambda b: collectives.psum(b, "x", algorithm="ring"),
    "psum recursive_doubling": lambda b: collectives.psum(b, "x", algorithm="recursive_doubling"),
    "pmax": lambda b: collectives.pmax(b.real, "x"),
    "psum_scatter": lambda b: collectives.psum_scatter(b, "x", tiled=True),
    "all_gather": lambda b: collectives.all_gather(b, "x", tiled=True),
    "all_to_all": lambda b: collectives.all_to_all(b, "x", 0, 0, tiled=True),
    "ppermute": lambda b: collectives.ppermute(b, "x", [(0, 1), (1, 0)]),
    "pbroadcast": lambda b: collectives.pbroadcast(b, "x", 1),
}


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("name", list(CALLS))
def test_an_input_in_the_other_byte_order_runs_as_its_native_copy(name, code):
    """Every kind of collective (reducing, gathering, exchanging, permuting) on an input in the other byte
    order gives the bytes and the native dtype of the same call on the native input, on a first call and on
    a repeated one (the placement kept from the first)."""
    f = mapped(CALLS[name])
    x = values(code)
    want = f(x)
    for _ in range(2):
        assert_native_and_equal(f(other(x)), want)
    assert_native_and_equal(mapped(CALLS[name])(other(x)), want)  # placed by a plan made from the other order


@pytest.mark.parametrize("code", ["c8", "c16", "i4", "f4"])
@pytest.mark.parametrize("name", ["psum", "psum ring", "pmax", "all_to_all", "ppermute"])
def test_a_value_made_in_the_other_byte_order_inside_a_program_reaches_a_collective_native(name, code):
    """A value a program makes in the other byte order (`astype('>c8')`) reaches a collective as its native
    copy: the same bytes and dtype as from the native value, typed or not (no reinterpreted bytes, no zeros)."""
    x = values(code)
    for check_vma in (False, True):
        want = mapped(CALLS[name], check_vma=check_vma)(x)
        got = mapped(lambda b: CALLS[name](other(np.asarray(b))), check_vma=check_vma)(x)
        assert_native_and_equal(got, want)


def test_outputs_come_back_native():
    """A program that returns arrays in the other byte order (alone, in a flat tuple, in a dict) gives native
    outputs with the same values."""
    x = values("f4")
    for body, pick in ((lambda b: other(np.asarray(b)), lambda out: out),
                       (lambda b: (other(np.asarray(b)), b), lambda out: out[0]),
                       (lambda b: {"a": other(np.asarray(b))}, lambda out: out["a"])):
        assert_native_and_equal(pick(mapped(body)(x)), x)


def test_device_put_holds_native_bytes():
    """device_put of an array in the other byte order gives a native Array whose device bytes are the native
    bytes of the values (what a JAX CPU buffer holds), in any layout."""
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    sharding = sim.NamedSharding(sim.Mesh({"x": 2}), P("x"))
    for target in (None, sharding, layouts.Format(layouts.Layout((0, 1)), sharding)):
        placed = sim.device_put(other(x), target)
        assert placed.dtype == np.float32
        assert_native_and_equal(np.asarray(placed), x)
        for shard in placed.addressable_shards:
            assert shard.raw().tobytes() == sim.device_put(x, target).shard(shard.device).raw().tobytes()


def test_jit_compiles_and_runs_the_native_dtype():
    """jit called with, or traced for, the other byte order compiles for the native dtype, and its compiled
    function takes either order."""
    sharding = sim.NamedSharding(sim.Mesh({"x": 2}), P("x"))
    jitted = sim.jit(lambda v: v * 2, in_shardings=sharding, out_shardings=sharding)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    assert_native_and_equal(np.asarray(jitted(other(x))), x * 2)
    compiled = jitted.trace(sim.ShapeDtypeStruct((4, 2), other(x).dtype)).lower().compile()
    for argument in (x, other(x)):
        assert_native_and_equal(np.asarray(compiled(argument)), x * 2)


def test_shape_dtype_structs_are_native():
    """A ShapeDtypeStruct of the other byte order stands for the native dtype: as its dtype, as an abstract
    shard_map input (its output struct), and as precv's out_shape (pairing with a native send)."""
    assert sim.ShapeDtypeStruct((2,), np.dtype(OTHER + "c8")).dtype == np.complex64
    out = mapped(lambda b: collectives.psum(b, "x"))(sim.ShapeDtypeStruct((4,), OTHER + "f4"))
    assert out.dtype == np.float32 and out.shape == (4,)

    class Shape:  # anything with a shape and a dtype
        shape, dtype = (2,), np.dtype(OTHER + "f8")

    perm = [(0, 1), (1, 0)]
    got = mapped(lambda b: collectives.precv(collectives.psend(b, "x", perm), Shape(), "x", perm))(np.arange(4.0))
    assert_native_and_equal(got, np.array([2.0, 3.0, 0.0, 1.0]))


def test_native_dtype_and_native_array():
    """layouts.native_dtype / native_array: native dtypes and arrays are returned as they are (no copy); the
    other byte order becomes the native dtype with the same values; one-byte types have no order."""
    x = np.arange(3, dtype=np.int32)
    assert layouts.native_array(x) is x
    assert layouts.native_dtype(np.int32) == np.int32
    assert layouts.native_dtype(OTHER + "i4") == np.int32 and layouts.native_dtype(OTHER + "i4").isnative
    assert layouts.native_dtype("|u1") == np.uint8 and layouts.native_dtype(layouts.BFLOAT16) == layouts.BFLOAT16
    assert_native_and_equal(layouts.native_array(other(x)), x)
