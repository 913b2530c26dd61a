"""The bridge's reach beyond the tutorial corpus, run in the worker of `bridge_tutorial.py`: keys and calls,
JAX's answer with the truth beside it, what is and is not simulated, unreduced types, every primitive's
status, the plain-JAX reproducer of XLA's multiply-add contraction and programs cut at their collectives.
Each function is a batch of `bridge_tutorial.BATCHES` (the MoE layer's are in `bridge_moe_layer.py`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import jax.experimental
import jax.numpy as jnp
import numpy as np
from bridge_checks import rng, run_differences, same_bits, ulps_apart
from bridge_moe_layer import moe_layer
from jax import lax
from jax._src.lax import parallel
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import oracles


def operands() -> list[tuple[str, bool, str]]:
    """Keys and calls in and around bodies, each against jitted JAX bit for bit: a legacy key operand, typed
    keys sharded one per device, keys as an output, a nested jit holding a psum, a custom_jvp function, and
    an ordered io_callback."""
    mesh = jax.make_mesh((4,), ("i",), axis_types=(AxisType.Auto,))
    x = rng(40, 8)

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
        # FINDINGS.md 30: the bits of a varying key typed invariant
        "rng_bit_generator of a varying key": (jax.shard_map(lambda k: lax.rng_bit_generator(k[0], (2, 3))[1],
                                                             mesh=four, in_specs=P("i"), out_specs=P()),
                                               np.arange(16, dtype=np.uint32).reshape(4, 4)),
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


def _pmap_migration() -> tuple[Callable[..., Any], Callable[..., Any], Any, np.ndarray]:
    """The corpus's pmap migration under vmap, `x[0] * (me + 1) - pmean(x[0] * (me + 1))` on 4 devices: how a
    body becomes a jitted vmapped shard_map (`shard`), the scaled value (`scaled`), the program and its input."""
    mesh = jax.make_mesh((4,), ("i",), axis_types=(AxisType.Auto,))
    shard = lambda body: jax.jit(jax.vmap(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))))
    scaled = lambda v: v[0] * (lax.axis_index("i").astype(v.dtype) + 1.0)
    whole = shard(lambda v: (scaled(v) - lax.pmean(scaled(v), "i"))[None])
    return shard, scaled, whole, np.stack([rng(26, 4, 3), rng(26, 4, 3) * 0.5 + 1.0])


def fusion() -> dict[str, Any]:
    """A plain-JAX reproducer of the one difference the corpus keeps ('pmap migration' under vmap): XLA
    compiles the jitted program as one module and recomputes `x[0] * (me + 1)` after the all-reduce, inside
    the fusion that subtracts the mean, contracting the multiply and the subtraction into one fused
    multiply-add (one rounding); the same program cut at the collective (each side jitted apart, as the
    bridge compiles it) rounds the product first. Returns how many elements differ, the largest difference in
    ulps, whether jitted JAX is the single rounding of the exact value and the cut program the double one,
    and whether simulate_jax equals the cut program bit for bit."""
    shard, scaled, whole, x = _pmap_migration()
    local = shard(lambda v: scaled(v)[None])(x)
    mean = shard(lambda v: lax.pmean(v[0], "i")[None])(local)
    cut = np.asarray(jax.jit(lambda a, b: a - b)(local, mean))
    fused = np.asarray(whole(x))
    factor = (np.arange(4, dtype=np.float64) + 1.0)[None, :, None]
    single = (x.astype(np.float64) * factor - np.asarray(mean, np.float64)).astype(np.float32)
    double = (np.asarray(local, np.float64) - np.asarray(mean, np.float64)).astype(np.float32)
    simulated = np.asarray(oracles.simulate_jax(whole, x).outputs)
    return {"differ": int((fused != cut).sum()), "ulps": ulps_apart(fused, cut),
            "jitted is the single rounding": bool(np.array_equal(fused, single)),
            "cut is the double rounding": bool(np.array_equal(cut, double)),
            "bridge is the cut program": same_bits([cut], [simulated])}


def _gelu_mlp() -> tuple[Any, tuple]:
    """A tensor-parallel MLP with JAX's tanh-approximated gelu on a 2 x 4 mesh: its gradient in w1 and w2
    (jitted) and (w1, w2)."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("d", "t"))

    def mlp(x: Any, w1: Any, w2: Any) -> Any:
        return jnp.mean(lax.pmean(lax.psum(jax.nn.gelu(x @ w1) @ w2, "t"), "d") ** 2)

    loss = jax.shard_map(mlp, mesh=mesh, in_specs=(P("d"), P(None, "t"), P("t")), out_specs=P())
    x = rng(70, 8, 16)
    return (lambda a, b: loss(x, a, b)), (rng(71, 16, 32), rng(72, 32, 16))


def fusion_across_runs() -> dict[str, Any]:
    """A plain-JAX reproducer of the other known difference: the gradient of the tensor-parallel gelu MLP
    (`_gelu_mlp`). JAX's partial evaluation splits its shard_map into a forward one, which keeps the gelu's
    pieces as residuals, and a backward one that multiplies and adds them; the bridge simulates the two as
    two runs. Jitted whole, both are one XLA module, where XLA recomputes residuals inside the backward's
    fusions, past the forward's psum and pmean, and contracts their multiplies and adds differently. The same
    gradient cut between forward and backward (`jax.vjp` jitted, then its pullback jitted: the residuals
    handed over as arrays, as between the bridge's runs) is what the bridge computes, bit for bit. Returns how
    many elements of dw1 differ between jitted JAX and the cut program, the median and largest difference in
    ulps and the largest relative to the largest |dw1|, whether simulate_jax equals the cut program, and
    whether dw2 is bit-identical everywhere."""
    loss, (w1, w2) = _gelu_mlp()
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    whole = [np.asarray(g) for g in grad(w1, w2)]
    _, pullback = jax.jit(lambda a, b: jax.vjp(loss, a, b))(w1, w2)
    cut = [np.asarray(g) for g in jax.jit(lambda pb: pb(jnp.float32(1.0)))(pullback)]
    simulated = [np.asarray(g) for g in oracles.simulate_jax(grad, w1, w2).outputs]
    differing = np.argwhere(whole[0] != cut[0])
    ulps = [ulps_apart(whole[0][i, j], cut[0][i, j]) for i, j in differing]
    largest = float(np.max(np.abs(whole[0].astype(np.float64) - cut[0]))) / float(np.max(np.abs(whole[0])))
    return {"differ": len(differing), "elements": whole[0].size, "median ulps": float(np.median(ulps or [0])),
            "ulps": max(ulps, default=0), "relative to the largest": largest,
            "bridge is the cut program": same_bits(cut, simulated), "dw2 identical": same_bits(whole[1:], cut[1:])}


def cut_programs() -> dict[str, dict[str, bool]]:
    """Programs whose every collective sits at the top of its shard_map body, each run three ways against
    the same program cut at its collectives in plain JAX (`tests/bridge_cut.py`: each run of local work and
    each collective a shard_map of its own): `simulate_jax`, jitted JAX, and the bridge's op-by-op
    evaluation (`compiled=False`). Four of them are where jitted JAX fuses across a collective or across a
    gradient's forward and backward shard_maps (the pmap migration under vmap, a tensor-parallel gelu MLP's
    gradient, a layer norm whose statistics are pmeans, under grad, and the MoE layer's gradient with 8
    features, whose expert weights' gradient XLA computes from the forward's gelu recomputed in the backward's
    fusion); the others agree all three ways. (The MoE takes a raw key: the cut passes arrays, not key types.)"""
    from bridge_cut import cut

    rows = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("d", "t"))
    ring = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("i",))
    *_, pmap_vmap, pmap_x = _pmap_migration()

    def norm(x: Any, g: Any) -> Any:
        mu = lax.pmean(jnp.mean(x, -1, keepdims=True), "t")
        var = lax.pmean(jnp.mean((x - mu) ** 2, -1, keepdims=True), "t")
        return (x - mu) * lax.rsqrt(var + 1e-5) * g

    def attention(x: Any, wq: Any, wk: Any, wv: Any, wo: Any) -> Any:
        p = jax.nn.softmax(jnp.einsum("qd,kd->qk", x @ wq, x @ wk) / 4.0, axis=-1)
        return lax.psum((p @ (x @ wv)) @ wo, "t")

    def ulysses(q: Any) -> Any:
        h = lax.all_to_all(q, "i", split_axis=1, concat_axis=0, tiled=True)
        o = jnp.einsum("hst,thd->shd", jax.nn.softmax(jnp.einsum("shd,thd->hst", h, h), -1), h)
        return lax.all_to_all(o, "i", split_axis=0, concat_axis=1, tiled=True)

    mlp_loss, mlp_weights = _gelu_mlp()
    normed = jax.shard_map(norm, mesh=rows, in_specs=(P("d", "t"), P("t")), out_specs=P("d", "t"))
    attended = jax.shard_map(attention, mesh=rows, in_specs=(P("d"),) + (P(None, "t"),) * 3 + (P("t"),),
                             out_specs=P("d"))
    exchanged = jax.shard_map(ulysses, mesh=ring, in_specs=P("i"), out_specs=P("i"))
    x16 = rng(70, 8, 16)
    oracles.install_cpu_ragged_all_to_all()
    moe_wide = moe_layer(4, 8, k=2, capacity=3, check_vma=False)  # 8 features: XLA fuses the gelu across runs
    moe_args = (rng(81, 24, 8), rng(82, 8, 8), rng(83, 8, 8, 8), rng(84, 8, 8, 8), jax.random.PRNGKey(0))
    programs = {
        "pmap migration under vmap": (pmap_vmap, (pmap_x,)),
        "gelu MLP gradient": (jax.jit(jax.grad(mlp_loss, argnums=(0, 1))), mlp_weights),
        "layer norm gradient": (jax.jit(jax.grad(lambda x, g: jnp.sum(normed(x, g) ** 3), argnums=(0, 1))),
                                (rng(73, 8, 32), rng(74, 32))),
        "attention gradient": (jax.jit(jax.grad(lambda *a: jnp.sum(attended(*a) ** 2), argnums=(1, 2, 3, 4))),
                               (x16, *(rng(75 + k, 16, 16) for k in range(4)))),
        "all_to_all attention gradient": (jax.jit(jax.grad(lambda q: jnp.sum(exchanged(q) ** 2))),
                                          (rng(79, 16, 8, 4),)),
        "MoE layer gradient, width 8": (jax.jit(jax.grad(lambda *a: jnp.sum(moe_wide(*a) ** 2), argnums=(0, 1, 2, 3))),
                                        moe_args),
        "psum_scatter then all_gather": (jax.jit(jax.shard_map(
            lambda v: lax.all_gather(lax.psum_scatter(v * 1.5, "i", tiled=True), "i", tiled=True),
            mesh=ring, in_specs=P(), out_specs=P(), check_vma=False)), (rng(80, 16),)),
    }
    found = {}
    for name, (f, args) in programs.items():
        wanted = cut(f, *args)
        simulated = jax.tree.leaves(oracles.simulate_jax(f, *args).outputs)
        stepwise = jax.tree.leaves(oracles.simulate_jax(f, *args, compiled=False).outputs)
        found[name] = {"bridge": same_bits(wanted, simulated), "jitted": same_bits(wanted, jax.tree.leaves(f(*args))),
                       "stepwise": same_bits(wanted, stepwise)}
    return found


def segments() -> dict[str, Any]:
    """The comparison of two simulations, made to fail: one psum program on 8 and on 16 rows."""
    mesh = jax.make_mesh((4,), ("i",), axis_types=(AxisType.Auto,))
    f = jax.jit(jax.shard_map(lambda v: lax.psum(v * 2.0, "i"), mesh=mesh, in_specs=P("i"), out_specs=P()))
    small, large = (oracles.simulate_jax(f, rng(50, rows)) for rows in (8, 16))
    return {"different programs": run_differences(small, large)}
