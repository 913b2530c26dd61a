"""Real JAX on CPU virtual devices (oracles.JaxOracle) agrees bit for bit with the executable spec.

Also: the worker reports JAX's own errors as OracleError and stays alive, and a worker that crashes or
hangs is reported as OracleFailure and replaced on the next call.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest

from oracles import JaxOracle, OracleError, OracleFailure, OracleResult, shared_oracle, spec

pytestmark = [
    pytest.mark.differential,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs the jax extra"),
]


@pytest.fixture(scope="module")
def oracle() -> JaxOracle:
    return shared_oracle()


def n_devices(mesh_shape: dict[str, int]) -> int:
    return int(np.prod(list(mesh_shape.values())))


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-100, 100, shape).astype(dtype)


def assert_bitwise_equal(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for d, (g, w) in enumerate(zip(got, want)):
        assert (g.shape, g.dtype) == (w.shape, w.dtype), f"device {d}"
        assert g.tobytes() == w.tobytes(), f"device {d}: JAX {g!r} != spec {w!r}"


# --- all_gather and all_to_all --------------------------------------------------------------------------

ALL_GATHER_CASES = [
    ({"x": 4}, (3,), np.float32, dict(axis_name="x")),
    ({"x": 4}, (2, 2), np.int8, dict(axis_name="x", axis_index_groups=[[0, 2], [3, 1]], axis=1)),
    ({"x": 2, "y": 2}, (2, 3), np.float16, dict(axis_name=("y", "x"), axis=1, tiled=True)),
    ({"x": 4, "y": 2}, (2,), np.float64, dict(axis_name="y", tiled=True)),
    ({"x": 2, "y": 4}, (3,), np.int64, dict(axis_name="y", axis_index_groups=[[0, 3], [1, 2]], axis=-1)),
    ({"x": 2, "y": 2, "z": 2}, (2, 1), np.int32, dict(axis_name=("z", "x"), axis=2)),
]


@pytest.mark.parametrize("mesh_shape, shape, dtype, params", ALL_GATHER_CASES,
                         ids=[f"{m}-{np.dtype(t).name}-{p}" for m, _, t, p in ALL_GATHER_CASES])
def test_all_gather_matches_spec(oracle, mesh_shape, shape, dtype, params):
    """jax.lax.all_gather under shard_map equals spec.all_gather, bytes and all."""
    rng = np.random.default_rng(0)
    xs = [random_array(rng, shape, dtype) for _ in range(n_devices(mesh_shape))]
    result = oracle.run("all_gather", mesh_shape, (xs,), params)
    assert result.path == "real"
    assert_bitwise_equal(result.outputs, spec.all_gather(xs, mesh_shape, **params))


ALL_TO_ALL_CASES = [
    ({"x": 4}, (4,), np.float32, dict(axis_name="x", split_axis=0, concat_axis=0)),
    ({"x": 4}, (3, 4), np.int8, dict(axis_name="x", split_axis=1, concat_axis=0)),
    ({"x": 4}, (4, 3, 2), np.float16, dict(axis_name="x", split_axis=0, concat_axis=2)),
    ({"x": 2, "y": 2}, (8, 2), np.float16, dict(axis_name=("y", "x"), split_axis=0, concat_axis=1, tiled=True)),
    ({"x": 4, "y": 2}, (2, 6), np.float64,
     dict(axis_name="x", split_axis=1, concat_axis=1, axis_index_groups=[[0, 3], [2, 1]], tiled=True)),
    ({"x": 2, "y": 4}, (2, 3, 4), np.int64, dict(axis_name="y", split_axis=2, concat_axis=0)),
    ({"x": 2, "y": 2, "z": 2}, (2, 3), np.int32,
     dict(axis_name=("z", "x"), split_axis=0, concat_axis=1, axis_index_groups=[[3, 0], [1, 2]])),
]


@pytest.mark.parametrize("mesh_shape, shape, dtype, params", ALL_TO_ALL_CASES,
                         ids=[f"{m}-{np.dtype(t).name}-{p}" for m, _, t, p in ALL_TO_ALL_CASES])
def test_all_to_all_matches_spec(oracle, mesh_shape, shape, dtype, params):
    """jax.lax.all_to_all under shard_map equals spec.all_to_all, bytes and all."""
    rng = np.random.default_rng(1)
    xs = [random_array(rng, shape, dtype) for _ in range(n_devices(mesh_shape))]
    result = oracle.run("all_to_all", mesh_shape, (xs,), params)
    assert result.path == "real"
    assert_bitwise_equal(result.outputs, spec.all_to_all(xs, mesh_shape, **params))


# --- ragged_all_to_all ----------------------------------------------------------------------------------


def ragged_case(rng: np.random.Generator, mesh_shape: dict[str, int], params: dict[str, Any], dtype: Any,
                slices_per_peer: int = 2, trailing: tuple[int, ...] = (2,),
                offset_dtype: Any = np.int32) -> tuple[list[np.ndarray], ...]:
    """Valid random ragged arguments: slices of 0..3 rows at gapped offsets, landing in shuffled order."""
    members = spec.groups(mesh_shape, params["axis_name"], params.get("axis_index_groups"))
    k = len(members[0]) * slices_per_peer
    rows = k * 4 + 1  # room for k slices of up to 3 rows, each after a gap of at most one row
    n = n_devices(mesh_shape)
    send_sizes = [rng.integers(0, 4, k) for _ in range(n)]
    input_offsets = [packed_offsets(rng, sizes, np.arange(k)) for sizes in send_sizes]
    recv_sizes, output_offsets = [np.zeros(k, int) for _ in range(n)], [np.zeros(k, int) for _ in range(n)]
    for group in members:
        for src_idx, src in enumerate(group):
            for dst_idx, dst in enumerate(group):
                for s in range(slices_per_peer):
                    recv_sizes[dst][src_idx * slices_per_peer + s] = send_sizes[src][dst_idx * slices_per_peer + s]
        for dst_idx, dst in enumerate(group):
            landing = packed_offsets(rng, recv_sizes[dst], rng.permutation(k))
            for src_idx, src in enumerate(group):
                for s in range(slices_per_peer):
                    output_offsets[src][dst_idx * slices_per_peer + s] = landing[src_idx * slices_per_peer + s]
    operands = [random_array(rng, (rows, *trailing), dtype) for _ in range(n)]
    outputs = [random_array(rng, (rows, *trailing), dtype) for _ in range(n)]
    ints = [[np.asarray(a, offset_dtype) for a in arg]
            for arg in (input_offsets, send_sizes, output_offsets, recv_sizes)]
    return (operands, outputs, *ints)


def packed_offsets(rng: np.random.Generator, sizes: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Offsets that lay slices out one after another in `order`, each after a gap of 0 or 1 rows."""
    offsets, cursor = np.zeros(len(sizes), int), 0
    for i in order:
        cursor += int(rng.integers(0, 2))
        offsets[i], cursor = cursor, cursor + sizes[i]
    return offsets


RAGGED_CASES = [
    ({"x": 2}, np.float32, dict(axis_name="x"), np.int32),
    ({"x": 4}, np.float64, dict(axis_name="x"), np.int64),
    ({"x": 2, "y": 2}, np.int8, dict(axis_name=("y", "x")), np.int32),
    ({"x": 4}, np.float16, dict(axis_name="x", axis_index_groups=[[0, 2], [3, 1]]), np.int32),
    ({"x": 2, "y": 4}, np.int32, dict(axis_name="y"), np.int64),
    ({"x": 2, "y": 2, "z": 2}, np.float32, dict(axis_name=("x", "z"), axis_index_groups=[[1, 3], [2, 0]]), np.int32),
]


@pytest.mark.parametrize("mesh_shape, dtype, params, offset_dtype", RAGGED_CASES,
                         ids=[f"{m}-{np.dtype(t).name}-{p}" for m, t, p, _ in RAGGED_CASES])
def test_ragged_all_to_all_matches_spec(oracle, mesh_shape, dtype, params, offset_dtype):
    """JAX's ragged_all_to_all (on XLA:CPU through the installed CPU lowering) equals the spec."""
    rng = np.random.default_rng(2)
    for _ in range(5):
        args = ragged_case(rng, mesh_shape, params, dtype, offset_dtype=offset_dtype)
        result = oracle.run("ragged_all_to_all", mesh_shape, args, params)
        assert_bitwise_equal(result.outputs, spec.ragged_all_to_all(*args, mesh_shape, **params))


def test_ragged_all_to_all_docs_example_reports_its_path(oracle):
    """The docs' example gives [1, 3, 0, 0] and [2, 2, 4, 0]; the oracle says which path computed it."""
    ints = [[np.array(v, np.int32) for v in pair] for pair in
            ([[0, 1], [0, 1]], [[1, 2], [1, 1]], [[0, 0], [1, 2]], [[1, 1], [2, 1]])]
    args = ([np.array([1, 2, 2], np.float32), np.array([3, 4, 0], np.float32)], [np.zeros(4, np.float32)] * 2, *ints)
    result = oracle.run("ragged_all_to_all", {"i": 2}, args, {"axis_name": "i"})
    assert result.path in ("real", "cpu lowering")
    assert_bitwise_equal(result.outputs, [np.array([1, 3, 0, 0], np.float32), np.array([2, 2, 4, 0], np.float32)])


# --- errors and failures --------------------------------------------------------------------------------


def test_jax_error_is_oracle_error_and_worker_survives(oracle):
    """JAX's own shape check comes back as OracleError with JAX's message; the same worker goes on."""
    xs = [np.zeros(3, np.float32)] * 4
    oracle.run("all_gather", {"x": 4}, (xs,), {"axis_name": "x"})
    pid = oracle.pid
    with pytest.raises(OracleError, match="all_to_all requires the size of the mapped axis") as caught:
        oracle.run("all_to_all", {"x": 4}, (xs,), {"axis_name": "x", "split_axis": 0, "concat_axis": 0})
    assert caught.value.kind == "ValueError" and "float32[3]" in caught.value.case
    assert isinstance(oracle.run("all_gather", {"x": 4}, (xs,), {"axis_name": "x"}), OracleResult)
    assert oracle.pid == pid


def test_ragged_argument_check_is_oracle_error(oracle):
    """The real ragged op is traced even where XLA:CPU cannot run it, so its dtype checks apply."""
    args = ([np.zeros(3, np.float32)] * 2, [np.zeros(4, np.float32)] * 2, [np.zeros(2, np.float32)] * 2,
            *([np.zeros(2, np.int32)] * 2 for _ in range(3)))
    with pytest.raises(OracleError, match="input_offsets must be integer type"):
        oracle.run("ragged_all_to_all", {"i": 2}, args, {"axis_name": "i"})


def test_ragged_compile_check_is_oracle_error_not_fallback(oracle):
    """XLA's verifier (offset arrays must share a dtype) is reported, not hidden by the CPU lowering."""
    args = ([np.zeros(3, np.float32)] * 2, [np.zeros(4, np.float32)] * 2, [np.zeros(2, np.int64)] * 2,
            *([np.zeros(2, np.int32)] * 2 for _ in range(3)))
    with pytest.raises(OracleError, match="RaggedAllToAll operands have different shapes"):
        oracle.run("ragged_all_to_all", {"i": 2}, args, {"axis_name": "i"})


def test_worker_crash_is_oracle_failure_and_worker_restarts():
    """A worker that dies mid-case is an OracleFailure naming the case; the next call gets a new worker."""
    xs = [np.arange(2)] * 2
    with JaxOracle() as oracle:
        oracle.run("all_gather", {"i": 2}, (xs,), {"axis_name": "i"})
        first = oracle.pid
        with pytest.raises(OracleFailure, match=r"died \(exit code 70\) on crash on mesh \{'i': 2\}"):
            oracle.run("crash", {"i": 2}, (), {})
        assert oracle.pid is None
        result = oracle.run("all_gather", {"i": 2}, (xs,), {"axis_name": "i"})
        assert_bitwise_equal(result.outputs, [np.array([[0, 1], [0, 1]])] * 2)
        assert oracle.pid not in (None, first)


def test_worker_hang_is_oracle_failure_and_worker_restarts():
    """A case that outlives timeout_s is an OracleFailure; the hung worker is killed and replaced."""
    xs = [np.arange(2)] * 2
    with JaxOracle(timeout_s=60) as oracle:
        oracle.run("all_gather", {"i": 2}, (xs,), {"axis_name": "i"})
        oracle.timeout_s = 0.5
        with pytest.raises(OracleFailure, match=r"no answer within timeout_s=0.5 on sleep on mesh"):
            oracle.run("sleep", {"i": 2}, (), {"seconds": 60})
        oracle.timeout_s = 60
        assert oracle.run("all_gather", {"i": 2}, (xs,), {"axis_name": "i"}).path == "real"


@pytest.mark.parametrize("op, mesh_shape, args, match", [
    ("pfoo", {"i": 2}, ([np.zeros(1)] * 2,), "op=.pfoo. must be one of"),
    ("all_gather", {"i": 16}, ([np.zeros(1)] * 16,), "has 16 devices; the JAX oracle runs at most 8"),
    ("all_gather", {"i": 0}, ((),), "must map axis names to positive sizes"),
    ("all_gather", {"i": 2}, ([np.zeros(1)] * 2, [np.zeros(1)] * 2), "takes 1 per-device argument"),
    ("all_gather", {"i": 2}, ([np.zeros(1)] * 3,), r"args\[0\] has 3 per-device arrays"),
    ("all_gather", {"i": 2}, ([np.zeros(1), np.zeros(2)],), r"device 1 has float64\[2\] but device 0 has"),
], ids=["unknown-op", "too-many-devices", "empty-axis", "arity", "device-count", "ragged-shapes"])
def test_bad_requests_are_rejected_before_sending(op, mesh_shape, args, match):
    """Requests one shard_map call cannot express raise ValueError without starting a worker."""
    oracle = JaxOracle()
    with pytest.raises(ValueError, match=match):
        oracle.run(op, mesh_shape, args, {"axis_name": "i"})
    assert oracle.pid is None


def test_shared_oracle_is_one_instance():
    """shared_oracle() hands every caller the same lazily started oracle."""
    assert shared_oracle() is shared_oracle()


# --- the compile pool -----------------------------------------------------------------------------------

_POOL = r"""
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
sys.path.insert(0, sys.argv[1])
import oracles
import jax, numpy as np
from jax.sharding import Mesh, PartitionSpec as P

def times():
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:  # a thread may end between the listing and the read
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        found[tid] = int(fields[11]) + int(fields[12])
    return found

def affinity(tid):
    try:
        return tuple(sorted(os.sched_getaffinity(int(tid))))
    except ProcessLookupError:  # ended since
        return None

threads = None if sys.argv[2] == "none" else int(sys.argv[2])
sized = oracles.size_compile_pool(threads)
mesh = Mesh(np.array(jax.devices()), ("x",))
before = times()
for rows in range(8, 8 * 12, 8):  # a new program each time: every compile runs whole
    body = lambda x: jax.lax.all_to_all(x * 2 + 1, "x", 0, 0, tiled=True)
    jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"))).lower(
        np.zeros((8 * rows, 3), np.float32)).compile()
after = times()
main = str(os.getpid())
try:
    oracles.size_compile_pool(1)
    late = "no error"
except RuntimeError as error:
    late = str(error)
print(json.dumps({"sized": sized, "late": late,
                  "compiling": sum(1 for t, v in after.items() if t != main and v - before.get(t, 0) >= 2),
                  "affinities": sorted({affinity(t) for t in after} - {None})}))
"""


def _pool(threads: str) -> dict[str, Any]:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parent.parent)
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}  # it compiles, not loads
    done = subprocess.run([sys.executable, "-c", _POOL, root, threads], capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs 2 cores to see the pool shrink")
def test_size_compile_pool_compiles_on_one_thread_and_gives_the_cores_back():
    """`oracles.size_compile_pool(1)` before JAX starts: the same compiles of 8-device programs keep fewer
    threads busy than XLA's default pool (one per core) does, every thread may again run on every core
    afterwards, and a second call once the backend runs is refused (the pool exists by then)."""
    import os

    everywhere = [sorted(os.sched_getaffinity(0))]
    one, default = _pool("1"), _pool("none")
    assert one["sized"] is True and default["sized"] is False
    assert one["compiling"] < default["compiling"], (one, default)
    assert [list(a) for a in one["affinities"]] == everywhere
    assert "must run before JAX starts its backend" in one["late"]


def test_oracle_compile_threads_reach_the_worker_and_answers_are_unchanged():
    """`JaxOracle(compile_threads=1)` starts its worker with the count in its environment and answers as
    the default oracle does; a count that is not a positive integer is refused before any worker starts."""
    import psutil

    from layouts import InvalidArgumentError
    from oracles._compile_pool import COMPILE_THREADS_ENV
    from scenarios.campaign import worker_oracle

    args = ([np.arange(3, dtype=np.float32) + d for d in range(4)],)
    with JaxOracle(compile_threads=1) as oracle:
        got = oracle.run("all_gather", {"x": 4}, args, {"axis_name": "x"}).outputs
        assert psutil.Process(oracle.pid).environ()[COMPILE_THREADS_ENV] == "1"
    assert_bitwise_equal(got, spec.all_gather(*args, {"x": 4}, axis_name="x"))
    assert worker_oracle().compile_threads == 1
    for bad in (0, -1, 1.5, "1"):
        with pytest.raises(InvalidArgumentError, match=r"compile_threads=.* must be a positive integer"):
            JaxOracle(compile_threads=bad)
