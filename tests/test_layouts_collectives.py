"""Collectives over any layout: same values whatever the layouts, JAX's bytes for the result, packing costs.

Each generated case of the core differential suite is rerun with every array argument relaid out into a
random layout (`with_layout_constraint` in the device program) and the result written in a random
`out_layout`. The values must still equal the executable spec's and real JAX's bit for bit, and each
device's result bytes must equal those of the JAX shard produced with the same output Format.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import sim
import strategies as cases_
from layouts import Layout
from oracles.jax_oracle import run_with_layouts
from sim import P
from strategies import Case, differences, run_spec

OPS = ("all_gather", "all_to_all", "ragged_all_to_all")
ARRAY_ARGS = {"all_gather": 1, "all_to_all": 1, "ragged_all_to_all": 2}  # leading arguments that get layouts


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


def run_simulator(case: Case, in_layouts: list[Any], out_layout: tuple[int, ...]) -> tuple[list, list[bytes]]:
    """Per-device results and result bytes, with the arguments relaid out and the result in `out_layout`."""
    mesh = sim.Mesh(dict(case.mesh_shape))
    spec = P(tuple(case.mesh_shape))
    fn = getattr(collectives, case.op)
    raws: dict[int, bytes] = {}

    def body(*blocks: Any) -> Any:
        args = [b[0] if order is None else sim.with_layout_constraint(b[0], Layout(order))
                for b, order in zip(blocks, in_layouts)]
        result = fn(*args, **case.params, out_layout=Layout(out_layout))
        memory = sim.current().memory
        buffer = memory.find(np.asarray(result))
        raws[sim.current().device] = b"" if buffer is None else memory.raw(buffer).tobytes()
        return result[None]

    mapped = sim.shard_map(body, mesh=mesh, in_specs=(spec,) * len(case.args), out_specs=spec)
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


# ---------------------------------------------------------------------------------------------- against JAX


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
    found += [f"device {d}: result bytes differ from JAX's" for d, (a, b) in enumerate(zip(raws, theirs.raws)) if a != b]
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
]


@pytest.mark.parametrize("call, error, match", BAD_OUT_LAYOUTS)
def test_bad_out_layouts_are_rejected(call, error, match):
    """An out_layout that is not a Layout, or does not fit the result's rank, is refused by name."""
    with pytest.raises(error, match=match):
        call()
