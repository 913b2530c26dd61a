"""The programs of the tutorial corpus (`bridge_tutorial.py`), in the style of JAX's shard_map tutorial and design
notes: each a body with its specs, built by `Program.build(mk)` where `mk(body, in_specs, out_specs)` stands in
for `jax.shard_map`, with its arguments and their specs at the top level."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from bridge_checks import rng
from jax import lax
from jax._src.lax import parallel
from jax.sharding import PartitionSpec as P

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


def collective_matmul(mk: Mk) -> Callable[..., Any]:
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


def _ring_attention(mk: Mk) -> Callable[..., Any]:
    """Ring attention: each device holds a block of the sequence's queries, keys and values; the key and value
    blocks go round the ring by ppermute inside a scan while each device folds them into its output with an
    online softmax (a running maximum and normaliser, rescaled at every block)."""
    size = 4
    perm = [(k, (k + 1) % size) for k in range(size)]

    def body(q: Any, k: Any, v: Any) -> Any:
        def step(carry: tuple, _: Any) -> tuple[tuple, None]:
            out, top, norm, k, v = carry
            scores = q @ k.T * q.shape[-1] ** -0.5
            new_top = jnp.maximum(top, scores.max(-1))
            weights = jnp.exp(scores - new_top[:, None])
            fade = jnp.exp(top - new_top)
            return (out * fade[:, None] + weights @ v, new_top, norm * fade + weights.sum(-1),
                    lax.ppermute(k, "i", perm), lax.ppermute(v, "i", perm)), None

        start = (jnp.zeros_like(q), jnp.full_like(q[:, 0], -jnp.inf), jnp.zeros_like(q[:, 0]), k, v)
        (out, _, norm, _, _), _ = lax.scan(step, start, None, length=size)
        return out / norm[:, None]

    return mk(body, (P("i"),) * 3, P("i"))


def _gshard_moe(mk: Mk) -> Callable[..., Any]:
    """A GShard-style mixture of experts on a 2 x 4 mesh: tokens split over ('data', 'expert'), experts over
    'expert'. Each device routes its tokens to their top expert with a capacity of 3 (later tokens dropped),
    dispatches them into per-expert buffers by one-hot masks, and the buffers cross the 'expert' axis by
    all_to_all to the experts' devices and back; the outputs are combined weighted by the gate."""
    capacity = 3

    def body(x: Any, gate_w: Any, w1: Any, w2: Any) -> Any:
        experts = lax.axis_size("expert") * w1.shape[0]
        gate = jax.nn.softmax(x @ gate_w, -1)
        chosen = jax.nn.one_hot(jnp.argmax(gate, -1), experts, dtype=jnp.int32)
        slot = jnp.cumsum(chosen, 0) * chosen - 1  # the token's place in its expert's buffer, -1 elsewhere
        dispatch = jax.nn.one_hot(jnp.where(slot < capacity, slot, -1), capacity, dtype=x.dtype)  # [t, E, C]
        buffers = lax.all_to_all(jnp.einsum("tec,td->ecd", dispatch, x), "expert", 0, 1, tiled=True)
        hidden = jax.nn.gelu(jnp.einsum("ecd,edf->ecf", buffers, w1))
        back = lax.all_to_all(jnp.einsum("ecf,efd->ecd", hidden, w2), "expert", 1, 0, tiled=True)
        return jnp.einsum("tec,ecd->td", dispatch * gate[..., None], back)

    return mk(body, (P(("data", "expert")), P(), P("expert"), P("expert")), P(("data", "expert")))


PROGRAMS = (
    Program("psum and the variance rule", (("i", 4),), _psum_variance,
            lambda: (np.float32(0.5), rng(1, 8)), (P(), P("i"))),
    Program("all_gather matmul", (("i", 4),), _gather_matmul, lambda: (rng(2, 8, 4), rng(3, 4, 8)),
            (P("i"), P(None, "i"))),
    Program("psum_scatter matmul", (("i", 4),), _scatter_matmul, lambda: (rng(4, 8, 8), rng(5, 8, 4)),
            (P(None, "i"), P("i"))),
    Program("ppermute ring", (("i", 4),), _ring, lambda: (rng(6, 8, 2),), (P("i"),)),
    Program("all_to_all", (("i", 4),), _exchange, lambda: (rng(7, 8, 8),), (P("i"),)),
    Program("collective matmul (all_gather side)", (("i", 4),), collective_matmul,
            lambda: (rng(8, 8, 8), rng(9, 8, 4)), (P("i"), P(None, "i"))),
    Program("collective matmul (reduce_scatter side)", (("i", 4),), _reduce_scatter_matmul,
            lambda: (rng(10, 8, 8), rng(11, 8, 4)), (P(None, "i"), P("i"))),
    Program("data parallel loss", (("i", 4),), _data_parallel,
            lambda: (rng(12, 4, 3), rng(13, 3), rng(14, 8, 4), rng(15, 8, 3)), (P(), P(), P("i"), P("i"))),
    Program("tensor parallel loss", (("i", 4),), _tensor_parallel,
            lambda: (rng(16, 2, 4), rng(17, 4, 8), rng(18, 8, 3)), (P(), P(None, "i"), P("i"))),
    Program("FSDP loss with checkpoint", (("i", 4),), _fsdp,
            lambda: ((rng(19, 4, 4), rng(20, 4, 4)), rng(21, 8, 4)), ((P("i"), P("i")), P("i"))),
    Program("pipeline parallel loss", (("i", 4),), _pipeline, lambda: (rng(22, 4, 3, 3), rng(23, 5, 2, 3)),
            (P("i"), P())),
    Program("the design note's five transposes", (("i", 4),), _transposes,
            lambda: (rng(24, 8), rng(25, 2)), (P("i"), P())),
    Program("pmap migration", (("i", 4),), _pmap_style, lambda: (rng(26, 4, 3),), (P("i"),)),
    Program("callbacks", (("i", 4),), _callbacks, lambda: (rng(27, 8), rng(28, 2)), (P("i"), P()),
            grad=False, vmap=False),
    Program("remat with a policy", (("i", 4),), _remat_policy, lambda: (rng(29, 8, 8), rng(30, 8, 4)),
            (P(None, "i"), P("i"))),
    Program("PRNG keys in the body", (("i", 4),), _keys, lambda: (jax.random.key(3), rng(31, 8)), (P(), P("i")),
            vmap=False),
    Program("ring attention", (("i", 4),), _ring_attention, lambda: (rng(32, 16, 8), rng(33, 16, 8), rng(34, 16, 8)),
            (P("i"),) * 3),
    Program("GShard mixture of experts", (("data", 2), ("expert", 4)), _gshard_moe,
            lambda: (rng(35, 48, 8), rng(36, 8, 8), rng(37, 8, 8, 16) * 0.3, rng(38, 8, 16, 8) * 0.3),
            (P(("data", "expert")), P(), P("expert"), P("expert"))),
)
