"""`collectives.vmap`: every collective under a batch axis, by jax.lax's batching rules, equals a loop over
the batch (each entry its own call)."""

from __future__ import annotations

import numpy as np
import pytest

import collectives as C
import sim
from sim import P

MESH = {"i": 4}


def _loop(function, arrays, dims, params, out_axis=0):
    """The collective called once per batch entry, results stacked along `out_axis`."""
    size = next(np.shape(x)[d] for x, d in zip(arrays, dims) if d is not None)
    rows = [function(*(x if d is None else np.take(x, b, axis=d) for x, d in zip(arrays, dims)), **params)
            for b in range(size)]
    return np.stack([np.asarray(r) for r in rows], axis=out_axis)


def _both(function, arrays, dims, params, in_specs, mesh=MESH):
    """(vmap's result, the loop's result) on every device, each assembled along a new leading mesh axis."""
    def body(*xs):
        return C.vmap(function, in_axes=dims)(*xs, **params)[None], _loop(function, xs, dims, params)[None]

    names = tuple(mesh)
    f = sim.shard_map(body, mesh=sim.Mesh(mesh), in_specs=in_specs, out_specs=(P(names), P(names)),
                      check_vma=False)
    return f(*arrays)


def _data(shape, seed=0):
    return np.random.default_rng(seed).integers(-9, 10, shape).astype(np.float64)


# (id, collective, params, global shapes, in_specs, in_axes); each device's block carries the batch axis
CASES = [
    ("psum axis 0", C.psum, {"axis_name": "i"}, [(3, 8)], (P(None, "i"),), [0]),
    ("psum axis 1", C.psum, {"axis_name": "i"}, [(8, 3)], (P("i"),), [1]),
    ("psum groups", C.psum, {"axis_name": "i", "axis_index_groups": [[0, 2], [1, 3]]}, [(8, 3)], (P("i"),), [1]),
    ("pmean", C.pmean, {"axis_name": "i"}, [(3, 8)], (P(None, "i"),), [0]),
    ("pmax", C.pmax, {"axis_name": "i"}, [(8, 3)], (P("i"),), [1]),
    ("pmin", C.pmin, {"axis_name": "i"}, [(8, 3)], (P("i"),), [0]),
    ("psum_invariant", C.psum_invariant, {"axis_name": "i"}, [(3, 8)], (P(None, "i"),), [0]),
    ("pvary", C.pvary, {"axis_name": "i"}, [(3, 2)], (P(),), [1]),
    ("ppermute", C.ppermute, {"axis_name": "i", "perm": [(0, 1), (1, 2), (2, 3), (3, 0)]}, [(8, 3)], (P("i"),),
     [1]),
    ("all_to_all tiled", C.all_to_all, {"axis_name": "i", "split_axis": 1, "concat_axis": 0, "tiled": True},
     [(8, 3, 4)], (P("i"),), [1]),
    ("all_to_all tiled batch last", C.all_to_all,
     {"axis_name": "i", "split_axis": 0, "concat_axis": 1, "tiled": True}, [(16, 2, 3)], (P("i"),), [2]),
    ("all_to_all untiled", C.all_to_all, {"axis_name": "i", "split_axis": 0, "concat_axis": 1},
     [(3, 16, 2)], (P(None, "i"),), [0]),
    ("all_to_all untiled batch between", C.all_to_all, {"axis_name": "i", "split_axis": 1, "concat_axis": 0},
     [(8, 3, 4)], (P("i"),), [1]),
]
for _tiled in (False, True):
    for _axis in (0, 1):
        for _d in (0, 1, 2):
            CASES.append((f"all_gather axis={_axis} tiled={_tiled} batch={_d}", C.all_gather,
                          {"axis_name": "i", "axis": _axis, "tiled": _tiled}, [(8, 3, 2)], (P("i"),), [_d]))
            CASES.append((f"all_gather_invariant axis={_axis} tiled={_tiled} batch={_d}", C.all_gather_invariant,
                          {"axis_name": "i", "axis": _axis, "tiled": _tiled}, [(8, 3, 2)], (P("i"),), [_d]))
            shape = [2, 2, 2]
            shape[_axis + (_d <= _axis)] = 4 if not _tiled else 8
            CASES.append((f"psum_scatter dim={_axis} tiled={_tiled} batch={_d}", C.psum_scatter,
                          {"axis_name": "i", "scatter_dimension": _axis, "tiled": _tiled},
                          [(shape[0] * 4, *shape[1:])], (P("i"),), [_d]))
            CASES.append((f"pscatter axis={_axis} tiled={_tiled} batch={_d}", C.pscatter,
                          {"axis_name": "i", "axis": _axis, "tiled": _tiled}, [tuple(shape)], (P(),), [_d]))


@pytest.mark.parametrize(("function", "params", "shapes", "in_specs", "dims"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_batched_collective_equals_a_loop_over_the_batch(function, params, shapes, in_specs, dims):
    """vmap of the collective along the batch axis gives, on every device, the stacked results of one call
    per batch entry (batch axis first in the result)."""
    arrays = [_data(s, seed) for seed, s in enumerate(shapes)]
    batched, looped = _both(function, arrays, dims, params, in_specs)
    np.testing.assert_array_equal(batched, looped)


def _ragged_inputs(batch: int):
    """A batch of ragged exchanges on {'i': 4}: in entry b device s sends rows [p, p + sizes) to peer p, which
    keeps them at row s; sizes differ per entry."""
    n, rows = 4, 8
    operand = _data((batch, n * rows, 2))
    output = -np.ones((batch, n * rows, 2))
    sizes = np.array([[1 + (b + s + p) % 2 for p in range(n)] for b in range(batch) for s in range(n)], np.int32)
    sizes = sizes.reshape(batch, n, n)  # [b, sender, peer]
    input_offsets = np.broadcast_to(np.arange(n, dtype=np.int32) * 2, (batch, n, n)).copy()
    output_offsets = np.broadcast_to((np.arange(n, dtype=np.int32) * 2)[None, :, None], (batch, n, n)).copy()
    recv_sizes = sizes.transpose(0, 2, 1).copy()
    index = [x.reshape(batch, n * n) for x in (input_offsets, sizes, output_offsets, recv_sizes)]
    return [operand, output, *index]


def test_batched_ragged_all_to_all_merges_the_batch_into_the_ragged_dimension():
    """vmap of ragged_all_to_all (JAX's rule: one call with B slices per peer) equals one call per entry."""
    arrays = _ragged_inputs(3)
    batched, looped = _both(C.ragged_all_to_all, arrays, [0] * 6, {"axis_name": "i"}, (P(None, "i"),) * 6)
    np.testing.assert_array_equal(batched, looped)
    assert (batched != -1).any()


def test_batched_ragged_all_to_all_with_unbatched_output_and_sizes():
    """Arrays without a batch axis (in_axes None) are shared by every entry, as in JAX's rule."""
    operand, output, *index = _ragged_inputs(2)
    arrays = [operand, output[0], *(x[0] for x in index)]
    batched, looped = _both(C.ragged_all_to_all, arrays, [0, None, None, None, None, None], {"axis_name": "i"},
                            (P(None, "i"), P("i"), P("i"), P("i"), P("i"), P("i")))
    np.testing.assert_array_equal(batched, looped)


def test_batched_ragged_all_to_all_refuses_axis_index_groups():
    """As in JAX, the ragged batching rule has no axis_index_groups."""
    arrays = _ragged_inputs(2)
    with pytest.raises(sim.InvalidArgumentError, match=r"ragged_all_to_all with axis_index_groups has no batching"):
        _both(C.ragged_all_to_all, arrays, [0] * 6, {"axis_name": "i", "axis_index_groups": [[0, 1], [2, 3]]},
              (P(None, "i"),) * 6)


def test_every_registered_collective_has_a_batching_rule():
    """Every definition carries its batching rule (`Definition.batch`): a new collective needs its rule."""
    assert all(callable(d.batch) for d in C.REGISTRY.values())


def test_out_axes_moves_the_batch_axis():
    """out_axes puts the batch axis of the result where it says."""
    def body(x):
        return C.vmap(C.all_gather, in_axes=0, out_axes=1)(x, "i", tiled=True)[None]

    f = sim.shard_map(body, mesh=sim.Mesh({"i": 2}), in_specs=P(None, "i"), out_specs=P("i"), check_vma=False)
    np.testing.assert_array_equal(f(np.arange(6.0).reshape(3, 2))[0], [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]])


@pytest.mark.parametrize(("call", "match"), [
    (lambda x: C.vmap(np.sum)(x), r"function=.* must be a registered collective"),
    (lambda x: C.vmap(C.psum, in_axes=3)(x, "i"), r"in_axes for x=3 must be an axis of its 2 dimensions"),
    (lambda x: C.vmap(C.psum, in_axes=[0, 1])(x, "i"), r"in_axes=\[0, 1\] must give one axis per array"),
    (lambda x: C.vmap(C.psum, in_axes=None)(x, "i"), r"in_axes=None must batch at least one array"),
])
def test_bad_vmap_arguments(call, match):
    """Bad vmap arguments are errors naming the argument and the rule."""
    f = sim.shard_map(call, mesh=sim.Mesh({"i": 2}), in_specs=P("i"), out_specs=P("i"), check_vma=False)
    with pytest.raises(sim.InvalidArgumentError, match=match):
        f(np.zeros((4, 2)))
