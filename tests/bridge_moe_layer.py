"""The expert-parallel MoE layer as open-source ones write it (`moe_layer`, its arguments `moe_args`), and its
batches in the worker of `bridge_tutorial.py`: float32 on 4 and 8 devices against jitted JAX (`moe`), and
dispatching float8 (`moe_fp8`). `benchmarks/bridge.py` times the same layer."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from bridge_checks import run_differences, same_bits, ulps_apart
from jax import lax
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import oracles


def moe_layer(n: int, experts: int, k: int, capacity: int, check_vma: bool, dispatch: Any = None
              ) -> Callable[..., Any]:
    """An expert-parallel MoE layer written as open-source ones write it: router logits with jitter from the
    RNG state passed in, top-k, tokens past an expert's capacity dropped, rows sorted by expert (argsort),
    counts all_gathered, offsets from cumulative sums, a ragged dispatch into an empty buffer, grouped matmuls
    (ragged_dot), a ragged combine back and the top-k weights applied. Experts are sharded over 'e'. With a
    float8 `dispatch` dtype the rows travel quantised, as fp8 MoE layers send them: each row divided by its
    own scale (its largest magnitude over the dtype's largest finite), cast to `dispatch`, sent with its
    scale (a second ragged dispatch, in float32) and multiplied back at the expert."""
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
        if dispatch is None:
            got = lax.ragged_all_to_all(rows, buffer, starts, sizes, places, recv, axis_name="e")
        else:
            scale = jnp.max(jnp.abs(rows), axis=1, keepdims=True) / float(jnp.finfo(dispatch).max) + 1e-12
            sent = lax.ragged_all_to_all((rows / scale).astype(dispatch), buffer.astype(dispatch), starts, sizes,
                                         places, recv, axis_name="e")
            scales = lax.ragged_all_to_all(scale, buffer[:, :1], starts, sizes, places, recv, axis_name="e")
            got = sent.astype(x.dtype) * scales
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


def moe_args(n: int, key: Any) -> tuple:
    """The MoE layer's arguments on n devices (2n experts, 6 tokens of 4 features per device, 8 hidden
    features): tokens, router, the experts' two weights (drawn from a generator seeded n) and `key`."""
    experts, width, tokens = 2 * n, 4, 6
    rng = np.random.default_rng(n)
    return (rng.standard_normal((tokens * n, width)).astype(np.float32),
            rng.standard_normal((width, experts)).astype(np.float32),
            rng.standard_normal((experts, width, 8)).astype(np.float32),
            rng.standard_normal((experts, 8, width)).astype(np.float32), key)


def moe() -> list[tuple]:
    """The MoE layer on 4 and 8 devices, check_vma on and off, forward and gradient: (devices, check_vma,
    form, simulation == jitted JAX bit for bit, where the simulation with compiled=False differs from it
    (`run_differences`; 4 devices forward, else None: each equation compiled on its own makes the gradient
    slow, and the corpus compares gradients), simulation with compiled=False == JAX evaluated op by op bit
    for bit (4 devices, check_vma=False, forward: JAX's eager evaluation of the layer takes seconds; else
    None), diagnostics (kind, primitive, finding), messages per run, compare_jax's report)."""
    oracles.install_cpu_ragged_all_to_all()
    rows = []
    for n in (4, 8):
        args = moe_args(n, jax.random.key(0))
        args[1][:, 1] -= 50.0                                         # expert 1 is never chosen
        for check_vma in (True, False):
            f = moe_layer(n, 2 * n, k=2, capacity=3, check_vma=check_vma)
            loss = lambda *a, f=f: jnp.sum(f(*a) ** 2)
            for form, g in (("forward", f), ("grad", jax.grad(loss, argnums=(0, 1, 2, 3)))):
                differences, eager = None, None
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    report = oracles.compare_jax(jax.jit(g), *args)
                    if n == 4 and form == "forward":
                        stepwise = oracles.simulate_jax(jax.jit(g), *args, compiled=False)
                        differences = run_differences(report.simulated, stepwise)
                    if n == 4 and not check_vma and form == "forward":
                        with jax.disable_jit():
                            eager = same_bits(jax.tree.leaves(g(*args)), jax.tree.leaves(stepwise.outputs))
                found = report.simulated
                rows.append((n, check_vma, form, report.agrees and all(o.equal_bytes for o in report.outputs),
                             differences, eager, [(d.kind, d.primitive, d.finding) for d in found.diagnostics],
                             [len(r.trace.messages) for r in found.runs], str(report)))
    return rows


def moe_fp8() -> list[tuple]:
    """The MoE layer dispatching its rows as float8_e4m3fn on 4 and 8 devices (check_vma off), forward and
    gradient: (devices, form, simulation == jitted JAX bit for bit, simulation == the layer cut at its
    collectives in plain JAX (`bridge_cut.cut`) bit for bit (the gradient; None forward), which outputs jitted
    JAX differs in from the cut program (forward: from the simulation), the largest difference there in ulps,
    whether device 0's program moves float8 rows through a ragged_all_to_all)."""
    from bridge_cut import cut

    oracles.install_cpu_ragged_all_to_all()
    rows = []
    for n in (4, 8):
        args = moe_args(n, jax.random.PRNGKey(0))
        f = moe_layer(n, 2 * n, k=2, capacity=3, check_vma=False, dispatch=jnp.float8_e4m3fn)
        loss = lambda *a, f=f: jnp.sum(f(*a) ** 2)
        for form, g in (("forward", jax.jit(f)), ("grad", jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3))))):
            run = oracles.simulate_jax(g, *args)
            simulated, jitted = jax.tree.leaves(run.outputs), [np.asarray(x) for x in jax.tree.leaves(g(*args))]
            # the forward equals jitted JAX: the cut program is made for the gradient, where they differ
            wanted = simulated if form == "forward" else [np.asarray(x) for x in cut(g, *args)]
            differing = [k for k, (a, b) in enumerate(zip(wanted, jitted)) if not same_bits([a], [b])]
            ulps = max((ulps_apart(a, b) for k in differing for a, b in zip(jitted[k].ravel(), wanted[k].ravel())
                        if a != b), default=0)
            program = str(run.runs[0].program(0))
            moved = any("ragged_all_to_all" in line and "f8_e4m3fn" in line for line in program.splitlines())
            as_cut = same_bits(wanted, simulated) if form == "grad" else None
            rows.append((n, form, same_bits(jitted, simulated), as_cut, differing, ulps, moved))
    return rows
