"""Programs in the style of JAX's shard_map tutorial and design notes, run in a worker process with 8 CPU devices.

Each program is written once as a body with its specs; `corpus()` runs it through `oracles.compare_jax` in
three ways of giving the mesh (`mesh=` on an Auto mesh, `jax.set_mesh` of an Auto mesh, `jax.set_mesh` of an
Explicit mesh with inputs placed by their specs), each forward, under `jax.grad` and, where a batch means
something, under `jax.vmap`. `python tests/bridge_tutorial.py NAME...` pickles {NAME: result} to stdout, as
`bridge_programs.py` does.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import jax.experimental
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src.lax import parallel
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import oracles

Mk = Callable[..., Callable[..., Any]]


@dataclass(frozen=True)
class Program:
    """A tutorial-style program: `build(mk)` returns the function (calling `mk(body, in_specs, out_specs)` in
    place of `jax.shard_map`), its arguments, each argument's spec at the top level (for the Explicit mesh),
    and whether `jax.grad` (of the sum of its first output) and `jax.vmap` (over a new leading axis of every
    argument) apply."""

    name: str
    axes: tuple[tuple[str, int], ...]
    build: Callable[[Mk], Callable[..., Any]]
    args: Callable[[], tuple]
    arg_specs: tuple
    grad: bool = True
    vmap: bool = True


def _rng(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _psum_variance(mk: Mk) -> Callable[..., Any]:
    """A sum over the mesh and the variance rule: the invariant weight is used by every device, so its
    gradient is summed over the axis."""
    return mk(lambda w, x: lax.psum(jnp.sum(jnp.sin(x) * w), "i"), (P(), P("i")), P())


def _gather_matmul(mk: Mk) -> Callable[..., Any]:
    """all_gather of row-sharded activations, then a local matmul with column-sharded weights."""
    return mk(lambda x, w: lax.all_gather(x, "i", tiled=True) @ w, (P("i"), P(None, "i")), P(None, "i"))


def _scatter_matmul(mk: Mk) -> Callable[..., Any]:
    """A contraction over a sharded dimension finished by psum_scatter: each device keeps its rows."""
    return mk(lambda x, w: lax.psum_scatter(x @ w, "i", tiled=True), (P(None, "i"), P("i")), P("i"))


def _ring(mk: Mk) -> Callable[..., Any]:
    """Each device sends its block one step around the ring, three times, scaling it each time."""
    perm = [(k, (k + 1) % 4) for k in range(4)]

    def body(x: Any) -> Any:
        for _ in range(3):
            x = lax.ppermute(x, "i", perm) * 0.5 + x
        return x

    return mk(body, P("i"), P("i"))


def _exchange(mk: Mk) -> Callable[..., Any]:
    """all_to_all turning a row sharding into a column sharding."""
    return mk(lambda x: jnp.tanh(lax.all_to_all(x, "i", 1, 0, tiled=True)), P("i"), P(None, "i"))


def _collective_matmul(mk: Mk) -> Callable[..., Any]:
    """all_gather-matmul overlapped with ppermute: each step multiplies the block of rows it holds by its own
    columns and passes the block on, instead of gathering every row first."""
    size = 4
    perm = [(k, (k - 1) % size) for k in range(size)]

    def body(lhs: Any, rhs: Any) -> Any:
        me = lax.axis_index("i")
        rows = lhs.shape[0]
        out = jnp.zeros((rows * size, rhs.shape[1]), lhs.dtype)
        block = lhs
        for step in range(size):
            out = lax.dynamic_update_slice_in_dim(out, block @ rhs, ((me + step) % size) * rows, axis=0)
            if step < size - 1:
                block = lax.ppermute(block, "i", perm)
        return out

    return mk(body, (P("i"), P(None, "i")), P(None, "i"))


def _reduce_scatter_matmul(mk: Mk) -> Callable[..., Any]:
    """The other direction: each device computes a partial product for one block of rows at a time and
    passes the running sum around the ring, so that each ends with its own rows fully reduced."""
    size = 4
    perm = [(k, (k + 1) % size) for k in range(size)]

    def body(lhs: Any, rhs: Any) -> Any:
        me = lax.axis_index("i")
        rows = lhs.shape[0] // size
        acc = jnp.zeros((rows, rhs.shape[1]), lhs.dtype)
        for step in range(size):
            target = (me - step - 1) % size
            acc = lax.ppermute(acc, "i", perm) if step else acc
            acc = acc + lax.dynamic_slice_in_dim(lhs, target * rows, rows, axis=0) @ rhs
        return acc

    return mk(body, (P(None, "i"), P("i")), P("i"))


def _data_parallel(mk: Mk) -> Callable[..., Any]:
    """Data parallel: replicated parameters, the batch sharded, the loss averaged over the axis."""
    def body(w: Any, b: Any, x: Any, y: Any) -> Any:
        pred = jnp.tanh(x @ w + b)
        return lax.pmean(jnp.mean((pred - y) ** 2), "i")

    return mk(body, (P(), P(), P("i"), P("i")), P())


def _tensor_parallel(mk: Mk) -> Callable[..., Any]:
    """Tensor parallel MLP: the first weight split by columns, the second by rows, one psum at the end."""
    def body(x: Any, w1: Any, w2: Any) -> Any:
        return lax.psum(jax.nn.relu(x @ w1) @ w2, "i")

    def loss(x: Any, w1: Any, w2: Any) -> Any:
        return jnp.sum(mk(body, (P(), P(None, "i"), P("i")), P())(x, w1, w2) ** 2)

    return loss


def _fsdp(mk: Mk) -> Callable[..., Any]:
    """Fully sharded data parallel: each layer's weights all_gathered just before use, under checkpoint so the
    gathered copy is not kept for the backward pass; the batch sharded over the same axis."""
    def layer(w: Any, h: Any) -> Any:
        return jnp.tanh(h @ lax.all_gather(w, "i", tiled=True))

    def body(ws: Any, x: Any) -> Any:
        h = x
        for w in ws:
            h = jax.checkpoint(layer)(w, h)
        return lax.pmean(jnp.mean(h ** 2), "i")

    return mk(body, ((P("i"), P("i")), P("i")), P())


def _pipeline(mk: Mk) -> Callable[..., Any]:
    """Pipeline parallel: each device holds one stage; microbatches enter at stage 0 and move to the next
    stage with ppermute after every step of a scan."""
    size = 4
    perm = [(k, k + 1) for k in range(size - 1)]

    def body(w: Any, xs: Any) -> Any:
        me = lax.axis_index("i")

        def step(carry: Any, x: Any) -> tuple[Any, Any]:
            inp = jnp.where(me == 0, x, carry)
            out = jnp.tanh(inp @ w[0])
            return lax.ppermute(out, "i", perm), out

        _, outs = lax.scan(step, lax.pcast(jnp.zeros_like(xs[0]), "i", to="varying"), xs)
        return lax.psum(jnp.where(me == size - 1, jnp.sum(outs ** 2), 0.0), "i")

    return mk(body, (P("i"), P()), P())


def _transposes(mk: Mk) -> Callable[..., Any]:
    """The design note's five transposes in one program: an invariant times a varying operand, a psum of a
    varying one, an invariant all_gather, a broadcast of an invariant through sin, and a psum of a product."""
    def body(x: Any, y: Any) -> tuple[Any, ...]:
        one = x * y
        two = lax.psum(x, "i") * y
        three = parallel.all_gather_invariant(x, "i", tiled=True) * jnp.sum(y)
        four = jnp.sin(y) * x
        five = lax.psum(x * y, "i")
        return (jnp.sum(one) + jnp.sum(four))[None], two, three, five

    def loss(x: Any, y: Any) -> Any:
        a, b, c, d = mk(body, (P("i"), P()), (P("i"), P(), P(), P()))(x, y)
        return jnp.sum(a) + jnp.sum(b * 1.5) + jnp.sum(c * 0.25) + jnp.sum(d)

    return loss


def _pmap_style(mk: Mk) -> Callable[..., Any]:
    """A pmap program migrated to shard_map: one leading row per device, `x[0]` inside, the device's index
    from axis_index, a pmean across devices."""
    def body(x: Any) -> Any:
        me = lax.axis_index("i").astype(x.dtype)
        local = x[0] * (me + 1.0)
        return (local - lax.pmean(local, "i"))[None]

    return mk(body, P("i"), P("i"))


def _callbacks(mk: Mk) -> Callable[..., Any]:
    """A host callback per device (jax.debug.print and a pure_callback of an invariant value), then a psum."""
    def body(x: Any, w: Any) -> Any:
        jax.debug.print("block {x}", x=x)
        scale = jax.pure_callback(lambda v: (np.asarray(v) * 2.0).astype(np.float32),
                                  jax.ShapeDtypeStruct(w.shape, w.dtype), w)
        return lax.psum(x * scale, "i")

    return mk(body, (P("i"), P()), P())


def _remat_policy(mk: Mk) -> Callable[..., Any]:
    """A checkpointed block with a saving policy (dots saved, the rest recomputed) around a psum_scatter."""
    def block(x: Any, w: Any) -> Any:
        return lax.psum_scatter(jnp.sin(x @ w), "i", tiled=True)

    policy = jax.checkpoint_policies.dots_with_no_batch_dims_saveable

    def body(x: Any, w: Any) -> Any:
        return jax.checkpoint(block, policy=policy)(x, w)

    return mk(body, (P(None, "i"), P("i")), P("i"))


def _keys(mk: Mk) -> Callable[..., Any]:
    """Random numbers inside the body: a typed key folded with the device index, dropout on each block."""
    def body(key: Any, x: Any) -> Any:
        key = jax.random.fold_in(key, lax.axis_index("i"))
        keep = jax.random.bernoulli(key, 0.75, x.shape)
        return lax.psum(jnp.sum(jnp.where(keep, x / 0.75, 0.0) * jax.random.normal(key, x.shape)), "i")

    return mk(body, (P(), P("i")), P())


PROGRAMS = (
    Program("psum and the variance rule", (("i", 4),), _psum_variance,
            lambda: (np.float32(0.5), _rng(1, 8)), (P(), P("i"))),
    Program("all_gather matmul", (("i", 4),), _gather_matmul, lambda: (_rng(2, 8, 4), _rng(3, 4, 8)),
            (P("i"), P(None, "i"))),
    Program("psum_scatter matmul", (("i", 4),), _scatter_matmul, lambda: (_rng(4, 8, 8), _rng(5, 8, 4)),
            (P(None, "i"), P("i"))),
    Program("ppermute ring", (("i", 4),), _ring, lambda: (_rng(6, 8, 2),), (P("i"),)),
    Program("all_to_all", (("i", 4),), _exchange, lambda: (_rng(7, 8, 8),), (P("i"),)),
    Program("collective matmul (all_gather side)", (("i", 4),), _collective_matmul,
            lambda: (_rng(8, 8, 8), _rng(9, 8, 4)), (P("i"), P(None, "i"))),
    Program("collective matmul (reduce_scatter side)", (("i", 4),), _reduce_scatter_matmul,
            lambda: (_rng(10, 8, 8), _rng(11, 8, 4)), (P(None, "i"), P("i"))),
    Program("data parallel loss", (("i", 4),), _data_parallel,
            lambda: (_rng(12, 4, 3), _rng(13, 3), _rng(14, 8, 4), _rng(15, 8, 3)), (P(), P(), P("i"), P("i"))),
    Program("tensor parallel loss", (("i", 4),), _tensor_parallel,
            lambda: (_rng(16, 2, 4), _rng(17, 4, 8), _rng(18, 8, 3)), (P(), P(None, "i"), P("i"))),
    Program("FSDP loss with checkpoint", (("i", 4),), _fsdp,
            lambda: ((_rng(19, 4, 4), _rng(20, 4, 4)), _rng(21, 8, 4)), ((P("i"), P("i")), P("i"))),
    Program("pipeline parallel loss", (("i", 4),), _pipeline, lambda: (_rng(22, 4, 3, 3), _rng(23, 5, 2, 3)),
            (P("i"), P())),
    Program("the design note's five transposes", (("i", 4),), _transposes,
            lambda: (_rng(24, 8), _rng(25, 2)), (P("i"), P())),
    Program("pmap migration", (("i", 4),), _pmap_style, lambda: (_rng(26, 4, 3),), (P("i"),)),
    Program("callbacks", (("i", 4),), _callbacks, lambda: (_rng(27, 8), _rng(28, 2)), (P("i"), P()),
            grad=False, vmap=False),
    Program("remat with a policy", (("i", 4),), _remat_policy, lambda: (_rng(29, 8, 8), _rng(30, 8, 4)),
            (P(None, "i"), P("i"))),
    Program("PRNG keys in the body", (("i", 4),), _keys, lambda: (jax.random.key(3), _rng(31, 8)), (P(), P("i")),
            vmap=False),
)

WAYS = ("mesh=", "set_mesh Auto", "set_mesh Explicit")


def _mesh(program: Program, explicit: bool) -> Any:
    names = tuple(n for n, _ in program.axes)
    kind = AxisType.Explicit if explicit else AxisType.Auto
    return jax.make_mesh(tuple(s for _, s in program.axes), names, axis_types=(kind,) * len(names))


def _forms(program: Program, f: Callable[..., Any]) -> dict[str, Callable[..., Any]]:
    first = lambda out: jax.tree.leaves(out)[0]
    forms = {"forward": jax.jit(f)}
    if program.grad:
        forms["grad"] = jax.jit(jax.grad(lambda *a: jnp.sum(first(f(*a))), argnums=_float_args(program)))
    if program.vmap:
        forms["vmap"] = jax.jit(jax.vmap(f))
    return forms


def _float_args(program: Program) -> tuple[int, ...]:
    return tuple(k for k, a in enumerate(program.args()) if not jax.dtypes.issubdtype(
        getattr(a, "dtype", np.float32), jax.dtypes.prng_key))


def _placed(args: tuple, specs: tuple, mesh: Any, batched: bool) -> tuple:
    """`args` on the Explicit mesh, each sharded by its spec (behind the batch axis when `batched`)."""
    flat_specs = jax.tree.leaves(specs, is_leaf=lambda s: isinstance(s, P))
    flat, tree = jax.tree.flatten(args)
    placed = [jax.device_put(a, NamedSharding(mesh, P(None, *s) if batched else s)) for a, s in zip(flat, flat_specs)]
    return jax.tree.unflatten(tree, placed)


def _batched(args: tuple) -> tuple:
    return jax.tree.map(lambda a: np.stack([a, a * 0.5 + 1.0]), args)


def run_one(program: Program, way: str) -> list[tuple[str, str, bool, bool, float, int, str]]:
    """(program, way, form, agrees, bit-identical, largest difference in ulps, runs, report) per form."""
    mesh = _mesh(program, way == "set_mesh Explicit")
    given = way == "mesh="
    mk = lambda body, in_specs, out_specs, **kw: jax.shard_map(
        body, in_specs=in_specs, out_specs=out_specs, **({"mesh": mesh} if given else {}), **kw)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with jax.set_mesh(mesh) if not given else _nothing():
            f = program.build(mk)
            for form, g in _forms(program, f).items():
                args = program.args() if form != "vmap" else _batched(program.args())
                if way == "set_mesh Explicit":
                    args = _placed(args, program.arg_specs, mesh, batched=form == "vmap")
                report = oracles.compare_jax(g, *args)
                ulps = max((_ulps(w, s) for w, s in zip(report.expected, jax.tree.leaves(
                    report.simulated.outputs))), default=0)
                rows.append((program.name, way, form, report.agrees, all(o.equal_bytes for o in report.outputs),
                             ulps, len(report.simulated.runs), str(report)))
    return rows


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _ulps(wanted: Any, found: Any) -> int:
    """The largest distance in units in the last place between two float arrays of one dtype (0 otherwise)."""
    wanted, found = np.asarray(wanted), np.asarray(found)
    if wanted.dtype != found.dtype or wanted.shape != found.shape or wanted.dtype.kind != "f" or not wanted.size:
        return 0
    width = {2: np.int16, 4: np.int32, 8: np.int64}[wanted.dtype.itemsize]
    a, b = wanted.view(width).astype(np.int64), found.view(width).astype(np.int64)
    a = np.where(a < 0, np.iinfo(width).min - a, a)
    b = np.where(b < 0, np.iinfo(width).min - b, b)
    return int(np.max(np.abs(a - b)))


def corpus() -> list[tuple]:
    """Every program in every way, each form."""
    rows = []
    for program in PROGRAMS:
        for way in WAYS:
            try:
                rows += run_one(program, way)
            except Exception as error:
                rows.append((program.name, way, "error", False, False, 0, 0,
                             f"{type(error).__name__}: {error}"[:2000]))
    return rows


def _moe(n: int, experts: int, k: int, capacity: int, check_vma: bool) -> Callable[..., Any]:
    """An expert-parallel MoE layer written as open-source ones write it: router logits with jitter from the
    RNG state passed in, top-k, tokens past an expert's capacity dropped, rows sorted by expert (argsort),
    counts all_gathered, offsets from cumulative sums, a ragged dispatch into an empty buffer, grouped matmuls
    (ragged_dot), a ragged combine back and the top-k weights applied. Experts are sharded over 'e'."""
    mesh = jax.make_mesh((n,), ("e",), axis_types=(AxisType.Auto,))
    local = experts // n

    def route(x: Any, router: Any, key: Any) -> tuple[Any, Any, Any]:
        key = jax.random.fold_in(key, lax.axis_index("e"))
        logits = x @ router + jax.random.uniform(key, (x.shape[0], experts), x.dtype, -1e-2, 1e-2)
        weight, chosen = lax.top_k(jax.nn.softmax(logits, axis=-1), k)
        flat = chosen.reshape(-1)
        rank = jnp.cumsum(jax.nn.one_hot(flat, experts, dtype=jnp.int32), axis=0)[jnp.arange(flat.size), flat] - 1
        kept = rank < capacity
        return jnp.where(kept, flat, experts), jnp.where(kept, weight.reshape(-1), 0.0), kept

    def layer(x: Any, router: Any, w_in: Any, w_out: Any, key: Any) -> Any:
        me = lax.axis_index("e")
        bucket, weight, _ = route(x, router, key)
        order = jnp.argsort(bucket, stable=True)                      # dropped rows sort last, never sent
        rows = x[order // k]
        counts = jnp.bincount(bucket, length=experts + 1)[:experts]   # an empty expert counts 0
        sizes = counts.reshape(n, local).sum(1)
        starts = jnp.cumsum(sizes) - sizes
        table = lax.all_gather(counts, "e")                           # table[s, x]: rows s sends expert x
        mine = lax.dynamic_slice_in_dim(table, me * local, local, axis=1)
        recv = mine.sum(1)
        per_dest = table.reshape(n, n, local).sum(2)
        places = (jnp.cumsum(per_dest, axis=0) - per_dest)[me]
        buffer = jnp.zeros((x.shape[0] * k * n, x.shape[1]), x.dtype)
        buffer = lax.pcast(buffer, "e", to="varying") if check_vma else buffer
        got = lax.ragged_all_to_all(rows, buffer, starts, sizes, places, recv, axis_name="e")
        src_starts = jnp.cumsum(recv) - recv
        row = jnp.arange(got.shape[0])
        src = jnp.clip(jnp.searchsorted(src_starts, row, side="right") - 1, 0, n - 1)
        expert = jnp.sum((row - src_starts[src])[:, None] >= jnp.cumsum(mine, axis=1)[src], axis=1)
        regroup = jnp.argsort(jnp.where(row < recv.sum(), expert, local), stable=True)
        group_sizes = mine.sum(0).astype(jnp.int32)
        hidden = jax.nn.gelu(lax.ragged_dot(got[regroup], w_in, group_sizes))
        done = jnp.zeros_like(got).at[regroup].set(lax.ragged_dot(hidden, w_out, group_sizes))
        firsts = lax.all_gather(starts, "e")[:, me]
        back = lax.ragged_all_to_all(done, jnp.zeros_like(rows), src_starts, recv, firsts, sizes, axis_name="e")
        combined = jnp.zeros_like(back).at[order].set(back) * weight[:, None]
        return combined.reshape(x.shape[0], k, -1).sum(1)

    return jax.shard_map(layer, mesh=mesh, in_specs=(P("e"), P(), P("e"), P("e"), P()), out_specs=P("e"),
                         check_vma=check_vma)


def moe() -> list[tuple]:
    """The MoE layer on 4 and 8 devices, check_vma on and off, forward and gradient: (devices, check_vma,
    form, simulation == JAX evaluated op by op (bit for bit), jitted JAX == JAX op by op, compare_jax within
    1e-4, diagnostics (kind, primitive, finding), messages per run)."""
    oracles.install_cpu_ragged_all_to_all()
    rows = []
    for n in (4, 8):
        experts, width, tokens = 2 * n, 4, 6
        rng = np.random.default_rng(n)
        router = rng.standard_normal((width, experts)).astype(np.float32)
        router[:, 1] -= 50.0                                          # expert 1 is never chosen
        args = (rng.standard_normal((tokens * n, width)).astype(np.float32), router,
                rng.standard_normal((experts, width, 8)).astype(np.float32),
                rng.standard_normal((experts, 8, width)).astype(np.float32), jax.random.key(0))
        for check_vma in (True, False):
            f = _moe(n, experts, k=2, capacity=3, check_vma=check_vma)
            loss = lambda *a, f=f: jnp.sum(f(*a) ** 2)
            for form, g in (("forward", f), ("grad", jax.grad(loss, argnums=(0, 1, 2, 3)))):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with jax.disable_jit():
                        eager = [np.asarray(x) for x in jax.tree.leaves(g(*args))]
                    jitted = [np.asarray(x) for x in jax.tree.leaves(jax.jit(g)(*args))]
                    report = oracles.compare_jax(jax.jit(g), *args, rtol=1e-4, atol=1e-4)
                found = [np.asarray(x) for x in jax.tree.leaves(report.simulated.outputs)]
                rows.append((n, check_vma, form, all(a.tobytes() == b.tobytes() for a, b in zip(eager, found)),
                             all(a.tobytes() == b.tobytes() for a, b in zip(eager, jitted)), report.agrees,
                             [(d.kind, d.primitive, d.finding) for d in report.simulated.diagnostics],
                             [len(r.trace.messages) for r in report.simulated.runs], str(report)))
    return rows


def operands() -> list[tuple[str, bool, str]]:
    """Keys and calls in and around bodies, each against jitted JAX bit for bit: a legacy key operand, typed
    keys sharded one per device, keys as an output, a nested jit holding a psum, a custom_jvp function, and
    an ordered io_callback."""
    mesh = jax.make_mesh((4,), ("i",), axis_types=(AxisType.Auto,))
    x = _rng(40, 8)

    def noisy(key: Any, v: Any) -> Any:
        return lax.psum(v * jax.random.uniform(jax.random.fold_in(key, lax.axis_index("i")), v.shape), "i")

    @jax.custom_jvp
    def soft(v: Any) -> Any:
        return jnp.log1p(jnp.exp(v))

    soft.defjvp(lambda p, t: (soft(p[0]), jax.nn.sigmoid(p[0]) * t[0]))
    inner = jax.jit(lambda v: lax.psum(v * 3.0, "i"))
    ordered = lambda v: jax.experimental.io_callback(lambda a: np.asarray(a) + 1, jax.ShapeDtypeStruct(
        v.shape, v.dtype), v, ordered=True)
    cases = {
        "legacy key": (jax.shard_map(noisy, mesh=mesh, in_specs=(P(), P("i")), out_specs=P()),
                       (jax.random.PRNGKey(2), x)),
        "typed keys, one per device": (jax.shard_map(lambda k, v: lax.psum(v * jax.random.uniform(k[0], v.shape),
                                                                           "i"), mesh=mesh,
                                                     in_specs=(P("i"), P("i")), out_specs=P()),
                                       (jax.random.split(jax.random.key(4), 4), x)),
        "keys out": (jax.shard_map(lambda k: jax.random.split(k[0], 2)[None], mesh=mesh, in_specs=P("i"),
                                   out_specs=P("i")), (jax.random.split(jax.random.key(5), 4),)),
        "nested jit": (jax.shard_map(lambda v: inner(v) + 1.0, mesh=mesh, in_specs=P("i"), out_specs=P()), (x,)),
        "custom_jvp under grad": (jax.grad(lambda v: jnp.sum(jax.shard_map(lambda u: lax.psum(soft(u), "i"),
                                                                           mesh=mesh, in_specs=P("i"),
                                                                           out_specs=P())(v))), (x,)),
        "ordered io_callback": (jax.shard_map(lambda v: lax.psum(ordered(v), "i"), mesh=mesh, in_specs=P("i"),
                                              out_specs=P()), (x,)),
    }
    rows = []
    for label, (f, args) in cases.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = oracles.compare_jax(jax.jit(f), *args)
        rows.append((label, report.agrees and all(o.equal_bytes for o in report.outputs), str(report)))
    return rows


def _caught(call: Callable[[], Any]) -> tuple[Any, list[str], str]:
    """(the call's result or None, the BridgeWarnings it gave, 'Kind: message' of its error or '')."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            result, error = call(), ""
        except Exception as failure:
            result, error = None, f"{type(failure).__name__}: {failure}"
    said = [str(w.message) for w in seen if w.category.__name__ == "BridgeWarning"]
    return result, said, error


def _diagnosed(f: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """JAX's answer, the bridge's (bit for bit?), its diagnostics and warnings, and the strict run's error."""
    want = np.asarray(jax.jit(f)(*args))
    simulated, said, _ = _caught(lambda: oracles.simulate_jax(f, *args))
    _, _, strict = _caught(lambda: oracles.simulate_jax(f, *args, strict=True))
    got = np.asarray(simulated.outputs)
    return {"same": want.dtype == got.dtype and want.tobytes() == got.tobytes(), "jax": want.tolist(),
            "diagnostics": [(d.kind, d.primitive, d.line, d.axes, d.devices, d.finding) for d in
                            simulated.diagnostics], "warnings": said, "strict": strict}


def diagnostics() -> dict[str, dict[str, Any]]:
    """Programs where JAX's own answer is wrong on some device, and a control where it is right: JAX's answer
    returned bit for bit, each problem as a Diagnostic and a BridgeWarning, strict=True an error."""
    two = jax.make_mesh((2,), ("i",), axis_types=(AxisType.Auto,))
    four = jax.make_mesh((4,), ("i",), axis_types=(AxisType.Auto,))
    keys = np.array([3, 1, 2, 0, 1, 2], np.float32)

    def chosen(x: Any) -> Any:  # FINDINGS.md 13: the branch depends on the device, the type does not
        return lax.cond(lax.axis_index("i") == 0, lambda: jnp.ones(2, x.dtype), lambda: jnp.zeros(2, x.dtype))

    def called(x: Any) -> Any:  # FINDINGS.md 15: a callback of a varying value typed invariant
        return jax.pure_callback(lambda v: np.asarray(v) * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    cases = {
        "argsort": (jax.shard_map(jnp.argsort, mesh=two, in_specs=P("i"), out_specs=P()), keys),
        "argsort of a replicated array": (jax.shard_map(jnp.argsort, mesh=two, in_specs=P(), out_specs=P()),
                                          keys),
        "unchecked replication": (jax.shard_map(lambda v: v * 2, mesh=four, in_specs=P("i"), out_specs=P(),
                                                check_vma=False), np.arange(8.0, dtype=np.float32)),
        "cond on the device index": (jax.shard_map(chosen, mesh=four, in_specs=P("i"), out_specs=P()),
                                     np.arange(8.0, dtype=np.float32)),
        "pure_callback of a varying value": (jax.shard_map(called, mesh=four, in_specs=P("i"), out_specs=P()),
                                             np.arange(8.0, dtype=np.float32)),
    }
    return {label: _diagnosed(f, x) for label, (f, x) in cases.items()}


def reach() -> dict[str, Any]:
    """What the bridge simulates and what it does not: a shard_map inside custom_linear_solve (which JAX runs
    and the bridge does not walk) named as not simulated, and the same shard_map alone simulated; a gradient
    with its forward and backward runs and their total; asynchronous collectives (psum_start, ...) against
    jitted JAX; a mutable reference in a body refused with its source line."""
    mesh = jax.make_mesh((4,), ("i",), axis_types=(AxisType.Auto,))
    inner = jax.shard_map(lambda v: v * 2.0 + lax.psum(v, "i") * 0.0, mesh=mesh, in_specs=P("i"),
                          out_specs=P("i"))
    x = np.arange(8.0, dtype=np.float32) + 1.0
    solved = oracles.compare_jax(jax.jit(lambda b: lax.custom_linear_solve(inner, b, lambda mv, b: b / 2.0)), x)
    alone = oracles.compare_jax(jax.jit(inner), x)
    loss = jax.shard_map(lambda v: lax.psum(jnp.sum(jnp.sin(v)), "i"), mesh=mesh, in_specs=P("i"), out_specs=P())
    graded = oracles.simulate_jax(jax.jit(jax.grad(loss)), x)
    def started(v: Any) -> tuple[Any, ...]:
        ring = [(k, (k + 1) % 4) for k in range(4)]
        gathered = parallel.all_gather_start(v, "i", tiled=True).done()
        return (parallel.psum_start(v, "i").done(), gathered, parallel.ppermute_start(v, "i", ring).done(),
                parallel.psum_scatter_start(gathered, "i", tiled=True).done(),
                parallel.all_to_all_start(gathered, "i", 0, 0, tiled=True).done())

    asynchronous = oracles.compare_jax(jax.jit(jax.shard_map(started, mesh=mesh, in_specs=P("i"), out_specs=(
        P(), P("i"), P("i"), P("i"), P("i")))), x)

    def mutated(v: Any) -> Any:
        ref = jax.new_ref(v)
        ref[...] = ref[...] * 2.0
        return lax.psum(ref[...], "i")

    _, _, refused = _caught(lambda: oracles.simulate_jax(jax.shard_map(mutated, mesh=mesh, in_specs=P("i"),
                                                                       out_specs=P()), x))
    return {"solved agrees": solved.agrees, "solved": str(solved), "unsimulated": solved.simulated.unsimulated,
            "alone agrees": alone.agrees, "alone runs": len(alone.simulated.runs),
            "grad": str(graded), "grad messages": [len(r.trace.messages) for r in graded.runs],
            "grad total": graded.messages, "grad time": (graded.time_s, [r.end_time_s for r in graded.runs]),
            "async": (asynchronous.agrees and all(o.equal_bytes for o in asynchronous.outputs), str(asynchronous)),
            "refused": refused}


def explicit_types() -> dict[str, Any]:
    """An Explicit mesh's unreduced and reduced types: a shard_map returning P(unreduced={'i'}) compared per
    device with JAX's shards, a reshard of it to a replicated value (the all-reduce JAX runs there, simulated
    as a run of its own), and a psum inside the body of a value cast to unreduced."""
    mesh = jax.make_mesh((4,), ("i",), axis_types=(AxisType.Explicit,))
    x = jax.device_put(np.arange(8.0, dtype=np.float32) * 0.3, NamedSharding(mesh, P("i")))
    found = {}
    with jax.set_mesh(mesh):
        partial = jax.shard_map(lambda v: jnp.sin(v), in_specs=P("i"), out_specs=P(unreduced={"i"}))
        for label, f in (("unreduced output", jax.jit(partial)),
                         ("reshard of it", jax.jit(lambda v: jax.sharding.reshard(partial(v), P())))):
            report = oracles.compare_jax(f, x)
            found[label] = (report.agrees, all(o.equal_bytes for o in report.outputs), len(report.simulated.runs),
                            str(report))
    return found


def primitives() -> dict[str, tuple[str, str]]:
    """The bridge's status of every primitive this JAX registers."""
    from oracles._bridge_primitives import table

    return table()


def fusion() -> dict[str, Any]:
    """A plain-JAX reproducer of the one kind of difference the corpus shows: XLA:CPU contracts `a * b - c` in
    one jitted module into a fused multiply-add (one rounding), where op-by-op evaluation rounds twice. Returns
    how many of 4096 random elements differ and the largest difference in ulps."""
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(4096).astype(np.float32) for _ in range(3))
    fused = np.asarray(jax.jit(lambda a, b, c: a * b - c)(a, b, c))
    stepwise = np.asarray(jax.jit(lambda p, c: p - c)(np.asarray(jax.jit(lambda a, b: a * b)(a, b)), c))
    exact = (a.astype(np.float64) * b - c).astype(np.float32)
    return {"differ": int((fused != stepwise).sum()), "ulps": _ulps(fused, stepwise),
            "fused is the single rounding": bool(np.array_equal(fused, exact))}


BATCHES: dict[str, Callable[[], Any]] = {"corpus": corpus, "diagnostics": diagnostics, "reach": reach,
                                         "explicit_types": explicit_types, "primitives": primitives,
                                         "fusion": fusion, "moe": moe, "operands": operands}


def main(names: list[str]) -> None:
    """Run the named batches; pickle {name: ("ok", result) or ("error", traceback)} to stdout (what the programs
    print, jax.debug.print's lines among it, goes to stderr)."""
    import contextlib

    results = {}
    with contextlib.redirect_stdout(sys.stderr):
        for name in names:
            try:
                results[name] = ("ok", BATCHES[name]())
            except Exception:
                results[name] = ("error", traceback.format_exc())
    sys.stdout.buffer.write(pickle.dumps(results))


def write_primitives(path: str) -> None:
    """Write the snapshot `tests/bridge_primitives.txt` reads: one 'name status' line per primitive."""
    lines = ["# Every primitive JAX 0.10.2 registers and whether the bridge runs it inside a shard_map body",
             "# (oracles._bridge_primitives.support): collective, walked, local or refused. Regenerate with",
             "# `python tests/bridge_tutorial.py --primitives` after a JAX upgrade and review the changes."]
    lines += [f"{name} {status}" for name, (status, _) in primitives().items()]
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--primitives"]:
        write_primitives(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bridge_primitives.txt"))
    else:
        main(sys.argv[1:])
