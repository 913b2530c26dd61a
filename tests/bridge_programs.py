"""The bridge's test cases, run in a worker process with 8 CPU devices.

`python tests/bridge_programs.py NAME...` runs each named batch (`BATCHES`) and writes a pickled dict
NAME -> result to stdout; `test_bridge.py` starts it with XLA_FLAGS set, as a JAX user would. A batch of
generated programs (`bridge_generated.py`) returns one row per program: (collective, label, agrees,
report); the other batches are the code cells of docs/reference/jax-bridge.md, control flow, transformations,
MoE layers (`bridge_moe_programs.py`), nested shard_maps (`bridge_nested_programs.py`), bad inputs and a
deliberately wrong bridge (`bridge_errors.py`).
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from collections.abc import Callable
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import jax.numpy as jnp
import numpy as np
from bridge_errors import error, errors, mutation
from bridge_generated import batch
from bridge_io_programs import canonical, comparison, laid_out
from bridge_moe_programs import moe, moe_ragged
from bridge_nested_programs import nested
from bridge_vmap_programs import vmap_axes
from jax import lax
from jax.sharding import PartitionSpec as P

import oracles


def bridge_page() -> list[str]:
    """Run the code cells of the bridge's page (docs/reference/jax-bridge.md) in one namespace, as its kernel
    does; return what each printed."""
    import contextlib
    import io

    from docs_pages import code_cells, page

    namespace: dict[str, Any] = {}
    printed = []
    for code in code_cells(page("reference/jax-bridge")):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/reference/jax-bridge.md", "exec"), namespace)
        printed.append(out.getvalue())
    return printed


def transforms() -> list[tuple[str, bool, str]]:
    """jax.jvp, jax.vjp and jax.linear_transpose of a program with all_gather, psum_scatter and psum, vmap
    inside the shard_map body, and the grad of a checkpointed body with custom_jvp (relu) and custom_vjp
    functions: JAX's outputs bit for bit."""
    mesh = oracles.cpu_mesh({"i": 2, "j": 2})

    def body(x: Any) -> Any:
        gathered = lax.all_gather(x, "i", tiled=True)
        return lax.psum_scatter(gathered * 2.0, "i", tiled=True) + lax.psum(x, "j") * 0.5

    f = jax.shard_map(body, mesh=mesh, in_specs=P(("i", "j")), out_specs=P(("i", "j")))
    inner = jax.shard_map(jax.vmap(body, in_axes=1, out_axes=1), mesh=mesh, in_specs=P(("i", "j")),
                          out_specs=P(("i", "j")))
    x = np.random.default_rng(5).standard_normal(8).astype(np.float32)
    t = np.arange(8.0, dtype=np.float32)

    @jax.custom_vjp
    def clipped(v: Any) -> Any:
        return v

    clipped.defvjp(lambda v: (v, None), lambda _, g: (jnp.clip(g, -1.0, 1.0),))
    wrapped = jax.shard_map(lambda v, u: lax.psum(jnp.sum(clipped(jax.nn.relu(v)) * u), ("i", "j")), mesh=mesh,
                            in_specs=P(("i", "j")), out_specs=P())
    cases = {
        "jvp": jax.jit(lambda v, u: jax.jvp(f, (v,), (u,))),
        "vjp": jax.jit(lambda v, u: jax.vjp(f, v)[1](u)),
        "linear_transpose": jax.jit(lambda v, u: jax.linear_transpose(f, v)(u)),
        "vmap inside shard_map": jax.jit(lambda v, u: inner(jnp.stack([v, u], axis=1))),
        "custom_jvp, custom_vjp, checkpoint": jax.jit(jax.grad(jax.checkpoint(wrapped))),
    }
    rows = []
    for label, g in cases.items():
        report = oracles.compare_jax(g, x, t)
        rows.append((label, report.agrees, str(report)))
    return rows


def _batching_cases() -> list[tuple[str, Callable[..., Any], Callable[..., Any], dict, tuple[int, ...], int]]:
    """(label, jax.lax function, meshsim collective, params, unbatched local shape, batch axis)."""
    import collectives as C

    cases = []
    for tiled in (False, True):
        for axis in (0, 1):
            for d in (0, 1, 2):
                params = {"axis_name": "i", "axis": axis, "tiled": tiled}
                cases.append((f"all_gather {params} batch={d}", lax.all_gather, C.all_gather, params, (4, 2), d))
                if tiled or d <= axis:  # JAX's rule fails otherwise (pinned in the error table)
                    sd = {"axis_name": "i", "scatter_dimension": axis, "tiled": tiled}
                    shape = (4, 8) if tiled else ((4, 2) if axis == 0 else (2, 4))
                    cases.append((f"psum_scatter {sd} batch={d}", lax.psum_scatter, C.psum_scatter, sd, shape, d))
    for split, concat in ((0, 0), (0, 1), (1, 0)):
        for tiled in (False, True):
            for d in (0, 1, 2):
                params = {"axis_name": "i", "split_axis": split, "concat_axis": concat, "tiled": tiled}
                cases.append((f"all_to_all {params} batch={d}", lax.all_to_all, C.all_to_all, params, (4, 4), d))
    for d in (0, 1):
        cases.append((f"psum batch={d}", lax.psum, C.psum, {"axis_name": "i"}, (3, 2), d))
        cases.append((f"pmin batch={d}", lax.pmin, C.pmin, {"axis_name": "i"}, (3, 2), d))
        perm = [(0, 2), (2, 1), (1, 3), (3, 0)]
        cases.append((f"ppermute batch={d}", lax.ppermute, C.ppermute, {"axis_name": "i", "perm": perm}, (3, 2),
                      d))
    return cases


def batching() -> list[tuple[str, bool, str]]:
    """meshsim's batching rules (`collectives.vmap` on the simulated mesh) against jax.vmap of the same
    jax.lax collective on real devices: the same values on every device, bit for bit."""
    import collectives as C
    import sim

    mesh, rng, rows = oracles.cpu_mesh({"i": 4}), np.random.default_rng(11), []
    for label, jax_op, sim_op, params, shape, d in _batching_cases():
        batched = list(shape)
        batched.insert(d, 3)
        x = rng.integers(-9, 10, (4, *batched)).astype(np.float32)  # one block per device
        real = jax.jit(jax.shard_map(lambda v, op=jax_op, p=params, d=d: jax.vmap(lambda u: op(u, **p), in_axes=d)(
            v[0])[None], mesh=mesh, in_specs=P("i"), out_specs=P("i")))(x)
        simulated = sim.shard_map(lambda v, op=sim_op, p=params, d=d: C.vmap(op, in_axes=d)(v[0], **p)[None],
                                  mesh=sim.Mesh({"i": 4}), in_specs=sim.P("i"), out_specs=sim.P("i"),
                                  check_vma=False)(x)
        agrees = np.asarray(real).shape == simulated.shape and np.array_equal(np.asarray(real), simulated)
        rows.append((label, agrees, f"jax {np.asarray(real).shape}, meshsim {simulated.shape}"))
    return rows


def control_flow() -> list[tuple[str, bool, str]]:
    """cond, while_loop and scan with collectives in their bodies (and a device-dependent cond of local
    operations), plain and under jax.grad, compared with real JAX bit for bit."""
    mesh = oracles.cpu_mesh({"i": 4})

    def body(x: Any) -> Any:
        mine = lax.cond(lax.axis_index("i") % 2 == 0, lambda v: v * 2.0, lambda v: -v, x)   # per device
        total = lax.cond(lax.psum(jnp.sum(x), "i") > 0, lambda v: lax.psum(v, "i"),
                         lambda v: lax.psum(v * v, "i"), mine)

        def rotate(carry: Any, _: Any) -> tuple[Any, Any]:
            moved = lax.ppermute(carry, "i", [(k, (k + 1) % 4) for k in range(4)])
            return moved * 0.5, lax.psum(moved, "i")

        last, sums = lax.scan(rotate, x, None, length=3)
        # reverse mode has no while_loop: its gradient sees the loop's result as a constant
        count, grown = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, lax.psum(c[1], "i") * 0.25),
                                      (0, lax.psum(lax.stop_gradient(x), "i")))
        return total + last * 3.0 + sums.sum(0) + grown * count

    f = jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    x = np.random.default_rng(3).standard_normal(8).astype(np.float32)
    w = np.arange(8.0, dtype=np.float32) - 3.0
    rows = []
    for label, g in (("program", jax.jit(f)), ("grad", jax.jit(jax.grad(lambda v: jnp.sum(f(v) * w))))):
        report = oracles.compare_jax(g, x)
        rows.append((label, report.agrees, str(report)))
    return rows + local_loops(mesh, x)


def local_loops(mesh: Any, x: np.ndarray) -> list[tuple[str, bool, str]]:
    """Loops with no collective whose bodies JAX types by variance under check_vma=True (a constant made
    varying by a `pvary` inside the loop): each compiled whole, as jitted JAX compiles it, so bit for bit, and
    recorded as one loop equation in the device's program; (label, agrees, report and the loop's equation)."""
    loops = {"scan typed by variance": (lambda v: lax.scan(lambda c, _: (c * 1.5, jnp.sum(c)), v, None,
                                                          length=3)[1][None], "scan["),
             "while_loop typed by variance": (lambda v: lax.while_loop(
                 lambda c: c[0] < 50, lambda c: (c[0] + 1, c[1] * 0.999 + 0.001), (0, v))[1], "while[")}
    rows = []
    for label, (body, loop) in loops.items():
        g = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
        report = oracles.compare_jax(g, x)
        program = str(report.simulated.programs[0])
        rows.append((label, report.agrees, f"{report}; one {loop}: {program.count(loop) == 1}"))
    return rows


def compositions() -> list[tuple[str, bool, str]]:
    """The rules campaign's round-two surfaces as whole programs: jax.linearize, vmap of grad, grad of vmap,
    jvp of vmap of a shard_map with all_gather, psum_scatter and ppermute, and a fori_loop of ppermute steps
    under jax.checkpoint, forward and under jax.grad: JAX's outputs bit for bit."""
    mesh = oracles.cpu_mesh({"i": 4})
    ring = [(k, (k + 1) % 4) for k in range(4)]

    def body(x: Any) -> Any:
        gathered = lax.all_gather(x, "i", tiled=True)
        return lax.psum_scatter(gathered * 1.5, "i", tiled=True) + lax.ppermute(x, "i", ring) * 0.25

    def looped(x: Any) -> Any:
        step = jax.checkpoint(lambda _, v: lax.ppermute(v, "i", ring) * 0.5 + lax.psum(v, "i") * 0.125)
        return lax.fori_loop(0, 3, step, x)

    f = jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    g = jax.shard_map(looped, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    loss = lambda v: jnp.sum(f(v) * jnp.arange(8.0, dtype=np.float32))
    x = np.random.default_rng(7).standard_normal(8).astype(np.float32)
    xs = np.random.default_rng(8).standard_normal((3, 8)).astype(np.float32)
    cases = {
        "linearize": (jax.jit(lambda v, u: jax.linearize(f, v)[1](u)), (x, x[::-1].copy())),
        "vmap of grad": (jax.jit(jax.vmap(jax.grad(loss))), (xs,)),
        "grad of vmap": (jax.jit(jax.grad(lambda b: jnp.sum(jax.vmap(f)(b) ** 2))), (xs,)),
        "jvp of vmap": (jax.jit(lambda b, t: jax.jvp(jax.vmap(f), (b,), (t,))), (xs, xs[::-1].copy())),
        "fori_loop with checkpoint": (jax.jit(g), (x,)),
        "grad of fori_loop with checkpoint": (jax.jit(jax.grad(lambda v: jnp.sum(g(v) * v))), (x,)),
    }
    rows = []
    for label, (h, args) in cases.items():
        report = oracles.compare_jax(h, *args)
        rows.append((label, report.agrees, str(report)))
    return rows


def newops() -> list[tuple[str, bool, str]]:
    """JAX 0.10.2's pshuffle, pswapaxes (with groups), pcast and axis_size reach the bridge as the primitives
    they bind and equal real JAX bit for bit; so does pbroadcast, run in JAX under
    `oracles.install_cpu_lowerings()`; a psend/precv pipeline (no CPU lowering: XLA:CPU has no Send/Recv)
    traces with JAX's types (a token, an invariant precv) and equals JAX's documented equivalent, the same
    program with a ppermute; axis_size, which binds nothing, returns JAX's int32[] constant; JAX's own gradient
    of pbroadcast fails (pinned)."""
    oracles.install_cpu_lowerings()
    mesh = oracles.cpu_mesh({"i": 4})
    x = np.arange(16.0, dtype=np.float32).reshape(8, 2) - 5.0
    w = np.linspace(-1.0, 1.0, 16, dtype=np.float32).reshape(8, 2)
    rows = []
    programs = {
        "pshuffle": (lambda v: lax.pshuffle(v, "i", [2, 0, 3, 1]), True),
        "pswapaxes": (lambda v: lax.pswapaxes(v, "i", 0, axis_index_groups=[[0, 1], [2, 3]]), False),
        "pcast": (lambda v: lax.pcast(v.sum(0), "i", to="varying") + v * lax.axis_size("i"), True),
    }
    for label, (body, check_vma) in programs.items():
        spec = P() if label == "pcast" else P("i")
        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=P("i"), check_vma=check_vma))
        report = oracles.compare_jax(f, x)
        rows.append((label, report.agrees, str(report)))
    f = jax.shard_map(lambda v: lax.pbroadcast(v, "i", 2), mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    report = oracles.compare_jax(jax.jit(f), x)
    rows.append(("pbroadcast", report.agrees, str(report)))
    rows.append(_pipeline(mesh, x))
    rows.append(_axis_size())
    # JAX 0.10.2's transpose rule of pbroadcast fills with the psum through lax.full_like, which takes only a
    # scalar: the gradient of any non-scalar pbroadcast fails to trace (FINDINGS.md); pinned so a fix is noticed
    kind, text = error(lambda: jax.make_jaxpr(jax.grad(lambda v: jnp.sum(f(v) * w)))(x))
    rows.append(("jax: grad of pbroadcast", kind == "TypeError" and "scalar fill_value" in text, f"{kind}: {text}"))
    return rows


def partial() -> list[tuple[str, bool, str]]:
    """shard_maps over some of the mesh's axes (`axis_names=`), the others left to JAX's partitioner: a psum
    of a matmul, a sharding constraint along the auto axis in the body, three axes with two manual, and an
    Explicit mesh called without `jax.set_mesh` (its gradient's host equations name the mesh's devices):
    forward and gradient equal jitted JAX bit for bit, every device of the mesh takes part, and a false
    replication claim names the manual axes only."""
    two = oracles.cpu_mesh({"x": 2, "y": 4})
    three = oracles.cpu_mesh({"x": 2, "y": 2, "z": 2})
    explicit = jax.sharding.Mesh(np.asarray(jax.devices()[:8]).reshape(2, 4), ("x", "y"),
                                 axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    x = (np.arange(64.0, dtype=np.float32).reshape(8, 8) - 20.0) / 7.0
    programs = {
        "matmul, psum over x": (two, lambda a: lax.psum(a @ a.T, "x"), P("x"), P(), {"x"}, True),
        "constraint along y": (two, lambda a: lax.psum(lax.with_sharding_constraint(a * 3.0, P(None, "y")), "x"),
                               P("x"), P(), {"x"}, False),
        "ppermute over y": (two, lambda a: lax.ppermute(a, "y", [(k, (k + 1) % 4) for k in range(4)]) * 2.0,
                            P("y"), P("y"), {"y"}, True),
        "x and z of three": (three, lambda a: lax.psum(a, ("x", "z")) * 2.0 + lax.axis_index("z"),
                             P(("x", "z")), P(("x", "z")), {"x", "z"}, True),
        "explicit mesh": (explicit, lambda a: lax.psum(jnp.sin(a) * 2.0, "x"), P("x"), P(), {"x"}, True),
    }
    with jax.set_mesh(two):  # jax.smap: a shard_map manual over its one axis
        f = jax.jit(jax.smap(lambda a: lax.psum(a, "x") * 2.0, in_axes=0, out_axes=0, axis_name="x"))
        report = oracles.compare_jax(f, x)
    smapped = ("jax.smap", report.agrees and {r.simulation.mesh.size for r in report.simulated.runs} == {8},
               str(report))
    rows = []
    for label, (mesh, body, ins, outs, names, check) in programs.items():
        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=ins, out_specs=outs, axis_names=names, check_vma=check))
        arg = jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x", "y"))) if mesh is explicit else x
        for form, h in (("", f), ("grad ", jax.jit(jax.grad(lambda v, f=f: jnp.sum(jnp.sin(f(v))))))):
            report = oracles.compare_jax(h, arg)
            devices = {run.simulation.mesh.size for run in report.simulated.runs}
            rows.append((form + label, report.agrees and "bit-identical" in str(report) and devices == {8},
                         f"{devices} {report}"))
    claim = jax.jit(jax.shard_map(lambda a: lax.psum(a, "x") * lax.axis_index("z"), mesh=three, in_specs=P("x"),
                                  out_specs=P(), axis_names={"x", "z"}, check_vma=False))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = oracles.simulate_jax(claim, x).diagnostics
    # JAX's own compile of a bfloat16 psum over some axes aborts the process (FINDINGS.md 16); the bridge runs
    # it, and gives what the same body manual over every axis gives in JAX
    halves = x.astype(jnp.bfloat16)
    over_x = jax.jit(jax.shard_map(lambda a: lax.psum(a, "x"), mesh=two, in_specs=P("x"), out_specs=P(),
                                   axis_names={"x"}))
    whole = jax.jit(jax.shard_map(lambda a: lax.psum(a, "x"), mesh=two, in_specs=P("x"), out_specs=P()))
    same = np.array_equal(np.asarray(oracles.simulate_jax(over_x, halves).outputs), np.asarray(whole(halves)))
    rows.append(("bfloat16 psum JAX cannot compile", same, "bfloat16 psum over x with y left to the compiler"))
    rows.append(smapped)
    rows.append(("claim names the manual axes", [d.kind for d in found] == ["false replication claim"]
                 and "along ['x', 'z']" in found[0].message, str(found)))
    return rows


def _axis_size() -> tuple[str, bool, str]:
    """`lax.axis_size` over a tuple of axes and over one, on a 2 x 2 mesh: JAX folds both to constants (no
    primitive); the one a shard_map returns is JAX's int32[], and the simulated program gives the same."""
    mesh = oracles.cpu_mesh({"i": 2, "j": 2})
    x = np.arange(8.0, dtype=np.float32).reshape(4, 2)

    def body(v: Any) -> tuple[Any, int]:
        return v * lax.axis_size(("i", "j")), lax.axis_size("j")

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(("i", "j")), out_specs=(P(("i", "j")), P())))
    report = oracles.compare_jax(f, x)
    size = report.outputs[1]
    return "axis_size", report.agrees and "int32[]" in str(size) and "bit-identical" in str(size), str(report)


def _pipeline(mesh: Any, x: np.ndarray) -> tuple[str, bool, str]:
    """Each stage psends to the next and precvs from the previous: simulated, it equals the same program with
    a ppermute run in JAX, and JAX traces it with a token and an invariant precv (then a pvary)."""
    perm = [(0, 1), (1, 2), (2, 3)]

    def stage(v: Any) -> Any:
        token = lax.psend(v * 2, "i", perm)
        return lax.precv(token, jax.ShapeDtypeStruct(v.shape, v.dtype), "i", perm) + v

    f = jax.shard_map(stage, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    jaxpr = str(jax.make_jaxpr(f)(x))
    typed = "Tok = psend" in jaxpr and "f32[2,2] = precv" in jaxpr
    equivalent = jax.jit(jax.shard_map(lambda v: lax.ppermute(v * 2, "i", perm) + v, mesh=mesh, in_specs=P("i"),
                                       out_specs=P("i")))
    simulated = np.asarray(oracles.simulate_jax(f, x).outputs)
    return "psend/precv", typed and np.array_equal(simulated, np.asarray(equivalent(x))), f"{simulated}\n{jaxpr}"


def remat() -> list[tuple[str, bool, int, str]]:
    """`jax.checkpoint` (JAX 0.10.2's `remat2`) inside a shard_map body and around a whole shard_map, forward
    and under jax.grad: (label, agrees with jitted JAX, simulated runs, report). Forward bit for bit; the
    gradients within 1e-5 relative, the same as without checkpoint: the bridge evaluates the backward body op
    by op, where XLA fuses it (a known difference of a few ulp)."""
    mesh = oracles.cpu_mesh({"i": 4})

    def body(w: Any, x: Any) -> Any:
        layer = jax.checkpoint(lambda v: jnp.tanh(lax.all_gather(v, "i", tiled=True) @ x))
        return lax.psum(jnp.sum(layer(w) ** 2), "i")

    inner = jax.shard_map(body, mesh=mesh, in_specs=(P("i"), P()), out_specs=P())
    outer = jax.checkpoint(inner)
    w = np.random.default_rng(5).standard_normal((8, 3)).astype(np.float32)
    x = np.random.default_rng(6).standard_normal((3, 2)).astype(np.float32)
    rows = []
    for label, g in (("checkpoint in the body", jax.jit(inner)), ("checkpoint around the shard_map", jax.jit(outer)),
                     ("grad, checkpoint in the body", jax.jit(jax.grad(inner))),
                     ("grad, checkpoint around", jax.jit(jax.grad(outer)))):
        report = oracles.compare_jax(g, w, x, rtol=1e-5 if label.startswith("grad") else 0.0)
        rows.append((label, report.agrees, len(oracles.simulate_jax(g, w, x).runs), str(report)))
    return rows


BATCHES: dict[str, Callable[[], Any]] = {
    "reductions": lambda: batch(("psum", "pmean", "pmax", "pmin"), 50),
    "gathers": lambda: batch(("all_gather", "all_gather_invariant", "psum_scatter"), 50),
    "exchanges": lambda: batch(("all_to_all", "ppermute", "axis_index", "pvary"), 50),
    "bridge_page": bridge_page, "control_flow": control_flow, "transforms": transforms, "batching": batching,
    "moe": moe,
    "moe_ragged": moe_ragged, "errors": errors, "newops": newops, "mutation": mutation, "laid_out": laid_out,
    "canonical": canonical, "comparison": comparison, "remat": remat, "compositions": compositions, "partial": partial,
    "nested": nested, "vmap_axes": vmap_axes,
}


def main(names: list[str]) -> None:
    """Run the named batches; pickle {name: ("ok", result) or ("error", traceback)} to stdout."""
    results = {}
    for name in names:
        try:
            results[name] = ("ok", BATCHES[name]())
        except Exception:
            results[name] = ("error", traceback.format_exc())
    sys.stdout.buffer.write(pickle.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
