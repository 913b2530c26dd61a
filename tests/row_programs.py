"""The row exchanges (all_to_all, all_gather, the direct psum) as programs, their runs as bytes, and the
calls the fast-path tests draw: shared by `test_fast_paths.py` and `test_lean_rows.py`. Programs of ppermutes,
their runs, the networks they run on and the runs that post no table (perturbed, sanitized): shared by
`test_fast_pairs.py` and `test_joint_calls.py`. A generated case's run over a mesh of axes 'x' (and 'y') as
bytes: shared by `test_steps.py`, `test_doubling_tables.py`, `test_tree_tables.py` and `test_step_schedule.py`.
Which variable each equation of a typed program reads and writes (`links`): shared by `test_flat_paths.py`
and `bridge_warm_child.py`."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import strategies as st

import collectives
import sim
from sim import P

OPS = ("all_gather", "all_to_all", "psum")


def program(op: str, tiled: bool):
    if op == "all_to_all":
        return lambda x: collectives.all_to_all(x, "x", 0, 0, tiled=tiled)
    if op == "all_gather":
        return lambda x: collectives.all_gather(x, "x", tiled=tiled)
    return lambda x: collectives.psum(x, "x")


def run_bytes(op: str, n: int, x: np.ndarray, tiled: bool) -> tuple[bytes, bytes, float]:
    """Output bytes, trace JSON and end time of `op` on n devices."""
    out_specs = P("x") if op == "all_to_all" else P()
    f = sim.shard_map(program(op, tiled), mesh=sim.Mesh({"x": n}), in_specs=P("x"), out_specs=out_specs,
                      check_vma=False)
    run = f.run(x)
    return run.outputs.tobytes(), json.dumps(run.trace.to_json()).encode(), run.end_time_s


@st.composite
def row_calls(draw):
    """(op, devices, tiled, global input) of a row exchange on 1 to 8 devices, any dtype and trailing shape."""
    op = draw(st.sampled_from(OPS))
    n = draw(st.integers(1, 8))
    tiled = draw(st.booleans()) or op == "psum"
    # each device's block: all_to_all splits n rows (n k when tiled), the others take any number of rows
    rows = n * draw(st.integers(1, 3))
    if op == "all_to_all":
        rows = n * n * (draw(st.integers(1, 2)) if tiled else 1)
    shape = (rows,) + tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    dtype = draw(st.sampled_from(["int8", "int32", "float16", "float32", "float64"]))
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = draw(st.binary(min_size=size, max_size=size))
    return op, n, tiled, np.frombuffer(raw, dtype).reshape(shape).copy()


def ppermute_run(axes: dict[str, int], axis: str, perms: list[list[tuple[int, int]]], x: np.ndarray,
                 network: sim.Network | None, check_vma: bool = False) -> tuple:
    """Output bytes, trace JSON and columns, end time, call records and programs of one ppermute per perm."""
    def body(v):
        for perm in perms:
            v = collectives.ppermute(v, axis, perm)
        return v

    mesh = sim.Mesh(axes) if network is None else sim.Mesh(axes, network=network)
    names = tuple(axes)
    run = sim.shard_map(body, mesh=mesh, in_specs=P(names), out_specs=P(names), check_vma=check_vma).run(x)
    calls = [(c.device, c.collective, c.call, c.members, c.enter_s, c.met_s, c.exit_s, c.algorithm)
             for c in run.simulation.calls]
    columns = {key: np.asarray(value).tolist() for key, value in run.trace.columns().items()}
    programs = [str(program) for program in run.programs]
    return (run.outputs.tobytes(), json.dumps(run.trace.to_json()).encode(), columns, run.end_time_s, calls,
            programs)


# networks where arrivals differ (rings, a switch), store-and-forward, protocol overheads, zero latency
PERMUTE_NETWORKS = [None, sim.Network(1e-6, 10e9), sim.Network(2e-6, 5e9, topology="ring"),
                    sim.Network.switch(1e-6, 1e9), sim.Network(1e-6, 1e9, topology="ring", store_and_forward=True),
                    sim.Network(1e-6, 1e9, costs=sim.Costs(efficiency=0.5, overhead_bytes=64)),
                    sim.Network(0.0, 1e9, topology="ring")]


def drawn_block(draw, devices: int) -> np.ndarray:
    """A global input of `devices` blocks of 0 to 3 rows (and 0 to 2 trailing dimensions), of any dtype."""
    shape = (devices * draw(st.integers(0, 3)),) + tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    dtype = draw(st.sampled_from(["int8", "int32", "float16", "float64"]))
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(draw(st.binary(min_size=nbytes, max_size=nbytes)), dtype).reshape(shape).copy()


def ring_shift_program(n: int = 4, sanitize: bool = False) -> sim.ShardMapped:
    """One ppermute shifting round a ring of n devices, as a shard_map (sanitized or not)."""
    ring = [(i, (i + 1) % n) for i in range(n)]
    return sim.shard_map(lambda v: collectives.ppermute(v, "x", ring), mesh=sim.Mesh({"x": n}), in_specs=P("x"),
                         out_specs=P("x"), check_vma=False, sanitize=sanitize)


def run_perturbed_and_sanitized(n: int = 4) -> None:
    """Run a ring shift over n devices perturbed (its own arrival draws per message), then sanitized: the two
    runs whose messages go one by one."""
    x = np.arange(float(n))
    ring_shift_program(n).run_with((x,), perturbation=sim.Perturbation(3))
    ring_shift_program(n, sanitize=True).run(x)


def case_axes(shape: tuple[int, ...]) -> tuple[str, ...]:
    """The mesh axes of a case of this shape: 'x', then 'y'."""
    return tuple("xy"[:len(shape)])


def run_case(shape: tuple[int, ...], network: sim.Network, body, x: np.ndarray) -> tuple:
    """Output bytes, trace JSON, call records and end time of `body` (returning two arrays) run on `x` split
    over a mesh of `shape` on `network`."""
    axes = case_axes(shape)
    mesh = sim.Mesh(dict(zip(axes, shape)), network=network)
    f = sim.shard_map(body, mesh=mesh, in_specs=P(axes), out_specs=(P(axes), P(axes)), check_vma=False)
    run = f.run(x)
    outputs = b"".join(np.asarray(o).tobytes() for o in run.outputs)
    return outputs, json.dumps(run.trace.to_json()).encode(), [str(c) for c in run.calls], run.end_time_s


def links(program: sim.Program) -> list[int]:
    """Each variable object the program's equations read and write, as the number of its first appearance
    (inputs first, then each equation's inputs and outputs in order): equal for two programs whose equations
    read the very variables the same equations wrote."""
    seen: dict[int, int] = {id(v): k for k, v in enumerate(program.inputs)}
    found = []
    for equation in program.equations:
        for var in (*equation.inputs, *equation.outputs):
            if isinstance(var, sim.Var):
                found.append(seen.setdefault(id(var), len(seen)))
    return found
