"""The quick paths of a run's start and of the reductions equal the general ones: `quick_combine` returns the
rules' bytes wherever it answers, an input block adopted by `LocalMemory.place`'s row-major path is held
exactly as the general `adopt` holds it (offsets, buffer, view, bytes), every device's block index found at
once is the one found device by device, and device programs run by the idle worker greenlets of earlier runs
run as on new greenlets. Each comparison also meets a deliberately wrong
quick path or a different run, to show that it can fail."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import sim
from collectives._arithmetic import combine, combine_by_rules, quick_combine
from layouts import Layout
from sim.engine import _driver
from sim.memory._memory import LocalMemory
from sim.memory._meter import MemoryMeter
from sim.program._blocks import _writers, block_index, block_indices

_FLOATS = {"float32": np.uint32, "float64": np.uint64}
# normals, both zeros, subnormals, infinities, a quiet and a signalling NaN of each sign (as raw bits)
_SPECIAL_BITS = {
    "float32": [0x3FC00000, 0xC0100000, 0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x80800000,
                0x7F800000, 0xFF800000, 0x7FC00001, 0xFFC00000, 0x7F800001, 0xFF812345, 0x7F7FFFFF, 0x3F800000],
    "float64": [0x3FF8000000000000, 0xC002000000000000, 0, 0x8000000000000000, 1, 0x800FFFFFFFFFFFFF,
                0x0010000000000000, 0x8010000000000000, 0x7FF0000000000000, 0xFFF0000000000000,
                0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FEFFFFFFFFFFFFF, 0x3FF0000000000000],
}


@st.composite
def _operands(draw):
    """Two float32/float64 operands of one shape (or one of them 0-d; empty ones too), from special and
    random bit patterns (mostly ordinary values, so that the quick path answers often)."""
    dtype = draw(st.sampled_from(sorted(_FLOATS)))
    unsigned = np.dtype(_FLOATS[dtype])
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=1, max_size=2)))

    def operand(shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape))
        style = draw(st.sampled_from(["ordinary", "ordinary", "special", "random"]))
        if style == "ordinary":
            values = draw(st.lists(st.integers(-1000, 1000), min_size=size, max_size=size))
            return (np.array(values, dtype) / 8).reshape(shape)
        if style == "special":
            bits = draw(st.lists(st.sampled_from(_SPECIAL_BITS[dtype]), min_size=size, max_size=size))
            return np.array(bits, unsigned).view(dtype).reshape(shape)
        raw = draw(st.binary(min_size=size * unsigned.itemsize, max_size=size * unsigned.itemsize))
        return np.frombuffer(raw, dtype).reshape(shape).copy()

    scalar = draw(st.sampled_from([None, 0, 1]))
    acc = operand(() if scalar == 0 else shape)
    x = operand(() if scalar == 1 else shape)
    return acc, x


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@given(reduction=st.sampled_from(["sum", "max", "min"]), operands=_operands())
def test_quick_combine_equals_the_rules(reduction, operands):
    """Wherever `quick_combine` answers, it gives the rules' bytes, shape and dtype (NaN payloads, signed
    zeros and subnormals included); `combine` gives them everywhere."""
    acc, x = operands
    with np.errstate(all="ignore"):
        ruled = combine_by_rules(reduction, acc, x)
    quick = quick_combine(reduction, acc, x)
    if quick is not None:
        assert _same(quick, ruled)
    assert _same(combine(reduction, acc, x), ruled)


def test_quick_combine_answers_ordinary_operands():
    """The quick path really runs for ordinary floats of one shape and against a 0-d identity (else the
    equality above would be vacuous), and declines where a rule applies."""
    a, b = np.float32([1.5, -2.0, 0.0]), np.float32([2.0, 2.0, -0.0])
    for reduction in ("sum", "max", "min"):
        assert quick_combine(reduction, a, b) is not None
        assert quick_combine(reduction, np.zeros((), np.float32), a) is not None
    assert quick_combine("sum", np.float32([1e-45]), b[:1]) is None  # a subnormal operand is flushed
    assert quick_combine("sum", np.float32([np.nan]), b[:1]) is None  # a NaN is quieted
    assert quick_combine("sum", np.float32([1.5e-38]), np.float32([-1.4e-38])) is None  # a subnormal sum
    assert quick_combine("sum", np.float16([1.0]), np.float16([1.0])) is None  # float16 adds in float32


def test_quick_combine_comparison_can_fail():
    """A quick path without the subnormal check (numpy's own add) is told apart from the rules: XLA:CPU
    flushes a subnormal sum to zero, numpy keeps it."""
    acc, x = np.float32([1.5e-38]), np.float32([-1.4e-38])
    assert not _same(acc + x, combine_by_rules("sum", acc, x))
    assert _same(combine("sum", acc, x), combine_by_rules("sum", acc, x))


@st.composite
def _blocks(draw):
    """A few C-contiguous arrays (views of larger ones too), of the dtypes and ranks inputs come in."""
    blocks = []
    for _ in range(draw(st.integers(1, 4))):
        dtype = draw(st.sampled_from(["float32", "int8", "int64", "bool", "complex64", "float16"]))
        shape = tuple(draw(st.lists(st.integers(1, 5), max_size=3)))
        rows = draw(st.integers(1, 3))
        whole = np.arange(rows * int(np.prod(shape)), dtype=np.int64).astype(dtype).reshape((rows, *shape))
        blocks.append(whole[draw(st.integers(0, rows - 1)), ...])  # a row of a larger array: one contiguous run
    return blocks


def _general_place(memory: LocalMemory, block: np.ndarray):
    """`place` by the general path: adopt in an explicit row-major layout (not the quick row-major one)."""
    return memory.place(block, Layout(tuple(range(block.ndim))))


def _held(memory: LocalMemory, buffers: list) -> list:
    """What a memory holds after placing: each buffer, its view (bytes, shape, dtype, writable, address),
    where its bytes sit, the top of the address space and the bytes charged."""
    views = [memory.view(b) for b in buffers]
    return [[(b.offset, b.dtype, b.shape, b.layout) for b in buffers],
            [(v.tobytes(), v.shape, v.dtype, v.flags.writeable, v.__array_interface__["data"][0]) for v in views],
            [memory.find(v) is b for v, b in zip(views, buffers)], memory.size_bytes, memory.meter.held_bytes]


@given(blocks=_blocks(), stored_first=st.booleans())
def test_row_major_adoption_equals_the_general_path(blocks, stored_first):
    """Placing C-contiguous blocks by the row-major quick path holds them exactly as the general adopt does:
    the same buffers at the same offsets, the same read-only views of the caller's bytes, found again by
    `find`, the same bytes charged."""
    quick, general = LocalMemory(0, MemoryMeter(None)), LocalMemory(0, MemoryMeter(None))
    if stored_first:  # an allocation before the inputs: they start after it
        quick.store(np.arange(3, dtype=np.int16))
        general.store(np.arange(3, dtype=np.int16))
    quick_buffers = [quick.place(block) for block in blocks]
    general_buffers = [_general_place(general, block) for block in blocks]
    assert _held(quick, quick_buffers) == _held(general, general_buffers)
    assert all(not quick.view(b).flags.writeable for b in quick_buffers)


def test_row_major_adoption_comparison_can_fail():
    """Storing a copy instead of adopting the caller's bytes is told apart (other addresses, writable views)."""
    block = np.arange(6, dtype=np.float32)
    quick, copied = LocalMemory(0, MemoryMeter(None)), LocalMemory(0, MemoryMeter(None))
    assert _held(quick, [quick.place(block)]) != _held(copied, [copied.store(block)])


def _program(x):
    """A program with several calls of several algorithms and local work between them."""
    total = collectives.psum(x, "x", algorithm="recursive_doubling")
    shifted = collectives.ppermute(x * 2, "x", [(i, (i + 1) % 8) for i in range(8)])
    return collectives.psum(total + shifted, "x", algorithm="ring")


def _record(x: np.ndarray) -> tuple:
    """A run's output bytes, trace, call records and end time, and each device's program."""
    f = sim.shard_map(_program, mesh=sim.Mesh({"x": 8}), in_specs=sim.P("x"), out_specs=sim.P("x"))
    run = f.run(x)
    return (run.outputs.tobytes(), json.dumps(run.trace.to_json()), [str(c) for c in run.calls], run.end_time_s,
            [str(p) for p in run.programs])


def _fails(x: np.ndarray) -> str:
    """A run in which device 3 raises after its first collective, while the others wait in the second."""
    def program(v):
        total = collectives.psum(v, "x")
        if int(collectives.axis_index("x")) == 3:
            raise RuntimeError("device 3 stops")
        return collectives.psum(total, "x")

    f = sim.shard_map(program, mesh=sim.Mesh({"x": 8}), in_specs=sim.P("x"), out_specs=sim.P("x"))
    with pytest.raises(RuntimeError, match="device 3 stops") as caught:
        f.run(x)
    return str(caught.value.__notes__)


@settings(max_examples=20)  # one program whose values alone vary: more cases repeat the same switches
@given(values=st.lists(st.integers(-50, 50), min_size=8, max_size=8))
def test_idle_workers_run_programs_as_new_greenlets_do(values):
    """Device programs run by idle workers of earlier runs (after a run that ended in an error, too) give
    the output bytes, trace, call records, end time and programs they give on new greenlets."""
    x = np.array(values, np.float32)
    with _fresh_greenlets():
        fresh, failure = _record(x), _fails(x)
    assert _fails(x) == failure
    _record(x)  # leaves the workers idle
    assert _idle_workers() >= 8
    assert _record(x) == fresh


def test_idle_workers_are_reused():
    """A run takes the idle workers an earlier run left (else the equality above would be vacuous)."""
    x = np.arange(8, dtype=np.float32)
    _record(x)
    before = set(map(id, _driver._workers.idle))
    _record(x)
    assert before and before <= set(map(id, _driver._workers.idle))


def test_worker_comparison_can_fail():
    """The record compared above tells apart runs that differ in one input element."""
    x = np.arange(8, dtype=np.float32)
    y = x.copy()
    y[5] += 1
    assert _record(x) != _record(y)


def _idle_workers() -> int:
    return len(getattr(_driver._workers, "idle", []))


@contextlib.contextmanager
def _fresh_greenlets():
    """Within the block, every device program runs on a new greenlet (no idle worker is kept or taken)."""
    kept, limit = getattr(_driver._workers, "idle", []), _driver._IDLE_WORKERS_MAX
    _driver._workers.idle, _driver._IDLE_WORKERS_MAX = [], 0
    try:
        yield
    finally:
        _driver._workers.idle, _driver._IDLE_WORKERS_MAX = kept, limit


@st.composite
def _specs(draw):
    """A mesh of up to three axes, a spec over some of them (an entry may name a tuple of axes) and a global
    shape it divides."""
    names = ["a", "b", "c"][:draw(st.integers(1, 3))]
    mesh = sim.Mesh({name: draw(st.integers(1, 3)) for name in names})
    unused = list(draw(st.permutations(names)))
    entries, shape = [], []
    for _ in range(draw(st.integers(0, 3))):
        take = draw(st.integers(0, min(2, len(unused))))
        entry = None if take == 0 else unused[0] if take == 1 else tuple(unused[:take])
        unused = unused[take:]
        entries.append(entry)
        shape.append((1 if entry is None else mesh.axis_size(entry)) * draw(st.integers(1, 2)))
    return mesh, sim.P(*entries), tuple(shape) + (2,)


@given(case=_specs())
def test_every_block_index_at_once_equals_one_by_one(case):
    """`block_indices` gives each device the block `block_index` gives it, and `_writers` the devices at index
    0 along every axis the spec leaves out, for any mesh and spec (tuple entries too)."""
    mesh, spec, shape = case
    assert block_indices(mesh, spec, shape, "x") == [block_index(mesh, d, spec, shape, "x") for d in mesh.devices]
    left_out = [a for a in mesh.axis_names if a not in spec.axes()]
    assert _writers(mesh, spec) == [d for d in mesh.devices if not any(mesh.coords(d)[a] for a in left_out)]


def test_block_index_comparison_can_fail():
    """Blocks of the devices in reverse order are told apart."""
    mesh, spec = sim.Mesh({"a": 2, "b": 2}), sim.P(("b", "a"))
    at_once = block_indices(mesh, spec, (8,), "x")
    assert at_once[::-1] != [block_index(mesh, d, spec, (8,), "x") for d in mesh.devices] == at_once
