"""`oracles.install_cpu_lowerings()`: JAX's own pbroadcast runs on CPU, bit for bit, and the survey of which
`jax.lax` collectives XLA:CPU cannot run still holds.

JAX runs in child processes (`cpu_lowerings_child.py`, a user's script that installs before importing jax;
`--no-install` for the survey); many calls go to it in one round trip. The reference is the docs' meaning,
in numpy: every device gets the block of the device whose index along `axis_name` is `source`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax_child
import numpy as np
import pytest
from docs_pages import named_block, page
from jax_child import Child

import oracles

pytestmark = [
    pytest.mark.differential,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs the jax extra"),
]

CHILD = Path(__file__).resolve().parent / "cpu_lowerings_child.py"
ROOT = CHILD.parent.parent


def started(*flags: str) -> Iterator[Child]:
    yield from jax_child.started(CHILD, *flags)


child = pytest.fixture(scope="module")(started)
fresh_child = pytest.fixture(started)


# ---------------------------------------------------------------------------------------------- cases


def dtypes() -> list[np.dtype]:
    import ml_dtypes  # installed with jax

    names = ("float32", "float64", "float16", "int8", "int32", "uint64", "bool", "complex64")
    return [np.dtype(ml_dtypes.bfloat16), *map(np.dtype, names)]


def random_bits(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Uniformly random bytes viewed as `dtype` (NaNs with payloads, -0.0, subnormals and infinities among
    them for floats), with -0.0 and a quiet NaN with a payload forced in where there is room."""
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    raw = rng.integers(0, 256, (*shape, dtype.itemsize), dtype=np.uint8)
    x = raw.view(dtype).reshape(shape).copy()
    if dtype.kind == "f" and x.size >= 2:
        flat = x.reshape(-1)
        bits = flat.view(f"u{dtype.itemsize}")
        bits[0] = 1 << (8 * dtype.itemsize - 1)  # -0.0
        bits[1] = bits[0] - 1 - 0x15  # a NaN with a payload (all exponent bits, low mantissa bits)
    return x


MESHES = [{"i": 4}, {"x": 2, "y": 4}, {"x": 2, "y": 2, "z": 2}]
SHAPES = [(), (3,), (2, 3), (0,)]


def axis_names(shape: dict[str, int]) -> list[Any]:
    """Every single axis, the whole mesh as a tuple in mesh order and reversed, and for three axes a pair."""
    names = [*shape, tuple(shape)]
    if len(shape) > 1:
        names.append(tuple(reversed(shape)))
    if len(shape) > 2:
        names.append(tuple(shape)[1:][::-1])
    return names


def group_size(shape: dict[str, int], axis_name: Any) -> int:
    return int(np.prod([shape[a] for a in (axis_name if isinstance(axis_name, tuple) else (axis_name,))]))


def generated_calls(seed: int) -> list[tuple[dict[str, int], dict[str, Any]]]:
    """(mesh, call) pairs: every mesh, axis name and source, the dtypes and shapes taken in turn, random bits."""
    rng, kinds, calls = np.random.default_rng(seed), dtypes(), []
    for shape in MESHES:
        devices = int(np.prod(list(shape.values())))
        for axis_name in axis_names(shape):
            for source in range(group_size(shape, axis_name)):
                dtype, block = kinds[len(calls) % len(kinds)], SHAPES[len(calls) % len(SHAPES)]
                args = [[random_bits(rng, block, dtype) for _ in range(devices)]]
                calls.append((shape, {"axis_name": axis_name, "source": source, "args": args}))
    return calls


def reference(blocks: list[np.ndarray], shape: dict[str, int], axis_name: Any, source: int) -> list[np.ndarray]:
    """The docs' pbroadcast, in numpy: device d gets the block of the device with d's coordinates off
    `axis_name` and `source`'s (row-major over `axis_name`) on it."""
    axes = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    at = dict(zip(axes, np.unravel_index(source, [shape[a] for a in axes])))
    dims = tuple(shape.values())
    return [blocks[np.ravel_multi_index([at.get(n, c) for n, c in zip(shape, np.unravel_index(d, dims))], dims)]
            for d in range(len(blocks))]


def same_bytes(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    return all(g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes() for g, w in zip(got, want))


def jobs_of(kind: str, calls: list[tuple[dict[str, int], dict[str, Any]]], check_vma: bool) -> list[dict[str, Any]]:
    """One job per mesh, in the order the meshes first appear; with `answers`, the per-call results."""
    by_mesh: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for shape, call in calls:
        by_mesh.setdefault(tuple(shape.items()), []).append(call)
    return [{"kind": kind, "mesh_shape": dict(key), "check_vma": check_vma, "calls": group}
            for key, group in by_mesh.items()]


def answers(replies: list[tuple[Any, ...]]) -> list[Any]:
    """The per-call results of jobs made by `jobs_of`, in the calls' order (calls are grouped by mesh in
    the order `generated_calls` makes them, so concatenating keeps it)."""
    found = []
    for reply in replies:
        assert reply[0] == "ok", f"JAX failed: {reply[1:]}"
        found.extend(reply[1])
    return found


def wrong(calls: list[tuple[dict[str, int], dict[str, Any]]], results: list[Any]) -> list[str]:
    """The calls whose result is not the reference's bytes."""
    return [f"{shape} {call['axis_name']!r} source={call['source']} {call['args'][0][0].dtype}"
            for (shape, call), got in zip(calls, results)
            if not same_bytes(got, reference(call["args"][0], shape, call["axis_name"], call["source"]))]


# ---------------------------------------------------------------------------------------------- forward


def test_child_installed_both_lowerings_before_jax(child):
    """The child's install, run before jax was imported, registered pbroadcast and ragged_all_to_all; a
    second install (jax running) adds nothing."""
    assert child.ready == ("ready", {"installed": ("pbroadcast", "ragged_all_to_all"), "devices": 8})
    assert child.ask([{"kind": "install"}]) == [("ok", ())]


@pytest.mark.parametrize("vma", [True, False])
def test_pbroadcast_is_the_source_bytes(child, vma):
    """Every mesh (1, 2 and 3 axes), every axis name (single, tuples in and against mesh order, a pair) and
    every source, nine dtypes (bfloat16, floats with -0.0, NaN payloads and random bit patterns, ints,
    bool, complex64) and four shapes (scalar, 1-D, 2-D, empty): jax.lax.pbroadcast under
    jit(shard_map) on CPU gives every device its group's source block, bit for bit."""
    calls = generated_calls(seed=7)
    assert len(calls) == 56  # every (dtype, shape) pair among them: 9 and 4 taken in turn
    assert wrong(calls, answers(child.ask(jobs_of("run", calls, vma)))) == []


def test_pytree_leaves_are_each_broadcast(child):
    """A list of three leaves of different dtypes and shapes: each leaf broadcast from the source."""
    rng, shape = np.random.default_rng(3), {"x": 2, "y": 4}
    leaves = [[random_bits(rng, block, np.dtype(t)) for _ in range(8)]
              for block, t in (((2,), "float32"), ((), "int16"), ((1, 2), "float64"))]
    call = {"axis_name": ("y", "x"), "source": 6, "args": leaves}
    [got] = answers(child.ask(jobs_of("tree", [(shape, call)], True)))
    assert all(same_bytes(g, reference(leaf, shape, ("y", "x"), 6)) for g, leaf in zip(got, leaves))


def test_documented_masked_psum_agrees_except_on_signed_zero_and_nan_payloads(child):
    """The docs' masked psum gives the same bytes on integers and ordinary floats, but adding zeros turns
    the source's -0.0 into +0.0 (and may change a NaN's payload), which the lowering keeps."""
    shape, plain = {"i": 4}, [np.array([1.5, -2.0, 3.25], np.float32) * (d + 1) for d in range(4)]
    ints = [np.array([d, -d, 7], np.int32) for d in range(4)]
    signed = [np.array([-0.0, 1.0], np.float32) for _ in range(4)]
    calls = [(shape, {"axis_name": "i", "source": s, "args": [a]}) for a in (plain, ints, signed) for s in (0, 3)]
    ours = answers(child.ask(jobs_of("run", calls, True)))
    docs = answers(child.ask(jobs_of("documented", calls, True)))
    assert all(same_bytes(a, b) for a, b in zip(ours[:4], docs[:4]))
    assert all(np.signbit(g[0]) for got in ours[4:] for g in got)
    assert not any(np.signbit(g[0]) for got in docs[4:] for g in got)


def test_result_type_under_check_vma(child):
    """With check_vma on, JAX types the result like the operand: varying over every mesh axis the operand
    varies over (all of them here), although every device of a group holds the same value."""
    shape = {"x": 2, "y": 4}
    calls = [(shape, {"axis_name": axis, "source": 1, "args": [[np.zeros(3, np.float32)] * 8]})
             for axis in ("y", ("x", "y"))]
    [reply] = child.ask(jobs_of("typeof", calls, True))
    assert reply == ("ok", ["float32[3]{V:(x,y)}"] * 2)


@pytest.mark.parametrize("vma", [True, False])
def test_invariant_operand_is_refused_with_check_vma_only(child, vma):
    """An operand invariant along the axis is refused by JAX's type rule with check_vma on (in ppermute's
    words: JAX checks pbroadcast with ppermute's rule) and broadcast (to itself) with check_vma off."""
    call = {"axis_name": "i", "source": 2, "args": [[np.full(2, d, np.float32) for d in range(4)]]}
    [reply] = child.ask(jobs_of("invariant", [({"i": 4}, call)], vma))
    if vma:
        assert reply[:2] == ("error", "ValueError")
        assert reply[2].startswith("Collective ppermute must be applied to a device-varying")
    else:
        assert [list(x) for x in reply[1][0]] == [[1.0 + d] * 2 for d in range(4)]


def test_out_of_range_source_is_an_error_naming_it(child):
    """A source outside the group (JAX's pbroadcast does not check it) is a ValueError at lowering, with
    the value and the range."""
    for source in (4, -1):
        call = {"axis_name": "y", "source": source, "args": [[np.zeros(2, np.float32)] * 8]}
        [reply] = child.ask(jobs_of("run", [({"x": 2, "y": 4}, call)], True))
        assert reply[:2] == ("error", "ValueError")
        assert f"source={source} must be an int in [0, 4)" in reply[2] and "axis_name='y'" in reply[2]


# ---------------------------------------------------------------------------------------------- JAX's rules


def scalar_calls(seed: int) -> list[tuple[dict[str, int], dict[str, Any]]]:
    """Scalar float64 blocks and cotangents (JAX's transpose of pbroadcast needs scalar blocks)."""
    rng, calls = np.random.default_rng(seed), []
    for shape in MESHES:
        devices = int(np.prod(list(shape.values())))
        for axis_name in axis_names(shape):
            source = int(rng.integers(group_size(shape, axis_name)))
            args = [[np.float64(v) for v in rng.standard_normal(devices)] for _ in range(2)]
            calls.append((shape, {"axis_name": axis_name, "source": source, "args": args}))
    return calls


@pytest.mark.parametrize("vma", [True, False])
def test_vjp_and_grad_satisfy_the_adjoint_identity(child, vma):
    """Through JAX's own transpose rule: sum over devices of <pbroadcast(x), t> == <x, vjp(t)> for random x
    and t; and grad of pbroadcast(x) * w is the vjp at w."""
    calls = scalar_calls(seed=11)
    forward = answers(child.ask(jobs_of("run", [(s, {**c, "args": c["args"][:1]}) for s, c in calls], vma)))
    back = answers(child.ask(jobs_of("vjp", calls, vma)))
    grads = answers(child.ask(jobs_of("grad", calls, vma)))
    for (_, call), y, xt, g in zip(calls, forward, back, grads):
        x, t = call["args"]
        assert np.isclose(np.dot(np.ravel(y), t), np.dot(x, np.ravel(xt)), rtol=1e-12)
        assert same_bytes(g, xt)


def test_jax_transpose_fails_on_non_scalar_blocks(child):
    """JAX 0.10.2's transpose of pbroadcast fills with `full_like(t, psum(t))`, which takes a scalar only, so
    vjp of any non-scalar block fails in JAX's rule (on every platform, before lowering). When JAX fixes
    it this test fails and the vjp test can take arrays."""
    call = {"axis_name": "i", "source": 0, "args": [[np.zeros(2)] * 4, [np.ones(2)] * 4]}
    [reply] = child.ask(jobs_of("vjp", [({"i": 4}, call)], True))
    assert reply[:2] == ("error", "TypeError") and "full must be called with scalar fill_value" in reply[2]


@pytest.mark.parametrize("vma", [True, False])
def test_vmap_equals_a_loop_over_the_batch(child, vma):
    """jax.vmap of pbroadcast (JAX's batcher binds the primitive on the batched block) equals pbroadcast of
    each batch element in turn."""
    rng, calls, loops = np.random.default_rng(5), [], []
    for shape in MESHES[1:]:
        devices = int(np.prod(list(shape.values())))
        for axis_name in axis_names(shape)[:3]:
            batch = [random_bits(rng, (3, 2), np.dtype("float32")) for _ in range(devices)]
            call = {"axis_name": axis_name, "source": group_size(shape, axis_name) - 1, "args": [batch]}
            calls.append((shape, call))
            loops += [(shape, {**call, "args": [[b[k] for b in batch]]}) for k in range(3)]
    batched = answers(child.ask(jobs_of("vmap", calls, vma)))
    looped = answers(child.ask(jobs_of("run", loops, vma)))
    for i, got in enumerate(batched):
        want = [np.stack([looped[3 * i + k][d] for k in range(3)]) for d in range(len(got))]
        assert same_bytes(got, want)


# ---------------------------------------------------------------------------------------------- the comparison can fail


def test_a_wrong_lowering_is_caught(fresh_child):
    """With the source off by one, the bytes-equal comparison flags every call of the batch whose group has
    different blocks, while the right lowering passes the same calls."""
    calls = [(s, c) for s, c in generated_calls(seed=9) if c["args"][0][0].size and c["args"][0][0].dtype != bool]
    assert wrong(calls, answers(fresh_child.ask(jobs_of("run", calls, True)))) == []
    assert fresh_child.ask([{"kind": "mutant"}]) == [("ok", "mutant")]
    assert len(wrong(calls, answers(fresh_child.ask(jobs_of("run", calls, True))))) == len(calls)


# ---------------------------------------------------------------------------------------------- the survey


GPU_ONLY = "NotImplementedError: MLIR translation rule for primitive '{}' not found for platform cpu"
SURVEY_GAPS = {  # jax 0.10.2 on XLA:CPU: everything else in cpu_lowerings_survey.PROGRAMS runs
    "ragged_all_to_all": "JaxRuntimeError: UNIMPLEMENTED: HLO opcode `ragged-all-to-all` is not supported by "
                         "XLA:CPU ThunkEmitter",
    "pbroadcast": GPU_ONLY.format("pbroadcast"),
    "pbroadcast_start/done": GPU_ONLY.format("pbroadcast_start"),
    "psend": "NotImplementedError: psend is currently only implemented on GPU",
    "precv": "NotImplementedError: precv is currently only implemented on GPU",
    "psend+precv": "NotImplementedError: psend is currently only implemented on GPU",
    # not a CPU gap: JAX lowers it nowhere
    "psum_scatter_start/done(tiled=False)": "NotImplementedError: lowering reduce_scatter_start with tiled=False "
                                            "unimplemented",
}
INSTALLED = {"ragged_all_to_all", "pbroadcast"}


def test_survey_of_every_collective_on_cpu_still_holds():
    """Every collective of jax.lax (and the async, unreduced and reduced forms in jax._src.lax.parallel) run
    under jit(shard_map) on CPU, check_vma on and off: exactly the table of docs/reference/cpu-lowerings.md
    fails, with these errors; after install_cpu_lowerings() ragged_all_to_all and pbroadcast run and nothing
    else changes; and HLO
    Send and Recv, registered as psend's and precv's CPU lowerings, are what XLA:CPU lacks. A JAX upgrade
    that changes any of it fails here."""
    for child in started("--no-install"):
        before, installed, after, send_recv = child.ask(
            [{"kind": "survey"}, {"kind": "install"}, {"kind": "survey"}, {"kind": "send_recv"}])
    assert installed == ("ok", ("pbroadcast", "ragged_all_to_all"))
    assert len(before[1]) == 35
    for name, outcome in before[1].items():
        assert set(outcome.values()) == {SURVEY_GAPS.get(name, "ok")}, name
    for name, outcome in after[1].items():
        assert set(outcome.values()) == {"ok" if name in INSTALLED else SURVEY_GAPS.get(name, "ok")}, name
    unimplemented = "JaxRuntimeError: UNIMPLEMENTED: HLO opcode `{}` is not supported by XLA:CPU ThunkEmitter"
    assert send_recv == ("ok", {"psend": unimplemented.format("send"), "precv": unimplemented.format("recv")})
    for name in ("psend", "precv"):
        assert unimplemented.format(name[1:])[len("JaxRuntimeError: "):] in oracles._cpu_lowerings.UNLOWERABLE[name]


# ---------------------------------------------------------------------------------------------- install


@pytest.mark.parametrize("names, match", [
    (["pbroadcast", "psum"], r"name='psum' must be one of pbroadcast, ragged_all_to_all"),
    (["psend"], r"name='psend' has no CPU lowering: XLA:CPU has no Send .*known names are pbroadcast"),
    ("precv", r"name='precv' has no CPU lowering: XLA:CPU has no Recv"),
])
def test_bad_names_are_refused_naming_the_known_ones(names, match):
    """An unknown name, or psend/precv, is a ValueError naming it and the known names (before jax starts)."""
    with pytest.raises(ValueError, match=match):
        oracles.install_cpu_lowerings(names)


_SCRIPT = r"""
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
sys.path.insert(0, sys.argv[1])
import oracles
seen = {"ragged alone": oracles.install_cpu_ragged_all_to_all()}
import numpy as np, jax
from jax.sharding import Mesh, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
def pbroadcast():
    return jax.jit(jax.shard_map(lambda x: jax.lax.pbroadcast(x, "i", 2), mesh=mesh, in_specs=P("i"),
                                 out_specs=P("i")))
def attempt(f):
    try:
        return [float(v) for v in f(np.arange(4.0))]
    except NotImplementedError as error:
        return type(error).__name__
early = pbroadcast()
seen.update({"before": attempt(early), "ragged again": oracles.install_cpu_lowerings(["ragged_all_to_all"]),
             "all": oracles.install_cpu_lowerings(), "all again": oracles.install_cpu_lowerings(),
             "failed before": attempt(early), "new function": attempt(pbroadcast())})
print(json.dumps(seen))
"""


def test_install_is_idempotent_and_cached_functions_keep_their_lowering():
    """After install_cpu_ragged_all_to_all(), installing ragged again adds nothing and installing all adds
    pbroadcast only; a second call adds nothing. Unlike ragged_all_to_all (which lowers and fails to
    compile, so JAX caches the failing lowering), pbroadcast fails while lowering, nothing is cached, and
    the function that failed before the install runs after it without jax.clear_caches()."""
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(ROOT)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "ragged alone": True, "before": "NotImplementedError", "ragged again": [], "all": ["pbroadcast"],
        "all again": [], "failed before": [2.0] * 4, "new function": [2.0] * 4}


def test_the_pages_example_runs_in_a_fresh_process():
    """The example of docs/reference/cpu-lowerings.md (the block named cpu-lowerings-example) runs as written in
    a new process and prints the source's values on every device."""
    code = named_block(page("reference/cpu-lowerings"), "cpu-lowerings-example")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                          cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[-0. -0. -0. -0.]"
