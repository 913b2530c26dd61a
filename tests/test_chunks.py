"""How the step algorithms cut their buffers: the ring's chunks and a joint `Cut` are numpy.array_split's views,
a reduce-scatter's partial sums one zeroed allocation, psum_scatter's chunks the slices of its scatter
dimension."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sim


@given(length=st.integers(0, 40), n=st.integers(1, 12))
def test_split_is_array_split(length, n):
    """The ring's chunks are numpy.array_split's: the same views of the same array, in order."""
    from collectives._allreduce import split

    flat = np.arange(length)
    ours, theirs = split(flat, n), np.array_split(flat, n)
    assert [(p.base is flat, p.shape, p.tolist()) for p in ours] == [(p.base is flat, p.shape, p.tolist())
                                                                      for p in theirs]


def test_staging_is_one_allocation_of_the_same_bytes():
    """The reduce-scatter's partial sums are zeroed views of one allocation holding each chunk's bytes."""
    from collectives._allreduce import staging

    memory = sim.LocalMemory(0, meter=sim.MemoryMeter())
    like = [np.ones((2, 3), np.float32), np.ones((0, 3), np.float32), np.ones((1, 3), np.float32)]
    parts = staging(memory, like)
    assert [p.shape for p in parts] == [(2, 3), (0, 3), (1, 3)] and not any(p.any() for p in parts)
    assert memory.meter.held_bytes == 36 and len({p.base.ctypes.data for p in parts if p.size}) == 1
    mixed = staging(memory, [np.ones(2, np.int8), np.ones(1, np.float64)])
    assert [p.dtype for p in mixed] == [np.int8, np.float64] and memory.meter.held_bytes == 46
    for like in ([np.ones(2, np.int16)] * 3, [np.ones((), np.int16)] * 2,  # rows of one shape, 0-d ones
                 [np.ones(2, np.int16), np.ones(0, np.int16), np.ones(1, np.int16)]):  # 1-D ones of any length
        parts = staging(memory, like)
        for k, part in enumerate(parts):
            part[...] = k + 1
        assert [(type(p), p.shape, p.tolist()) for p in parts] == [
            (np.ndarray, part.shape, np.full(part.shape, k + 1).tolist()) for k, part in enumerate(like)]


@pytest.mark.parametrize(("shape", "dim", "tiled"), [((6, 2), 0, True), ((2, 6), 1, True), ((3, 3, 2), 1, False),
                                                     ((4,), 0, False)])
def test_scatter_chunks_are_slices(shape, dim, tiled):
    """psum_scatter's chunks cut by one reshape are the same views as slicing the scatter dimension."""
    from collectives._psum_scatter import _Args, _chunks

    source = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    n = shape[dim] // 2 if tiled else shape[dim]
    step = shape[dim] // n if tiled else 1
    args = _Args(None, dim, tiled, "ring", None)  # type: ignore[arg-type]
    index = [(slice(None),) * dim + (slice(j * step, (j + 1) * step),) for j in range(n)]
    ours = _chunks(source, args, n)
    assert [(c.shape, c.strides, c.tolist(), np.shares_memory(c, source)) for c in ours] == [
        (source[i].shape, source[i].strides, source[i].tolist(), True) for i in index]


@given(length=st.integers(0, 40), n=st.integers(1, 12))
def test_cut_is_array_split(length, n):
    """A `Cut` of a flat buffer is numpy.array_split's views of it, in order, made when read."""
    from collectives._joint import cut

    flat = np.arange(length)
    ours, theirs = cut(flat, n), np.array_split(flat, n)
    assert len(ours) == n and ours.nbytes().tolist() == [p.nbytes for p in theirs]
    assert [(np.shares_memory(p, flat) or not p.size, p.shape, p.tolist()) for p in ours] == [
        (True, p.shape, p.tolist()) for p in theirs]
