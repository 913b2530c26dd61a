"""Collectives over any layout: same values whatever the layouts, JAX's bytes for the result, packing costs.

Each generated case of the core differential suite is rerun with every array argument relaid out into a
random layout (`with_layout_constraint` in the device program) and the result written in a random
`out_layout`. The values must still equal the executable spec's and real JAX's bit for bit, and each
device's result bytes must equal those of the JAX shard produced with the same output Format. The
reductions and their kin (`reduction_cases.reduction_cases`) get the same treatment, with every algorithm
giving the bytes it gives without layouts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import strategies as cases_
from hypothesis import given, settings
from hypothesis import strategies as st
from reduction_cases import OPS as REDUCTION_OPS_ALL
from reduction_cases import ReductionCase, reduction_cases
from reduction_cases import run_spec as reduction_spec
from strategies import Case, differences, run_spec

import collectives
import layouts
import sim
from layouts import Layout
from oracles.jax_oracle import run_with_layouts
from sim import P

OPS = cases_.DOCUMENTED
# the leading arguments that get layouts: the data arrays (ragged's offsets and sizes stay row-major)
ARRAY_ARGS = {op: len(collectives.definition(op).data_arrays) for op in OPS}
REDUCTION_OPS = tuple(op for op in REDUCTION_OPS_ALL if collectives.definition(op).arrays)  # not axis_index
# 'in_network' needs a switch that reduces (tests/test_in_network.py runs it under layouts)
ALGORITHMS = {op: tuple(a.name for a in collectives.definition(op).algorithms if not a.in_network)
              for op in REDUCTION_OPS if collectives.definition(op).takes("algorithm")}


def out_rank(case: Case) -> int:
    """The rank of the collective's result on one device."""
    x = case.args[1 if case.op == "ragged_all_to_all" else 0][0]
    return x.ndim + (1 if case.op == "all_gather" and not case.params["tiled"] else 0)


@st.composite
def with_layouts(draw: st.DrawFn, op: str) -> tuple[Case, list[Any], tuple[int, ...]]:
    """A core-suite case of `op`, a random layout (major_to_minor) per array argument, a random out layout."""
    case = draw(cases_.cases(op))
    in_layouts = [tuple(draw(st.permutations(range(arg[0].ndim)))) if k < ARRAY_ARGS[op] else None
                  for k, arg in enumerate(case.args)]
    return case, in_layouts, tuple(draw(st.permutations(range(out_rank(case)))))


def run_simulator(case: Case | ReductionCase, in_layouts: list[Any],
                  out_layout: tuple[int, ...] | None) -> tuple[list, list[bytes]]:
    """Per-device results and result bytes, with the arguments relaid out and the result in `out_layout`
    (None: no layouts given, the collective's defaults)."""
    mesh = sim.Mesh(dict(case.mesh_shape))
    spec = P(tuple(case.mesh_shape))
    fn = collectives.definition(case.op).call
    raws: dict[int, bytes] = {}

    def body(*blocks: Any) -> Any:
        args = [b[0] if order is None else sim.with_layout_constraint(b[0], Layout(order))
                for b, order in zip(blocks, in_layouts)]
        result = fn(*args, **case.params, out_layout=None if out_layout is None else Layout(out_layout))
        memory = sim.current().memory
        buffer = memory.find(np.asarray(result))
        raws[sim.current().device] = b"" if buffer is None else memory.raw(buffer).tobytes()
        return result[None]

    mapped = sim.shard_map(body, mesh=mesh, in_specs=(spec,) * len(case.args), out_specs=spec,
                           check_vma=not collectives.definition(case.op).invariant_operand)
    out = mapped(*(np.stack(per_device) for per_device in case.args))
    return [out[d] for d in range(case.devices)], [raws[d] for d in range(case.devices)]


# ---------------------------------------------------------------------------------------------- no JAX


@pytest.mark.parametrize("op", OPS)
@settings(max_examples=60)
@given(data=st.data())
def test_results_do_not_depend_on_layouts(op, data):
    """Any input and output layouts: every device's result equals the executable spec's, bit for bit, and
    its bytes are the result encoded in the requested layout."""
    case, in_layouts, out_layout = data.draw(with_layouts(op), label="case")
    values, raws = run_simulator(case, in_layouts, out_layout)
    assert not differences(run_spec(case), values)
    for value, raw in zip(values, raws):
        assert raw == np.ascontiguousarray(np.asarray(value).transpose(out_layout)).tobytes()


def gather_run(x: np.ndarray, axis: int, operand: Layout, out: Layout) -> sim.Run:
    def body(b: Any) -> Any:
        return collectives.all_gather(sim.with_layout_constraint(b[0], operand), "x", axis=axis, tiled=True,
                                      out_layout=out)[None]
    network = sim.Network.fully_connected(latency_s=1e-6, bandwidth_bytes_per_s=1e9)
    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}, network=network), in_specs=P("x"), out_specs=P("x"))
    return f.run(x)


def test_contiguous_gather_costs_no_copy():
    """Row-major chunks gathered along axis 0 into a row-major result: no pack, no unpack, the closed form."""
    run = gather_run(np.zeros((2, 4, 8), np.float32), 0, Layout((0, 1)), Layout((0, 1)))
    assert not [m for m in run.trace if isinstance(m, sim.CopyRecord) and m.kind != "relayout"]
    assert run.end_time_s == pytest.approx(1e-6 + 128 / 1e9)


def test_strided_gather_pays_one_unpack_per_chunk():
    """Gathered along axis 1, each chunk lands in a column block of the row-major result: 4 runs per chunk,
    an unpack step of 4 * 2 ns + 128 B / 200 GB/s each. Device 1 unpacks in group order, so its own chunk
    waits for device 0's: it ends two steps after the remote chunk arrives."""
    run = gather_run(np.zeros((2, 4, 8), np.float32), 1, Layout((0, 1)), Layout((0, 1)))
    unpacks = [m for m in run.trace if isinstance(m, sim.CopyRecord) and m.kind == "unpack"]
    assert len(unpacks) == 4 and {m.detail["runs"] for m in unpacks} == {4}
    step = sim.DEFAULT_COPY_COST.time_s(128, 4)
    assert run.end_time_s == pytest.approx(1e-6 + 128 / 1e9 + 2 * step)
    assert run.trace.total_bytes == 2 * 128


def test_column_major_result_turns_the_contiguous_gather_strided():
    """The same axis-0 gather written column-major: every chunk now lands strided and is unpacked (the
    row-major operands themselves are already contiguous, so pinning them copies for free, untraced)."""
    run = gather_run(np.zeros((2, 4, 8), np.float32), 0, Layout((0, 1)), Layout((1, 0)))
    assert sorted(m.kind for m in run.trace if isinstance(m, sim.CopyRecord)) == ["unpack"] * 4


def test_all_to_all_packs_strided_chunks_and_not_contiguous_ones():
    """split_axis=1 of a row-major block: each chunk is a column block (strided, packed); of a column-major
    block the same chunks are contiguous and go straight from memory."""
    def run(order: tuple[int, int]) -> list[str]:
        def body(b: Any) -> Any:
            y = sim.with_layout_constraint(b[0], Layout(order))
            return collectives.all_to_all(y, "x", 1, 1, tiled=True, out_layout=Layout(order))[None]
        f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"))
        outcome = f.run(np.arange(32.0).reshape(2, 4, 4))
        return sorted(m.kind for m in outcome.trace if isinstance(m, sim.CopyRecord) and m.kind != "relayout")

    assert run((0, 1)) == ["pack"] * 4 + ["unpack"] * 4
    assert run((1, 0)) == []


# ---------------------------------------------------------------------------------------------- reductions, no JAX


def reduction_out_rank(case: ReductionCase) -> int:
    """The rank of a reduction-family result on one device."""
    rank, tiled = case.args[0][0].ndim, case.params.get("tiled")
    if case.op in ("psum_scatter", "pscatter"):
        return rank if tiled else rank - 1
    return rank + (not tiled) if case.op == "all_gather_invariant" else rank


@st.composite
def reductions_with_layouts(draw: st.DrawFn, op: str, algorithms: bool = True) -> tuple[ReductionCase, list, tuple]:
    """A case of `op` (any algorithm that fits its group when `algorithms`), an operand and a result layout."""
    case = draw(reduction_cases(op))
    p = case.params
    n = len(cases_.device_groups(case.mesh_shape, p["axis_name"], p.get("axis_index_groups"))[0])
    fitting = [a for a in ALGORITHMS.get(op, ()) if collectives.definition(op).algorithm(a).fits(n)]
    algorithm = draw(st.sampled_from(fitting)) if algorithms and fitting else "direct"
    if algorithm != "direct":
        case = ReductionCase(op, case.mesh_shape, case.args, {**p, "algorithm": algorithm})
    in_layout = tuple(draw(st.permutations(range(case.args[0][0].ndim))))
    return case, [in_layout], tuple(draw(st.permutations(range(reduction_out_rank(case)))))


def byte_differences(values: list, raws: list[bytes], out_layout: tuple[int, ...]) -> list[str]:
    """Devices whose result buffer does not hold `layouts.encode(result, out_layout)`."""
    return [f"device {d}: result bytes are not the result encoded in {out_layout}"
            for d, (value, raw) in enumerate(zip(values, raws))
            if raw != layouts.encode(np.asarray(value), Layout(out_layout)).tobytes()]


@pytest.mark.parametrize("op", REDUCTION_OPS)
@settings(max_examples=50)
@given(data=st.data())
def test_reduction_results_do_not_depend_on_layouts(op, data):
    """Any operand and result layouts, any algorithm: every device's result has the bytes of the same call
    without layouts (and of the executable spec for 'direct'), and its buffer holds exactly
    `layouts.encode(result, out_layout)`."""
    case, in_layouts, out_layout = data.draw(reductions_with_layouts(op), label="case")
    values, raws = run_simulator(case, in_layouts, out_layout)
    found = differences(run_simulator(case, [None], None)[0], values, "without layouts", "with layouts")
    if case.params.get("algorithm", "direct") == "direct":
        found += differences(reduction_spec(case), values)
    found += byte_differences(values, raws, out_layout)
    assert not found, "\n".join(found)


R, C = (0, 1), (1, 0)  # row-major and column-major 2-D layouts
_C = collectives
COPY_CASES = [  # (id, body run on a row of float32[4, 4] blocks on {'x': 2}, operand layout, copy steps)
    ("psum-contiguous", lambda x: _C.psum(x, "x"), R, []),
    ("psum-operand-column-major", lambda x: _C.psum(x, "x"), C, ["unpack"] * 4),
    ("psum-both-column-major", lambda x: _C.psum(x, "x", out_layout=Layout(C)), C, []),
    ("psum-ring-row-major", lambda x: _C.psum(x, "x", algorithm="ring"), R, []),
    ("psum-ring-column-major", lambda x: _C.psum(x, "x", algorithm="ring", out_layout=Layout(C)), C,
     ["pack"] * 2 + ["unpack"] * 2),
    ("pmax-recursive_doubling-operand-column-major", lambda x: _C.pmax(x, "x", algorithm="recursive_doubling"), C,
     ["unpack"] * 2),
    ("pmean-result-column-major", lambda x: _C.pmean(x, "x", out_layout=Layout(C)), R, ["unpack"] * 4),
    ("psum_invariant-both-column-major", lambda x: _C.psum_invariant(x, "x", out_layout=Layout(C)), C, []),
    ("psum_scatter-strided-chunks", lambda x: _C.psum_scatter(x, "x", scatter_dimension=1, tiled=True), R,
     ["pack"] * 4),
    ("psum_scatter-contiguous-chunks", lambda x: _C.psum_scatter(x, "x", scatter_dimension=1, tiled=True,
                                                                 out_layout=Layout(C)), C, []),
    ("psum_scatter-ring-strided-chunks", lambda x: _C.psum_scatter(x, "x", scatter_dimension=1, tiled=True,
                                                                   algorithm="ring"), R, ["pack"] * 4),
    ("ppermute-operand-column-major", lambda x: _C.ppermute(x, "x", [(0, 1), (1, 0)]), C, ["unpack"] * 2),
    ("ppermute-both-column-major", lambda x: _C.ppermute(x, "x", [(0, 1), (1, 0)], out_layout=Layout(C)), C, []),
    ("all_gather_invariant-strided-result", lambda x: _C.all_gather_invariant(x, "x", axis=1, tiled=True), R,
     ["unpack"] * 4),
    ("pvary-relaid-out", lambda x: _C.pvary(x, "x", out_layout=Layout(R)), C, []),
    ("pscatter-strided-slice", lambda x: _C.pscatter(x, "x", axis=1, tiled=True), R, []),
]


def copy_run(body: Any, operand: tuple[int, int], network: Any = None) -> sim.Run:
    """`body` on {'x': 2}, each device's float32[4, 4] block first laid out in `operand` (types unchecked)."""
    f = sim.shard_map(lambda b: body(sim.with_layout_constraint(b[0], Layout(operand)))[None],
                      mesh=sim.Mesh({"x": 2}, network=network), in_specs=P("x"), out_specs=P("x"), check_vma=False)
    return f.run(np.arange(32, dtype=np.float32).reshape(2, 4, 4))


@pytest.mark.parametrize("body, operand, want", [c[1:] for c in COPY_CASES], ids=[c[0] for c in COPY_CASES])
def test_reductions_pack_strided_payloads_and_unpack_reordered_arrivals(body, operand, want):
    """A payload that is not one contiguous run of the sender's memory is packed ("pack"), an arrival in
    another order than its destination is unpacked ("unpack"), one timed step each; whole operands go
    straight from memory; 'ring' works in row-major order; pvary and pscatter never take time."""
    kinds = [m.kind for m in copy_run(body, operand).trace if isinstance(m, sim.CopyRecord) and m.kind != "relayout"]
    assert sorted(kinds) == want


def test_reordered_arrivals_delay_the_direct_sum_by_their_unpack_steps():
    """psum of column-major blocks into a row-major result. Every copy is a 16-run step of 64 B: relaying
    the blocks out first takes one; then device 1 unpacks device 0's arrival (alpha + 64 B / B after the
    send) and then its own: the run ends three steps plus one message after it starts."""
    network = sim.Network.fully_connected(latency_s=1e-6, bandwidth_bytes_per_s=1e9)
    run = copy_run(lambda x: collectives.psum(x, "x"), C, network)
    unpacks = [m for m in run.trace if isinstance(m, sim.CopyRecord) and m.kind == "unpack"]
    assert len(unpacks) == 4 and {m.detail["runs"] for m in unpacks} == {16}
    assert run.end_time_s == pytest.approx(1e-6 + 64 / 1e9 + 3 * sim.DEFAULT_COPY_COST.time_s(64, 16))
    assert run.outputs[0].tolist() == (np.arange(16.0).reshape(4, 4) * 2 + 16).tolist()


# ---------------------------------------------------------------------------------------------- against JAX


def jax_byte_differences(raws: list[bytes], theirs: list[bytes]) -> list[str]:
    """Devices whose result buffer holds other bytes than the JAX shard's."""
    return [f"device {d}: result bytes differ from JAX's" for d, (a, b) in enumerate(zip(raws, theirs)) if a != b]


@pytest.mark.differential
@pytest.mark.parametrize("op", OPS)
@settings(max_examples=40)
@given(data=st.data())
def test_collectives_with_layouts_agree_with_jax(op, data, jax_oracle):
    """With random input and output layouts: simulator == spec == real JAX in values, bit for bit, and each
    device's result buffer holds the bytes of the JAX shard computed with the same output Format."""
    case, in_layouts, out_layout = data.draw(with_layouts(op), label="case")
    values, raws = run_simulator(case, in_layouts, out_layout)
    theirs = run_with_layouts(jax_oracle, op, case.mesh_shape, case.args, case.params, in_layouts, out_layout,
                              out_rank(case))
    found = differences(run_spec(case), values) + differences(theirs.outputs, values, "jax", "simulator")
    found += jax_byte_differences(raws, theirs.raws)
    assert not found, "\n".join(found)


@pytest.mark.differential
@pytest.mark.parametrize("op", REDUCTION_OPS)
@settings(max_examples=12)
@given(data=st.data())
def test_reductions_with_layouts_agree_with_jax(op, data, jax_oracle):
    """Reductions and their kin with random operand and result Formats: simulator == real JAX in values, bit
    for bit, and each device's result buffer holds the bytes of the JAX shard with the same output Format."""
    case, in_layouts, out_layout = data.draw(reductions_with_layouts(op, algorithms=False), label="case")
    values, raws = run_simulator(case, in_layouts, out_layout)
    theirs = run_with_layouts(jax_oracle, op, case.mesh_shape, case.args, case.params, in_layouts, out_layout,
                              reduction_out_rank(case))
    found = differences(theirs.outputs, values, "jax", "simulator")
    found += jax_byte_differences(raws, theirs.raws)
    assert not found, "\n".join(found)


def on_two_devices(body: Any) -> Any:
    f = sim.shard_map(lambda b: body(b[0])[None], mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"))
    return lambda: f(np.zeros((2, 2, 2)))


BAD_OUT_LAYOUTS = [
    pytest.param(on_two_devices(lambda x: collectives.all_gather(x, "x", out_layout=Layout((1, 0)))),
                 sim.InvalidArgumentError, r"device 0: all_gather: out_layout: major_to_minor=\(1, 0\) has 2 entries "
                 r"but the array has rank 3", id="all_gather-out_layout-rank"),
    pytest.param(on_two_devices(lambda x: collectives.all_to_all(x, "x", 0, 0, out_layout=(1, 0))),
                 sim.InvalidTypeError, r"device 0: all_to_all: out_layout=\(1, 0\) must be a layouts.Layout or None",
                 id="all_to_all-out_layout-tuple"),
    pytest.param(on_two_devices(lambda x: collectives.psum(x, "x", out_layout=Layout((0,)))),
                 sim.InvalidArgumentError, r"device 0: psum: out_layout: major_to_minor=\(0,\) has 1 entries but the "
                 r"array has rank 2", id="psum-out_layout-rank"),
    pytest.param(on_two_devices(lambda x: collectives.psum_scatter(x, "x", out_layout=Layout((1, 0)))),
                 sim.InvalidArgumentError, r"device 0: psum_scatter: out_layout: .* has rank 1",
                 id="psum_scatter-untiled-out_layout-rank"),
    pytest.param(on_two_devices(lambda x: collectives.ppermute(x, "x", [(0, 1)], out_layout=(1, 0))),
                 sim.InvalidTypeError, r"device 0: ppermute: out_layout=\(1, 0\) must be a layouts.Layout or None",
                 id="ppermute-out_layout-tuple"),
    pytest.param(on_two_devices(lambda x: collectives.all_gather_invariant(x, "x", out_layout=Layout((1, 0)))),
                 sim.InvalidArgumentError, r"device 0: all_gather_invariant: out_layout: .* has rank 3",
                 id="all_gather_invariant-out_layout-rank"),
]


@pytest.mark.parametrize("call, error, match", BAD_OUT_LAYOUTS)
def test_bad_out_layouts_are_rejected(call, error, match):
    """An out_layout that is not a Layout, or does not fit the result's rank, is refused by name."""
    with pytest.raises(error, match=match):
        call()
