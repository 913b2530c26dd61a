"""The row exchanges (all_to_all, all_gather, the direct psum) as programs, their runs as bytes, and the
calls the fast-path tests draw: shared by `test_fast_paths.py` and `test_lean_rows.py`."""

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
