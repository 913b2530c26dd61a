"""A run's start and end at once equal them device by device: inputs whose blocks are runs of whole rows are
held by every memory at once (`sim.memory._blocks.place_blocks`), and a row-split global output's regions are cut from
one reshape, its blocks' addresses worked out from the array's (`sim.program._blocks`). With `row_blocks`
answering None, every input and output takes the general per-device path; both give the same memories
(segments, offsets, bytes, buffers, views, flags), programs, trace, calls and outputs on a first and a repeated
call. A deliberately wrong block numbering is caught by the same comparison, to show that it can fail."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import sim
from layouts import Layout
from sim.memory import _memory
from sim.program import _blocks, _shard_map
from sim.program._tree import leaves

_MESHES = [{"x": 1}, {"x": 4}, {"x": 8}, {"x": 2, "y": 3}, {"y": 4, "x": 2}]
_SPECS = [sim.P("x"), sim.P(), sim.P(("x", "y")), sim.P("y"), sim.P(None, "x"), sim.P(("y", "x"))]
_BODIES = {
    "identity": lambda *xs: xs[0],
    "double": lambda *xs: xs[0] * 2,
    "psum": lambda *xs: collectives.psum(xs[0], "x"),
    "all_gather": lambda *xs: collectives.all_gather(xs[0], "x", tiled=True),
    "pair": lambda *xs: (xs[0], xs[-1] + 1),
}


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _memory_state(memory: _memory.LocalMemory) -> tuple:
    """Everything a memory holds: segments (offset, size, bytes, writable, whether it is the caller's bytes),
    its top, and each buffer it handed out with its view's shape, strides, flags and bytes."""
    segments = [(base, segment.size, segment.tobytes(), segment.flags.writeable) for base, segment in
                memory._segments]
    buffers = [(buffer, memory._views[id(buffer)].shape, memory._views[id(buffer)].strides,
                memory._views[id(buffer)].flags.writeable, memory._views[id(buffer)].tobytes())
               for buffer in memory._owners.values()]
    return memory._top, segments, buffers, memory.meter.held_bytes


def _state(f: sim.ShardMapped, args: tuple) -> list:
    """A first and a repeated call of `f` on `args`: outputs' bytes, each memory, program, trace and calls."""
    states = []
    for _ in range(2):
        run = f.run(*args)
        results = [np.asarray(o) for o in leaves(run.outputs)]
        outputs = [(o.dtype.str, o.shape, o.tobytes()) for o in results]
        # which of the caller's inputs and the outputs returned each view's bytes are
        adopted = [[tuple(np.shares_memory(view, a) for a in args + tuple(results))
                    for view in memory._views.values()] for memory in run.simulation.memories]
        states.append((outputs, [_memory_state(m) for m in run.simulation.memories],
                       [str(p) for p in run.simulation.programs], run.trace.to_json(),
                       [repr(c) for c in run.calls], adopted, run.end_time_s))
    return states


@st.composite
def _cases(draw):
    """A mesh, one to three inputs (shapes, dtypes, specs whose blocks divide), a program and out_specs."""
    mesh = draw(st.sampled_from(_MESHES))
    size = int(np.prod(list(mesh.values())))
    count = draw(st.integers(1, 3))
    specs, args = [], []
    for k in range(count):
        spec = draw(st.sampled_from([s for s in _SPECS if all(a in mesh for a in s.axes())]))
        rows = draw(st.sampled_from([size, 2 * size, 3 * size]))
        shape = (rows,) if draw(st.booleans()) and spec != sim.P(None, "x") else (rows, draw(st.sampled_from(
            [size, 2 * size])))
        dtype = draw(st.sampled_from(["float32", "int16", "float64"]))
        args.append((np.arange(np.prod(shape)) * (k + 3) % 251).astype(dtype).reshape(shape))
        specs.append(spec)
    name = draw(st.sampled_from(sorted(_BODIES)))
    if name in ("psum", "all_gather") and "x" not in mesh:
        name = "identity"
    out = specs[0]
    if name == "pair":
        out = (specs[0], specs[-1])
    if name == "all_gather":
        out = sim.P()
        specs[0] = sim.P("x")
    return mesh, tuple(specs), name, out, tuple(args)


def _run(case, general: bool, wrong: bool = False) -> list | str:
    mesh, specs, name, out, args = case
    with pytest.MonkeyPatch.context() as patch:
        if general:  # every input and output device by device
            patch.setattr(_blocks, "row_blocks", lambda *a: None)
            patch.setattr(_shard_map, "row_blocks", lambda *a: None)
        if wrong:  # devices take their neighbours' blocks
            real = _blocks.row_blocks

            def shifted(*a):
                found = real(*a)
                return found if found is None else (found[0], found[1][1:] + found[1][:1])

            patch.setattr(_shard_map, "row_blocks", shifted)
        body = _BODIES[name] if isinstance(name, str) else name
        f = sim.shard_map(body, mesh=sim.Mesh(mesh), in_specs=specs, out_specs=out, check_vma=name == "pair")
        try:
            return _state(f, args)
        except sim.MeshError as error:  # e.g. an out_specs claim a program breaks: the same error both ways
            return f"{type(error).__name__}: {error}"


@settings(max_examples=60, deadline=None)
@given(case=_cases())
def test_placing_and_assembling_at_once_equals_device_by_device(case):
    """Same outputs, memories, programs, trace, calls and times, first and repeated call, with and without the
    paths that hold every block and cut every region at once."""
    assert _run(case, general=False) == _run(case, general=True)


def test_nested_inputs_at_once_equal_device_by_device():
    """Inputs in a tree (a dict whose keys are not in sorted order, a tuple inside it) reach each device's
    program in the same places, typed and recorded alike, at once and device by device."""
    x = np.arange(16, dtype=np.float32)
    args = ({"b": x * 3, "a": (np.arange(4, dtype=np.int16), x + 1)},)
    specs = ({"b": sim.P("x"), "a": (sim.P(), sim.P("x"))},)
    case = ({"x": 4}, specs, lambda d: d["a"][1] * d["b"] + d["a"][0][0], sim.P("x"), args)
    assert _run(case, general=False) == _run(case, general=True)
    assert not isinstance(_run(case, general=False), str)


def test_start_comparison_can_fail():
    """Inputs placed one block over (each device holding its neighbour's block) differ from the general path."""
    case = ({"x": 4}, (sim.P("x"),), "identity", sim.P("x"), (np.arange(8, dtype=np.float32),))
    assert _run(case, general=False) == _run(case, general=True)
    assert _run(case, general=False, wrong=True) != _run(case, general=True)


@pytest.mark.parametrize("mesh", _MESHES)
@pytest.mark.parametrize("spec", _SPECS)
def test_regions_cut_at_once_equal_block_indices(mesh, spec):
    """Each writer's region of a global array, cut from one reshape, is the block `block_indices` gives, and
    its address the one read off the region."""
    mesh = sim.Mesh(mesh)
    if not all(a in mesh.axis_names for a in spec.axes()):
        return
    shape = (2 * mesh.size, mesh.size)
    array = np.zeros(shape, np.float32)
    aval = _blocks.Aval(spec, shape, array.dtype)
    regions = _blocks._regions(mesh, aval, array, "out")
    indices = _blocks.block_indices(mesh, spec, shape, "out")
    writers = _blocks._writers(mesh, spec)
    assert len(regions) == len(writers)
    for d, region in zip(writers, regions):
        expected = array[indices[d]]
        assert _address(region) == _address(expected) and region.shape == expected.shape
        assert region.strides == expected.strides
    rows = _blocks._row_numbers(mesh, aval, "out")
    assert _blocks._region_addresses(mesh, aval, array, "out", rows) == [_address(r) for r in regions]


def _general_store(memory: _memory.LocalMemory, array: np.ndarray, layout) -> _memory.Buffer:
    """`LocalMemory.store` as the general path makes it: an allocation, then the values written."""
    buffer = memory.alloc(array.dtype, array.shape, layout)
    memory.view(buffer)[...] = array
    return buffer


def _misplacing_store(memory: _memory.LocalMemory, array: np.ndarray, layout) -> _memory.Buffer:
    """A wrong store: a stray byte allocated before the array."""
    memory.alloc(np.uint8, (1,))
    return memory.store(array, layout)


def _stores(store, steps: list) -> tuple:
    """A memory after `steps` (adopt a block, reserve a region, store an array with a layout), and the buffers
    the stores returned with their views' bytes, and what `find` says of each view."""
    memory = _memory.LocalMemory(0, sim.MemoryMeter(None))
    found = []
    for kind, array, layout in steps:
        if kind == "adopt":
            memory.place(array)
        elif kind == "reserve":
            memory.reserve(np.zeros(array.shape, array.dtype))
        else:
            buffer = store(memory, array, layout)
            found.append((buffer, memory.view(buffer).tobytes(), memory.find(memory.view(buffer)) is buffer))
    memory._address_adopted()
    known = sorted((b.offset, repr(b)) for b in memory._by_address.values())
    return _memory_state(memory), found, known, [r.shape for r in memory.release()]


@st.composite
def _steps(draw):
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["store", "store", "adopt", "reserve"]))
        shape = tuple(draw(st.lists(st.integers(0 if kind == "store" else 1, 3), max_size=3)))
        dtype = draw(st.sampled_from(["float32", "int8", "float64", "bool"]))
        array = (np.arange(int(np.prod(shape))) % 7).astype(dtype).reshape(shape)
        if kind == "adopt" and array.ndim == 0:
            array = array.reshape(1)
        layout = draw(st.sampled_from([None, "row", "reversed"]))
        if layout == "row":
            layout = Layout.row_major(array.ndim)
        elif layout == "reversed":
            layout = Layout(tuple(reversed(range(array.ndim))))
        steps.append((kind, array, layout))
    return steps


@settings(max_examples=80, deadline=None)
@given(steps=_steps())
def test_store_equals_allocation_then_write(steps):
    """`LocalMemory.store` of a row-major array (its quick path through `alloc_view`) leaves the memory, the
    buffer, its view and `find` exactly as an allocation followed by a write does, among adopted blocks,
    reservations and arrays of other layouts."""
    assert _stores(_memory.LocalMemory.store, steps) == _stores(_general_store, steps)


def test_store_comparison_can_fail():
    """A store that misplaces its array by one allocation is told apart from the general path."""
    steps = [("store", np.arange(4, dtype=np.float32), None)]
    assert _stores(_misplacing_store, steps) != _stores(_general_store, steps)


def _attached(memory: _memory.LocalMemory, region: np.ndarray) -> _memory.Buffer:
    """A reserved region taken as the general path takes it: charged, then attached as another array's bytes."""
    memory._charge("a block of a global output", region.dtype, region.shape, region.nbytes)
    return memory._attach(region.reshape(-1).view(np.uint8), region.dtype, region.shape,
                          Layout.row_major(region.ndim), writable=True)


def _taken(memory: _memory.LocalMemory, region: np.ndarray) -> _memory.Buffer:
    memory.reserve(region)
    return memory.alloc(region.dtype, region.shape)


def _after_take(take, steps: list, region_shape: tuple, dtype: str, one_row: bool = False) -> tuple:
    """A memory after `steps`, then a region of a global output taken by `take`: its state, the buffer, its
    view's bytes, shape, strides and flags, whether the view is the region's bytes and what `find` says."""
    memory = _memory.LocalMemory(0, sim.MemoryMeter(None))
    for kind, array, layout in steps:
        if kind == "adopt":
            memory.place(array)
        elif kind == "store":
            memory.store(array, layout)
    # a middle block of three; of one row, its length-1 leading axis strides over all three (still C-contiguous)
    output = np.zeros((1, 3, *region_shape), dtype)
    region = output[:, 1] if one_row else output[0, 1]
    assert region.flags.c_contiguous
    buffer = take(memory, region)
    view = memory.view(buffer)
    view[...] = 5
    return (_memory_state(memory), buffer, view.shape, view.strides, view.flags.writeable,
            output.tobytes(), memory.find(view) is buffer, memory.find(view.view(sim.Varying)) is buffer)


@settings(max_examples=60, deadline=None)
@given(steps=_steps(), shape=st.lists(st.integers(1, 3), min_size=1, max_size=3),
       dtype=st.sampled_from(["float32", "int8", "float64"]), one_row=st.booleans())
def test_taking_a_reserved_region_equals_attaching_it(steps, shape, dtype, one_row):
    """`alloc` taking a reserved region of a global output (its view made without decoding) leaves the memory,
    the buffer, its view (C strides, even where the region's length-1 axis strides otherwise) and `find` as
    attaching the region's bytes does, and writes land in the output."""
    case = (steps, tuple(shape), dtype, one_row)
    assert _after_take(_taken, *case) == _after_take(_attached, *case)


def test_take_comparison_can_fail():
    """A take that ignores the region (a fresh allocation: writes never reach the output) is told apart."""
    def fresh(memory, region):
        return memory.alloc(region.dtype, region.shape)

    assert _after_take(fresh, [], (2,), "float32") != _after_take(_attached, [], (2,), "float32")

    def as_region(memory, region):  # the region itself as the view: its strides, not C strides
        buffer = _taken(memory, region)
        memory._views[id(buffer)] = region
        return buffer

    assert _after_take(as_region, [], (2,), "float32", True) != _after_take(_attached, [], (2,), "float32", True)
