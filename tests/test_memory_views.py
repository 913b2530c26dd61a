"""Memories as views: inputs adopted without a copy, global outputs written in place, and every fallback."""

from __future__ import annotations

import numpy as np
import pytest

import collectives
import sim
from layouts import Format, Layout
from sim import P


def _exchange(x):
    return collectives.all_to_all(x, "x", 0, 0, tiled=True)


ROWS = P("x")


def _mapped(body, in_specs=ROWS, out_specs=ROWS, mesh=None) -> sim.ShardMapped:
    return sim.shard_map(body, mesh=mesh or sim.Mesh({"x": 4}), in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)


def _expected_exchange(x: np.ndarray, n: int = 4) -> np.ndarray:
    """Tiled all_to_all over rows, split_axis=concat_axis=0, as one swap of (sender, receiver)."""
    return np.swapaxes(x.reshape(n, n, -1, *x.shape[1:]), 0, 1).reshape(x.shape)


def _result_buffers(body, seen: dict):
    """`body` that records, per device, the buffer its result lives in (None if it is not in memory)."""
    def run(*args):
        result = body(*args)
        context = sim.current()
        seen[context.device] = context.memory.find(np.asarray(result))
        return result
    return run


# ------------------------------------------------------------------------------------------- the memory

def test_adopt_holds_the_callers_bytes_read_only():
    """`adopt` makes a segment of the caller's own bytes: the view shares memory and cannot be written."""
    memory = sim.LocalMemory(0)
    small = memory.store(np.arange(3))
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    buffer = memory.adopt(array)
    view = memory.view(buffer)
    assert np.shares_memory(memory.raw(buffer), array) and view.tolist() == array.tolist()
    assert memory.find(view) == buffer and buffer.offset >= small.offset + 24
    with pytest.raises(ValueError, match="read-only"):
        view[0, 0] = 1
    assert array.flags.writeable  # the caller's array is untouched
    after = memory.store(np.ones(5))  # allocation goes on past the adopted segment
    assert after.offset >= buffer.offset + array.nbytes and memory.view(after).tolist() == [1] * 5


def test_adopt_takes_a_column_major_block_whose_bytes_are_one_run():
    """A Fortran-ordered array is one contiguous run in column-major layout: adopted, decoded the same."""
    array = np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3))
    memory = sim.LocalMemory(1)
    buffer = memory.adopt(array, Layout((1, 0)))
    assert np.shares_memory(memory.raw(buffer), array)
    assert memory.view(buffer).tolist() == array.tolist()
    assert memory.raw(buffer).view(np.int16).tolist() == [0, 3, 1, 4, 2, 5]


@pytest.mark.parametrize("array, layout", [
    (np.arange(12).reshape(3, 4)[:, :2], None),               # strided columns
    (np.arange(12).reshape(3, 4), Layout((1, 0))),            # row-major bytes, column-major layout
    (np.zeros((0, 4)), None),                                 # empty
], ids=["strided", "other-layout", "empty"])
def test_place_copies_what_adopt_refuses(array, layout):
    """Blocks that are not one non-empty run in their layout are refused by `adopt` and copied by `place`."""
    memory = sim.LocalMemory(0)
    with pytest.raises(ValueError, match="must be one non-empty contiguous run"):
        memory.adopt(array, layout)
    buffer = memory.place(array, layout)
    assert not np.shares_memory(memory.raw(buffer), array)
    assert memory.view(buffer).tolist() == array.tolist()


def test_a_reservation_is_taken_only_by_a_matching_row_major_alloc():
    """`alloc` takes a reserved region of its dtype and shape in row-major order; anything else allocates
    fresh memory, and `release` hands back what nothing took."""
    memory = sim.LocalMemory(0)
    target = np.zeros((4, 3), np.float32)
    memory.reserve(target[:2])
    memory.reserve(target[2:])
    assert not np.shares_memory(memory.raw(memory.alloc(np.float32, (2, 3), Layout((1, 0)))), target)
    assert not np.shares_memory(memory.raw(memory.alloc(np.float64, (2, 3))), target)
    taken = memory.alloc(np.float32, (2, 3))
    memory.view(taken)[...] = 7
    assert target[:2].tolist() == [[7] * 3] * 2 and target[2:].sum() == 0
    untaken = memory.release()
    assert len(untaken) == 1 and untaken[0].base is target and untaken[0][0, 0] == target[2, 0]
    assert not np.shares_memory(memory.raw(memory.alloc(np.float32, (2, 3))), target)


def test_reserve_rejects_regions_it_cannot_hand_out():
    """A reservation must be a non-empty, C-contiguous, writable region."""
    memory = sim.LocalMemory(2)
    frozen = np.zeros(4)
    frozen.flags.writeable = False
    for region in (np.zeros((4, 4))[:, :2], np.zeros(0), frozen):
        with pytest.raises(ValueError, match="device 2: reserve"):
            memory.reserve(region)


def test_replicas_are_compared_bit_for_bit_in_place():
    """Replicated outputs are compared bit for bit, strided results included: -0.0 differs from 0.0."""
    def body(block, signed):
        values = np.zeros((4, 4))
        values[1, 2] = -0.0 if signed and collectives.axis_index("x") == 1 else 0.0
        return values[:, ::2]

    for signed in (False, True):
        f = _mapped(lambda b, signed=signed: body(b, signed), out_specs=P())
        if signed:
            with pytest.raises(sim.InvalidArgumentError, match="device 1 and device 0 hold different values"):
                f(np.zeros(4))
        else:
            assert f(np.zeros(4)).tolist() == [[0.0, 0.0]] * 4


# ---------------------------------------------------------------------------------------- input placement

def test_contiguous_input_blocks_are_the_callers_bytes_and_read_only():
    """Rows split by P('x') are placed without a copy: each device's input shares memory with the caller's
    array, and writing into it raises numpy's read-only error."""
    x = np.arange(32.0).reshape(8, 4)
    shared, errors = {}, {}

    def body(block):
        device = sim.current().device
        shared[device] = np.shares_memory(np.asarray(block), x)
        try:
            block[0, 0] = -1
        except ValueError as error:
            errors[device] = str(error)
        return block * 2

    out = _mapped(body)(x)
    assert shared == dict.fromkeys(range(4), True)
    assert all("read-only" in e for e in errors.values()) and len(errors) == 4
    assert out.tolist() == (x * 2).tolist() and x[0, 0] == 0


def test_strided_input_blocks_are_copied_and_still_read_only():
    """Column blocks (P(None, 'x')) are copies in device memory; inside the program they are immutable too."""
    x = np.arange(32.0).reshape(4, 8)
    shared, writable = {}, {}

    def body(block):
        device = sim.current().device
        shared[device] = np.shares_memory(np.asarray(block), x)
        writable[device] = block.flags.writeable
        return block + 1

    out = _mapped(body, in_specs=P(None, "x"), out_specs=P(None, "x"))(x)
    assert not any(shared.values()) and not any(writable.values())
    assert out.tolist() == (x + 1).tolist()


def test_device_put_adopts_contiguous_blocks():
    """device_put places row blocks of a row-major array without a copy (the Array aliases the caller's
    array, read-only); a column-major Format of the same array is a copy in the new layout."""
    mesh = sim.Mesh({"x": 2})
    x = np.arange(12, dtype=np.int32).reshape(4, 3)
    rows = sim.device_put(x, sim.NamedSharding(mesh, P("x")))
    assert all(np.shares_memory(shard.raw(), x) for shard in rows.shards)
    with pytest.raises(ValueError, match="read-only"):
        rows.shard(1).data[0, 0] = 5
    columns = sim.device_put(x, Format(Layout((1, 0)), sim.NamedSharding(mesh, P("x"))))
    assert not any(np.shares_memory(shard.raw(), x) for shard in columns.shards)
    assert np.asarray(rows).tolist() == np.asarray(columns).tolist() == x.tolist()


# ---------------------------------------------------------------------------------------- outputs in place

def test_a_repeated_call_writes_its_output_in_place():
    """The first call copies the device results into the global output; a second call with the same input
    signature hands each device its region of a pre-allocated output, so the global output is device 0's
    memory (np.shares_memory) and the device bytes equal the returned blocks."""
    x = np.arange(64.0).reshape(16, 4)
    seen: dict = {}
    f = _mapped(_result_buffers(_exchange, seen))
    first = f(x)
    assert not np.shares_memory(first, f.last_run.simulation.memories[0].raw(seen[0]))
    second = f(x)
    memories = f.last_run.simulation.memories
    assert second.tolist() == first.tolist() == _expected_exchange(x).tolist()
    for device in range(4):
        raw = memories[device].raw(seen[device])
        assert np.shares_memory(second, raw)
        assert memories[device].view(seen[device]).tolist() == second[4 * device:4 * device + 4].tolist()


def test_ragged_output_is_written_in_place_on_a_repeated_call():
    """ragged_all_to_all's result (a copy of `output` with slices written) takes the reserved region too."""
    seen: dict = {}
    body = _result_buffers(lambda *a: collectives.ragged_all_to_all(*a, axis_name="x"), seen)
    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=(P("x"),) * 6, out_specs=P("x"))
    args = (np.array([1, 2, 2, 3, 4, 0]), np.full(8, -1), np.array([0, 1, 0, 1]), np.array([1, 2, 1, 1]),
            np.array([0, 0, 1, 2]), np.array([1, 1, 2, 1]))
    first, second = f(*args).tolist(), f(*args)
    assert first == second.tolist() == [1, 3, -1, -1, 2, 2, 4, -1]
    assert np.shares_memory(second, f.last_run.simulation.memories[1].raw(seen[1]))
    assert not np.shares_memory(second, args[1])


def test_an_output_that_is_no_collective_result_is_copied_in():
    """A result computed by numpy (or an input returned as is) does not live in the reserved region: it is
    copied into the pre-allocated output, which never aliases the caller's input."""
    x = np.arange(16.0).reshape(8, 2)
    doubled, same = _mapped(lambda b: b * 2), _mapped(lambda b: b)
    for _ in range(2):
        assert doubled(x).tolist() == (x * 2).tolist()
        out = same(x)
        assert out.tolist() == x.tolist() and not np.shares_memory(out, x)


def test_an_intermediate_of_the_output_shape_keeps_its_bytes():
    """When an intermediate of the output's shape takes the reserved region, the output is assembled into
    a new array and the intermediate's bytes in device memory stay what the program computed."""
    x = np.arange(64.0).reshape(16, 4)
    middles: dict = {}

    def body(block):
        middle = _exchange(block)
        context = sim.current()
        middles[context.device] = (context.memory.find(middle), np.array(middle))
        return _exchange(middle * 1)

    f = _mapped(body)
    first = f(x)
    second = f(x)
    assert first.tolist() == second.tolist() == _expected_exchange(_expected_exchange(x)).tolist()
    for device, (buffer, values) in middles.items():
        held = f.last_run.simulation.memories[device].view(buffer)
        assert held.tolist() == values.tolist() and not np.shares_memory(held, second)


def test_outputs_computed_in_the_other_order_fall_back():
    """Two outputs of one shape computed last-first swap their reservations: both are assembled afresh,
    with the right values, and each device buffer keeps its own result."""
    x = np.arange(64.0).reshape(16, 4)
    seen: dict = {}

    def body(block):
        late = _exchange(block)
        early = _exchange(block + 100)
        context = sim.current()
        seen[context.device] = (context.memory.find(early), context.memory.find(late))
        return early, late

    f = _mapped(body, out_specs=(P("x"), P("x")))
    f(x)
    early, late = f(x)
    assert early.tolist() == _expected_exchange(x + 100).tolist() and late.tolist() == _expected_exchange(x).tolist()
    memory = f.last_run.simulation.memories[0]
    assert memory.view(seen[0][0]).tolist() == early[:4].tolist()
    assert memory.view(seen[0][1]).tolist() == late[:4].tolist()


def test_column_split_outputs_are_assembled_by_copy():
    """A P(None, 'x') output block is strided in the global array, so nothing is reserved; repeated calls
    assemble it by copy, with the same values."""
    x = np.arange(32.0).reshape(4, 8)
    seen: dict = {}
    f = _mapped(_result_buffers(lambda b: collectives.all_to_all(b, "x", 0, 1, tiled=True), seen),
                in_specs=P(None, "x"), out_specs=P(None, "x"))
    first, second = f(x), f(x)
    assert first.tolist() == second.tolist()
    memories = f.last_run.simulation.memories
    assert not any(np.shares_memory(second, memories[d].raw(buffer)) for d, buffer in seen.items())


def test_replicated_outputs_are_compared_on_every_call():
    """An output replicated along an axis is taken from index 0 of that axis (written in place on a repeated
    call) and still checked against every twin; twins that differ are an error on any call."""
    mesh = sim.Mesh({"x": 2, "y": 2})
    x = np.arange(16.0).reshape(4, 4)
    gather = _mapped(lambda b: collectives.all_gather(b, "y", axis=1, tiled=True), in_specs=P("x", "y"),
                     out_specs=P("x"), mesh=mesh)
    assert gather(x).tolist() == gather(x).tolist() == x.tolist()
    varying = _mapped(lambda b: collectives.all_to_all(b, "y", 0, 0, tiled=True), in_specs=P("x"),
                      out_specs=P("x"), mesh=mesh)
    for _ in range(2):
        with pytest.raises(sim.InvalidArgumentError, match="replicated along mesh axis 'y'"):
            varying(x)


def test_pytrees_of_outputs_are_written_in_place():
    """Every leaf of a pytree output gets its own pre-allocated array: collective results are written in
    place, a leaf computed by numpy is copied into its own, and one result returned twice is written in
    place once and copied once (the two outputs never share memory)."""
    x = np.arange(64.0).reshape(16, 4)
    held: list = []

    def body(block):
        a, b = _exchange(block), _exchange(block)
        if sim.current().device == 0:
            held[:] = [sim.current().memory.find(a), sim.current().memory.find(b)]
        return {"a": a, "b": (block * 2, b)}

    f = _mapped(body, out_specs={"a": P("x"), "b": (P("x"), P("x"))})
    first = f(x)
    second = f(x)
    expected = _expected_exchange(x).tolist()
    assert second["a"].tolist() == second["b"][1].tolist() == first["a"].tolist() == expected
    assert second["b"][0].tolist() == (x * 2).tolist()
    memory = f.last_run.simulation.memories[0]
    assert np.shares_memory(second["a"], memory.raw(held[0]))
    assert np.shares_memory(second["b"][1], memory.raw(held[1]))
    assert not np.shares_memory(second["b"][0], second["a"]) and not np.shares_memory(second["b"][0], x)
    twice = _mapped(lambda b: (_exchange(b),) * 2, out_specs=(P("x"), P("x")))
    twice(x)
    one, other = twice(x)
    assert one.tolist() == other.tolist() == expected and not np.shares_memory(one, other)


def test_results_in_other_layouts_are_copied_into_the_output():
    """A collective writing a column-major result does not take the row-major region: the output is copied
    from it, and a column-major input Array is placed by copy in its own layout; values stay right."""
    mesh = sim.Mesh({"x": 4})
    x = np.arange(64.0).reshape(16, 4)
    placed = sim.device_put(x, Format(Layout((1, 0)), sim.NamedSharding(mesh, P("x"))))
    f = _mapped(lambda b: collectives.all_to_all(b, "x", 0, 0, tiled=True, out_layout=Layout((1, 0))), mesh=mesh)
    for _ in range(2):
        assert f(placed).tolist() == _expected_exchange(x).tolist()


def test_a_new_input_signature_is_not_given_stale_outputs():
    """Outputs pre-allocated for one input shape are not used for another: each call returns its own shape."""
    f = _mapped(_exchange)
    for rows in (16, 32, 16):
        x = np.arange(rows * 2.0).reshape(rows, 2)
        assert f(x).tolist() == _expected_exchange(x).tolist()


def test_a_scalar_output_is_written_in_place_on_a_repeated_call():
    """A 0-d replicated output (a psum of a scalar) is pre-allocated on the second call like any other and
    holds the right value every time."""
    f = sim.shard_map(lambda x: collectives.psum(x.sum(), "x"), mesh=sim.Mesh({"x": 4}), in_specs=P("x"),
                      out_specs=P())
    for _ in range(3):
        assert f(np.arange(8.0)).tolist() == 28.0


def test_allocations_are_aligned_in_the_machine_as_xla_aligns_its_buffers():
    """Every allocation starts at a multiple of 64 bytes of the process's memory (not only of the device
    memory's offsets): XLA:CPU reads such an operand in place, and copies any other first."""
    memory = sim.LocalMemory(0)
    views = [memory.view(memory.alloc(np.float32, shape)) for shape in [(3,), (1,), (5000,), (17, 3), (1 << 20,)]]
    views.append(memory.alloc_view(np.dtype(np.int8), (7,)))
    assert [v.ctypes.data % 64 for v in views] == [0] * len(views)


def test_alloc_in_takes_the_region_unless_an_earlier_reservation_would_be_taken():
    """`alloc_in(region)` is `reserve(region)` then `alloc`: the allocation is the region itself, charged; where
    an earlier reservation of the same dtype and shape exists, `alloc` would take that one first, so
    `alloc_in` allocates nothing and returns None."""
    memory = sim.LocalMemory(0)
    rows = np.zeros((2, 3), np.float32)
    view = memory.alloc_in(rows[1])
    assert view is not None and view.ctypes.data == rows[1].ctypes.data and memory.find(view) is not None
    view[...] = 7
    assert rows[1].tolist() == [7, 7, 7] and memory.size_bytes >= 12
    earlier = np.zeros(3, np.float32)
    memory.reserve(earlier)
    assert memory.alloc_in(rows[0]) is None
    taken = memory.view(memory.alloc(np.float32, (3,)))
    assert taken.ctypes.data == earlier.ctypes.data and memory.release() == []
    with pytest.raises(sim.InvalidArgumentError, match="C-contiguous"):
        memory.alloc_in(np.zeros((3, 2), np.float32)[:, 0])
