"""Abstract payloads (`sim.ShapeDtypeStruct` operands, `sim.memory._abstract`): a run with shapes and dtypes
alone equals the run with real bytes in every trace column, every call record and its end time, on random
calls of every collective and algorithm (dtypes, meshes of one and two axes, networks with costs, switches
that reduce, nodes); outputs come back as ShapeDtypeStructs of the real outputs' shapes and dtypes; nothing
is allocated for them; device programs compute shapes and dtypes as numpy would; what needs values is
refused by name. A run whose abstract sizes are wrong is told apart, to show the comparison can fail."""

from __future__ import annotations

import json
import resource

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import layouts
import sim
from sim import P
from sim.memory import _abstract

_NETWORKS = {
    "fully_connected": sim.Network(1e-6, 10e9),
    "ring": sim.Network(2e-6, 5e9, topology="ring"),
    "switch": sim.Network(1e-6, 10e9, "switch", switch_reduces=True),
    "nodes": sim.Network.hierarchical(2, None, latency_s=1e-6),
    "costs": sim.Network(1e-6, 1e9, costs=sim.Costs(efficiency=0.5, overhead_bytes=64, per_message_s=1e-7)),
}
_DTYPES = [np.float32, np.int8, np.float16, layouts.BFLOAT16, np.complex64, np.int64]
_MOVING = ["all_gather", "all_gather_invariant", "all_to_all", "pswapaxes", "ppermute", "pshuffle", "pbroadcast",
           "pscatter"]
_REDUCING = ["psum", "pmax", "pmin", "pmean", "psum_invariant", "psum_scatter"]


def _body(op: str, algorithm: str, axis, size: int, draw):
    """A per-device program calling `op` once over `axis` (a group of `size` members)."""
    how = {"algorithm": algorithm}
    lax = collectives
    if op in ("all_gather", "all_gather_invariant", "pscatter"):
        tiled = draw(st.booleans())
        return lambda v: getattr(lax, op)(v, axis, tiled=tiled, **how)
    if op == "all_to_all":
        return lambda v: lax.all_to_all(v, axis, 0, 1, tiled=True, **how)
    if op == "pswapaxes":
        return lambda v: lax.pswapaxes(v, axis, 0, **how)
    if op in ("ppermute", "pshuffle"):
        targets = draw(st.permutations(range(size)))
        perm = list(enumerate(targets))
        if op == "ppermute":
            perm = perm[: draw(st.integers(0, size))]
        return lambda v: getattr(lax, op)(v, axis, perm, **how)
    if op == "pbroadcast":
        source = draw(st.integers(0, size - 1))
        return lambda v: lax.pbroadcast(v, axis, source, **how)
    if op == "psum_scatter":
        return lambda v: lax.psum_scatter(v, axis, tiled=True, **how)
    return lambda v: getattr(lax, op)(v, axis, **how)


@st.composite
def _cases(draw):
    op = draw(st.sampled_from(_MOVING + _REDUCING))
    algorithm = draw(st.sampled_from([a.name for a in collectives.definition(op).algorithms]))
    if draw(st.booleans()):
        axes, axis = {"x": draw(st.sampled_from([1, 2, 3, 4, 8]))}, "x"
    else:
        axes, axis = {"y": 2, "x": draw(st.sampled_from([2, 4]))}, ("y", "x")
    size = int(np.prod(list(axes.values())))
    network = draw(st.sampled_from(sorted(_NETWORKS)))
    dtype = draw(st.sampled_from(_DTYPES))
    if op == "pmean" and np.dtype(dtype) == np.complex64:
        dtype = np.float32
    if op in ("pmax", "pmin") and np.dtype(dtype).kind == "c":
        dtype = np.int8
    columns = size * draw(st.integers(1, 3))
    rows = size * draw(st.integers(1, 3))
    body = _body(op, algorithm, axis, size, draw)
    return op, algorithm, axes, network, np.dtype(dtype), (rows * size, columns), body


def _run(axes: dict, network: str, body, x) -> tuple:
    """Trace JSON, columns, call records and end time of `body` over the mesh, and the outputs."""
    mesh = sim.Mesh(axes, network=_NETWORKS[network])
    spec = P(tuple(axes))
    run = sim.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False).run(x)
    calls = [(c.device, c.collective, c.call, c.members, c.enter_s, c.met_s, c.exit_s, c.algorithm)
             for c in run.simulation.calls]
    columns = {key: np.asarray(value).tolist() for key, value in run.trace.columns().items()}
    return (json.dumps(run.trace.to_json()), columns, calls, run.end_time_s), run.outputs


def _values(shape: tuple, dtype: np.dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-3, 4, size=shape).astype(dtype)


def _outcome(axes, network, body, x):
    """The run's records and outputs, or the error it raised (type and message)."""
    try:
        return _run(axes, network, body, x)
    except sim.MeshError as error:
        return (type(error), str(error)), None


@settings(max_examples=120, deadline=None)
@given(case=_cases(), seed=st.integers(0, 2**16))
def test_abstract_run_equals_real_run(case, seed):
    """The same call with ShapeDtypeStruct operands gives the real run's trace (every column), call records and
    end time, and its outputs' shapes and dtypes (or the same error)."""
    op, algorithm, axes, network, dtype, shape, body = case
    x = _values(shape, dtype, seed)
    real, real_out = _outcome(axes, network, body, x)
    abstract, abstract_out = _outcome(axes, network, body, sim.ShapeDtypeStruct(shape, dtype))
    assert abstract == real, (op, algorithm, axes, network, dtype, shape)
    if real_out is not None:
        assert isinstance(abstract_out, sim.ShapeDtypeStruct)
        assert (abstract_out.shape, abstract_out.dtype) == (real_out.shape, real_out.dtype)


@st.composite
def _ragged_cases(draw):
    n = draw(st.sampled_from([1, 2, 3, 4]))
    rows, width = draw(st.integers(1, 6)), draw(st.integers(1, 3))
    sizes = draw(st.lists(st.lists(st.integers(0, 2), min_size=n, max_size=n), min_size=n, max_size=n))
    offsets, sends, outs, recvs = [], [], [], []
    for d in range(n):  # device d sends sizes[d][j] rows to j, which writes them after those of senders < d
        sends.append(sizes[d])
        offsets.append([min(sum(sizes[d][:j]), rows) for j in range(n)])
        recvs.append([sizes[s][d] for s in range(n)])
        outs.append([sum(sizes[s][j] for s in range(d)) for j in range(n)])
    out_rows = max(1, max(sum(sizes[s][j] for s in range(n)) for j in range(n)))
    need = max(sum(row) for row in sizes)
    algorithm = draw(st.sampled_from([a.name for a in collectives.definition("ragged_all_to_all").algorithms]))
    dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
    network = draw(st.sampled_from(sorted(_NETWORKS)))
    return n, max(rows, need), out_rows, width, [np.array(v, np.int32) for v in (offsets, sends, outs, recvs)], \
        algorithm, dtype, network


@settings(max_examples=60, deadline=None)
@given(case=_ragged_cases(), seed=st.integers(0, 2**16))
def test_abstract_ragged_equals_real(case, seed):
    """ragged_all_to_all with abstract operand and output, its offsets and sizes concrete: the real run's trace,
    call records and end time (or the same error)."""
    n, rows, out_rows, width, (offsets, sends, outs, recvs), algorithm, dtype, network = case
    operand, output = _values((n * rows, width), dtype, seed), np.zeros((n * out_rows, width), dtype)

    def body(a, b, c, d, e, f):
        return collectives.ragged_all_to_all(a, b, c.reshape(-1), d.reshape(-1), e.reshape(-1), f.reshape(-1),
                                             axis_name="x", algorithm=algorithm)

    def run(a, b):
        try:
            mesh = sim.Mesh({"x": n}, network=_NETWORKS[network])
            f = sim.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
            result = f.run(a, b, offsets, sends, outs, recvs)
        except sim.MeshError as error:
            return (type(error), str(error)), None
        calls = [(c.device, c.call, c.enter_s, c.met_s, c.exit_s) for c in result.simulation.calls]
        return (json.dumps(result.trace.to_json()), calls, result.end_time_s), result.outputs

    real, real_out = run(operand, output)
    abstract, abstract_out = run(sim.ShapeDtypeStruct(operand.shape, dtype), sim.ShapeDtypeStruct(output.shape, dtype))
    assert abstract == real
    if real_out is not None:
        assert (abstract_out.shape, abstract_out.dtype) == (real_out.shape, real_out.dtype)


def test_comparison_can_fail(monkeypatch):
    """Abstract payloads whose hollow dtype had the wrong itemsize would carry the wrong sizes: the comparison
    of the property tests tells them apart (as it tells apart an operand of another dtype)."""
    body = lambda v: collectives.all_gather(v, "x", tiled=True, algorithm="ring")
    x = np.arange(16, dtype=np.float32)
    real, _ = _run({"x": 4}, "fully_connected", body, x)
    assert _run({"x": 4}, "fully_connected", body, sim.ShapeDtypeStruct((16,), np.float32))[0] == real
    assert _run({"x": 4}, "fully_connected", body, sim.ShapeDtypeStruct((16,), np.float64))[0] != real
    wrong = lambda dtype: np.dtype({"names": [], "formats": [], "itemsize": 2 * np.dtype(dtype).itemsize},
                                   metadata={layouts.ABSTRACT_KEY: np.dtype(dtype)})
    monkeypatch.setattr(_abstract, "hollow_dtype", wrong)
    assert _run({"x": 4}, "fully_connected", body, sim.ShapeDtypeStruct((16,), np.float32))[0] != real


def test_jax_shape_dtype_struct_accepted_by_name():
    """Any object named ShapeDtypeStruct with a shape and a dtype is an abstract operand (JAX's included,
    without the core importing JAX); other objects are not."""
    class ShapeDtypeStruct:
        def __init__(self, shape, dtype):
            self.shape, self.dtype = shape, np.dtype(dtype)

    assert sim.memory.is_struct(ShapeDtypeStruct((4,), np.float32))
    assert not sim.memory.is_struct(np.zeros(3)) and not sim.memory.is_struct((4,))
    f = sim.shard_map(lambda v: collectives.psum(v, "x"), mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P())
    out = f(ShapeDtypeStruct((4,), np.int32))
    assert (out.shape, out.dtype) == ((2,), np.dtype(np.int32))


def test_nothing_allocated():
    """A ring all_gather of 64 MiB per device over 64 devices (256 GiB of results with bytes) runs in well under
    a GiB: the memories count the logical bytes apart (`MemoryMeter.abstract_bytes`), hold none, and the call
    budget (half the machine by default) does not refuse it."""
    n, per = 64, 1 << 24
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    f = sim.shard_map(lambda v: collectives.all_gather(v, "x", tiled=True, algorithm="ring"), mesh=sim.Mesh({"x": n}),
                      in_specs=P("x"), out_specs=P("x"))
    run = f.run(sim.ShapeDtypeStruct((n * per,), np.float32))
    grown_bytes = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    assert run.outputs == sim.ShapeDtypeStruct((n * n * per,), np.float32)
    assert run.trace.total_bytes == n * (n - 1) * per * 4
    meter = run.simulation.memories[0].meter
    assert meter.held_bytes == 0 and meter.abstract_bytes == n * per * 4 * (1 + n)
    assert grown_bytes < 1 << 30


def test_real_bytes_refused_with_pointer_to_abstract():
    """The same run with real bytes, from Python with the default budget, is refused before it allocates its
    results, and the message points to abstract payloads; so is an allocation past a smaller limit."""
    n, per = 64, 1 << 24
    body = lambda v: collectives.all_gather(v, "x", tiled=True, algorithm="ring")
    f = sim.shard_map(body, mesh=sim.Mesh({"x": n}), in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(sim.MemoryLimitError, match=r"256 GiB.*sim\.ShapeDtypeStruct\(shape, dtype\).*payload = "):
        f.run(np.zeros(n * per, np.float32))  # the caller's zero pages, adopted untouched
    f = sim.shard_map(body, mesh=sim.Mesh({"x": n}, max_memory_bytes=1 << 30), in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(sim.MemoryLimitError, match=r"a new array float32\[16777216\].*abstract payloads"):
        f.run(np.broadcast_to(np.float32(0), (n * per,)))


def test_program_shapes_and_dtypes():
    """Local numpy work on abstract values gives numpy's shapes and dtypes (ufuncs, casts, concatenate, stack,
    where with a number, reductions), recorded with the real dtypes, and the same trace as with values."""
    def body(v):
        w = (v * 2 + 1).astype(np.float16)
        g = collectives.all_gather(np.concatenate([w, w]), "x", tiled=True)
        return np.stack([g, g]).sum(0), np.where(g > 0, g, 0) + collectives.axis_index("x")

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 4}), in_specs=P("x"), out_specs=(P("x"), P("x")))
    real = f.run(np.ones(24, np.float32))
    abstract = f.run(sim.ShapeDtypeStruct((24,), np.float32))
    assert [(o.shape, o.dtype) for o in abstract.outputs] == [(o.shape, o.dtype) for o in real.outputs]
    assert json.dumps(abstract.trace.to_json()) == json.dumps(real.trace.to_json())
    assert str(abstract.program(0)) == str(real.program(0))


@pytest.mark.parametrize("op, call", [
    ("nonzero", lambda v: np.nonzero(v)),
    ("unique", lambda v: np.unique(v)),
])
def test_values_refused(op, call):
    """What needs values on an abstract array is refused, naming the operation."""
    f = sim.shard_map(call, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(sim.memory.AbstractValueError, match=f"op='{op}' needs values"):
        f.run(sim.ShapeDtypeStruct((4,), np.float32))


def _sorted(a):
    a = a.copy()
    a.sort(axis=1)
    return a


def _filled(a):
    a = a.copy()
    a.fill(2)
    return a


_WEIGHT = np.arange(6, dtype=np.float32).reshape(3, 2)
# (ndarray method, the operation the program records) on a device's (2, 3) float32 rows; numpy runs these methods
# in C, past `__array_function__`
_METHODS = {
    "argmax": (lambda a: a.argmax(axis=1), "argmax"),
    "argmin": (lambda a: a.argmin(axis=1), "argmin"),
    "argsort": (lambda a: a.argsort(axis=1), "argsort"),
    "argpartition": (lambda a: a.argpartition(1, axis=1), "argpartition"),
    "dot": (lambda a: a.dot(_WEIGHT), "dot"),
    "take": (lambda a: a.take([2, 0], axis=1), "take"),
    "repeat": (lambda a: a.repeat(2, axis=1), "repeat"),
    "swapaxes": (lambda a: a.swapaxes(0, 1).swapaxes(1, 0), "swapaxes"),
    "squeeze": (lambda a: a[:, None].squeeze(1), "squeeze"),
    "diagonal": (lambda a: a.diagonal()[None], "diagonal"),
    "trace": (lambda a: a.trace().reshape(1), "trace"),
    "round": (lambda a: (a / 3).round(2), "round"),
    "conj": (lambda a: a.conj(), "conjugate"),
    "copy": (lambda a: a.copy(), "copy"),
    "sort": (_sorted, "sort"),
    "partition": (lambda a: (a.copy(), a.copy().partition(1))[0], "partition"),
    "fill": (_filled, "full_like"),
}


@pytest.mark.parametrize("name", list(_METHODS))
def test_array_methods_are_recorded_and_take_abstract_values(name):
    """ndarray methods numpy runs in C (`v.argmax()`, `v.dot(w)`, in-place `v.sort()`...) give numpy's answer on
    each device, are recorded in the program, and on abstract values give the real run's shapes, dtypes and
    program: before, they ran past the program unrecorded, and on abstract values failed in numpy's words
    ("data type not ordered") or answered from the stand-in's bytes (`argsort`)."""
    method, recorded = _METHODS[name]
    f = sim.shard_map(method, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"))
    x = np.array([[3, 1, 2], [0, 5, 4], [7, 9, 8], [6, 6, 1]], np.float32)
    real = f.run(x)
    want = np.concatenate([np.atleast_1d(method(np.array(shard))) for shard in (x[:2], x[2:])])
    assert real.outputs.dtype == want.dtype and real.outputs.tobytes() == want.tobytes()
    assert f" = {recorded}[" in str(real.program(0)) or f" = {recorded} " in str(real.program(0)), real.program(0)
    abstract = f.run(sim.ShapeDtypeStruct(x.shape, np.float32))
    assert isinstance(abstract.outputs, sim.ShapeDtypeStruct), abstract.outputs
    assert (abstract.outputs.shape, abstract.outputs.dtype) == (real.outputs.shape, real.outputs.dtype)
    assert str(abstract.program(0)) == str(real.program(0))


@pytest.mark.parametrize("op, call", [
    ("nonzero", lambda v: v.nonzero()[0]),
    ("searchsorted", lambda v: v.searchsorted(v[:1])),
    ("compress", lambda v: v.compress([True, False, True, True])),
])
def test_array_methods_that_read_values_are_refused_on_abstract_values(op, call):
    """The methods whose result depends on the values are refused by name on an abstract array, as their numpy
    functions are (`v.nonzero()` gave a real array of indices read from the stand-in's bytes)."""
    f = sim.shard_map(call, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(sim.memory.AbstractValueError, match=f"op='{op}' needs values"):
        f.run(sim.ShapeDtypeStruct((8,), np.float32))


# numpy functions and their arguments past the first operand, on abstract operands of a few shapes and dtypes
_FUNCTIONS = [
    ("sum", lambda a: np.sum(a)), ("sum", lambda a: np.sum(a, axis=-1, keepdims=True)),
    ("mean", lambda a: np.mean(a, axis=0)), ("std", lambda a: np.std(a)), ("var", lambda a: np.var(a, axis=-1)),
    ("max", lambda a: np.max(a, axis=0)), ("prod", lambda a: np.prod(a, axis=-1)),
    ("cumsum", lambda a: np.cumsum(a)), ("cumsum", lambda a: np.cumsum(a, axis=-1)),
    ("argmax", lambda a: np.argmax(a)), ("argmin", lambda a: np.argmin(a, axis=-1)),
    ("argsort", lambda a: np.argsort(a)), ("argsort", lambda a: np.argsort(a, axis=None)),
    ("sort", lambda a: np.sort(a, axis=0)), ("average", lambda a: np.average(a, axis=-1)),
    ("dot", lambda a: np.dot(a, np.ones(a.shape[-1:], np.float32))),
    ("dot", lambda a: np.dot(a, np.ones((a.shape[-1], 2), np.int8))),
    ("dot", lambda a: np.dot(np.ones((2, a.shape[-2] if a.ndim > 1 else a.shape[0]), np.float32), a)),
    ("einsum", lambda a: np.einsum("...i,...i->...", a, a)), ("einsum", lambda a: np.einsum("i...->...", a)),
    ("einsum", lambda a: np.einsum("...i,ij", a, np.ones((a.shape[-1], 2), np.float32))),
]
_ANALYTIC = {"sum", "mean", "std", "var", "max", "prod", "cumsum", "argmax", "argmin", "argsort", "sort", "dot",
             "einsum"}


@pytest.mark.parametrize("shape", [(6,), (2, 3), (2, 3, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float16, layouts.BFLOAT16])
@pytest.mark.parametrize("op, call", _FUNCTIONS, ids=[f"{op}{k}" for k, (op, _) in enumerate(_FUNCTIONS)])
def test_numpy_functions_on_abstract_values_give_numpys_shape_and_dtype(op, call, dtype, shape):
    """A numpy function of an abstract array gives the shape and dtype numpy gives on real values; the
    reductions, arg-reductions, sorts and products are worked out from shapes alone (`_through_shapes`),
    reading no element: before, numpy ran on a full-size stand-in of zeros."""
    real = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    hollow = _abstract.hollow_empty(shape, dtype)
    try:
        with np.errstate(all="ignore"):  # a float16 product of 24 integers overflows: its dtype is what counts
            want = call(real)
    except TypeError as refused:  # numpy's einsum takes no bfloat16: the abstract call is refused the same
        with pytest.raises(TypeError, match=str(refused)):
            _abstract.abstract_call(op, call, [hollow])
        return
    got = _abstract.abstract_call(op, call, [hollow])
    assert _abstract.is_abstract(got), got
    assert (got.shape, _abstract.logical_dtype(got.dtype)) == (np.shape(want), np.asarray(want).dtype)
    if op in _ANALYTIC and (op, dtype) != ("mean", np.float16):  # a float16 mean casts its sum with float16()
        assert _abstract._through_shapes(call, [hollow]) is not None


def test_functions_of_huge_abstract_arrays_allocate_nothing():
    """std, argmax, cumsum, sort, dot and einsum of abstract arrays of a gigabyte per device each take no
    memory: each ran on a full-size stand-in before (an argmax of 2**28 float32 copied a gigabyte of zeros)."""
    n = 1 << 28
    body = lambda v: (np.std(v)[None], v.argmax()[None], np.cumsum(v), np.sort(v), np.dot(v, v)[None],
                      np.einsum("i,i->", v, v)[None])
    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=(P("x"),) * 6)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run = f.run(sim.ShapeDtypeStruct((2 * n,), np.float32))
    grown_bytes = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    assert [(o.shape, o.dtype) for o in run.outputs] == [((2,), np.float32), ((2,), np.int64), ((2 * n,), np.float32),
                                                         ((2 * n,), np.float32), ((2,), np.float32), ((2,), np.float32)]
    assert grown_bytes < 1 << 28


@pytest.mark.parametrize("steering", ["input_offsets", "send_sizes", "output_offsets", "recv_sizes"])
def test_abstract_ragged_offsets_and_sizes_refused(steering):
    """ragged_all_to_all's offsets and sizes steer the exchange: an abstract one is refused naming the device,
    the argument and the rule (it read as a dtype of no fields that 'must be an integer type')."""
    names = ["input_offsets", "send_sizes", "output_offsets", "recv_sizes"]
    rows = sim.ShapeDtypeStruct((8, 3), np.float32)
    tables = [np.tile(np.arange(2, dtype=np.int32), 2), np.ones(4, np.int32),
              np.repeat(np.arange(2, dtype=np.int32), 2), np.ones(4, np.int32)]
    tables[names.index(steering)] = sim.ShapeDtypeStruct((4,), np.int32)
    f = sim.shard_map(lambda *a: collectives.ragged_all_to_all(*a, axis_name="x"), mesh=sim.Mesh({"x": 2}),
                      in_specs=(P("x"),) * 6, out_specs=P("x"))
    with pytest.raises(sim.memory.AbstractValueError, match=rf"device 0: ragged_all_to_all: {steering} is abstract "
                                                           r"\(a shape and dtype, no values\); the offsets and sizes"):
        f.run(rows, rows, *tables)


@pytest.mark.parametrize("shapes", [((2, 3), (3, 4)), ((3,), (3, 4)), ((2, 3), (3,)), ((3,), (3,)),
                                    ((5, 2, 3), (3, 4)), ((2, 1, 2, 3), (5, 3, 1))])
def test_matmul_on_abstract_operands_gives_numpys_shape_and_dtype(shapes):
    """`@` (a generalized ufunc: core dimensions, flexible ones, broadcast loop dimensions) on an abstract
    operand gives the shape and dtype numpy gives on real ones, and records the same program (it raised
    "does not have enough dimensions", its operands taken for scalars)."""
    left, right = shapes
    weight = np.ones(right, np.float16)
    f = sim.shard_map(lambda v: v[0] @ weight, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P(),
                      check_vma=False)
    real = f.run(np.ones((2, *left), np.float32))
    abstract = f.run(sim.ShapeDtypeStruct((2, *left), np.float32))
    assert (abstract.outputs.shape, abstract.outputs.dtype) == (real.outputs.shape, real.outputs.dtype)
    assert str(abstract.program(0)) == str(real.program(0))


def test_matmul_of_mismatched_abstract_operands_is_refused_naming_the_dimension():
    f = sim.shard_map(lambda v: v @ np.ones((4, 5), np.float32), mesh=sim.Mesh({"x": 2}), in_specs=P("x"),
                      out_specs=P("x"))
    with pytest.raises(sim.memory.AbstractValueError, match=r"ufunc=matmul.__call__ on abstract operands: operand 1 "
                                                            r"has a mismatch in its core dimension 'k': 4 and 3"):
        f.run(sim.ShapeDtypeStruct((4, 3), np.float32))


@pytest.mark.parametrize("what, read", [
    ("indexing by an abstract array", lambda v: v[v > 0]),
    (r"float\(\) needs values; an abstract float32\[\] has none", lambda v: v * float(v.sum())),
    (r"item\(\) needs values", lambda v: v * v.sum().item()),
    (r"tolist\(\) needs values", lambda v: np.asarray(v.tolist())),
    (r"bool\(\) needs values", lambda v: v if v.sum() > 0 else -v),
])
def test_reading_an_abstract_values_is_refused_by_name(what, read):
    """What reads an abstract array's values (a mask, float(), item(), tolist(), an `if`) is refused naming
    it; before, a mask raised numpy's IndexError, float() a TypeError about a tuple, and item() and tolist()
    returned empty tuples."""
    f = sim.shard_map(read, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(sim.memory.AbstractValueError, match=what):
        f.run(sim.ShapeDtypeStruct((4,), np.float32))


def test_an_abstract_value_prints_as_its_shape_and_dtype(capsys):
    f = sim.shard_map(lambda v: print(v, repr(v)) or v, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"))
    f.run(sim.ShapeDtypeStruct((4,), np.float32))
    assert capsys.readouterr().out.splitlines()[0] == \
        "abstract float32[2] (no values) abstract float32[2] (no values){V:x}"


def test_exploring_arrival_orders_of_abstract_payloads_is_refused():
    """Exploring orders compares results byte for byte: on an abstract argument it is refused naming the
    argument (it raised numpy's "Cannot change data-type for array of references"), by `sim.explore` and by
    `shard_map(..., explore_orders=N)`; the same program on real bytes is explored."""
    f = sim.shard_map(lambda v: collectives.psum(v, "x"), mesh=sim.Mesh({"x": 2}), in_specs=P("x"),
                      out_specs=P(), explore_orders=2)
    refusal = r"args: leaf 0 is abstract \(a shape and dtype, no values\); exploring arrival orders compares"
    with pytest.raises(sim.memory.AbstractValueError, match=refusal):
        f.run(sim.ShapeDtypeStruct((4,), np.float32))
    with pytest.raises(sim.memory.AbstractValueError, match=refusal):
        sim.explore(f, sim.ShapeDtypeStruct((4,), np.float32))
    assert f.run(np.arange(4.0, dtype=np.float32)).order_report.differences == ()


def test_hollow_copies_move_nothing():
    """A hollow array's copies and assignments write no bytes: a GiB of them leaves the process's memory as it
    was (numpy moves no data for a dtype without fields), while sizes, strides and addresses are the real
    ones."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    x = sim.memory.hollow_empty((1 << 28,), np.float32)
    y = x.copy()
    y[...] = x
    x[1::2] = y[::2]
    grown_bytes = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    assert x.nbytes == y.nbytes == 1 << 30 and x.strides == (4,) and x.flags.c_contiguous
    assert grown_bytes < 1 << 28
    assert sim.memory.logical_dtype(y.dtype) == np.float32


@pytest.mark.parametrize(("shape", "dtype", "error", "match"), [
    ((-1,), np.float32, sim.InvalidArgumentError, r"shape=\(-1,\) must not have negative dimensions"),
    ((2,), np.dtype("U3"), sim.InvalidTypeError, "dtype=<U3 must be numeric or a float8 type for an abstract array"),
])
def test_hollow_empty_refuses(shape, dtype, error, match):
    """An abstract array of a negative shape or of a dtype holding no numbers is refused naming the argument."""
    with pytest.raises(error, match=match):
        sim.memory.hollow_empty(shape, dtype)
