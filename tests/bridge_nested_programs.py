"""shard_maps nested in a shard_map body through the bridge, against jitted JAX (a batch of
`bridge_programs.py`, run in its worker process with 8 CPU devices)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from bridge_errors import error
from jax import lax
from jax.sharding import PartitionSpec as P

import oracles


def nested() -> list[tuple[str, bool, str]]:
    """shard_maps nested in a shard_map body (the inner manual over an axis the outer leaves to the compiler),
    each with both check_vma settings, forward and under jax.grad, and two with the settings mixed (forward):
    equal to jitted JAX bit for bit. Where JAX
    cannot lower the gradient under check_vma=True (FINDINGS.md 24), the bridge's gradient equals JAX's under
    check_vma=False. The outputs are gathered under the nested shard_map's line; an unchecked false
    replication claim of a nested shard_map is reported, and an error under strict=True."""
    two = oracles.cpu_mesh({"x": 2, "y": 4})
    three = oracles.cpu_mesh({"x": 2, "y": 2, "z": 2})
    ring = [(k, (k + 1) % 4) for k in range(4)]
    programs = {
        "psum over both axes": (two, lambda c: lax.psum(c, ("x", "y")) + lax.axis_index("y"), P(None, "y"),
                                P(None, "y"), "y"),
        "psum over y, replicated": (two, lambda c: lax.psum(c, "y") * 2.0, P(None, "y"), P(), "y"),
        "all_gather over y": (two, lambda c: lax.all_gather(c, "y", axis=0, tiled=True), P(None, "y"),
                              P(None, "y"), "y"),
        "ppermute ring in a fori_loop": (two, lambda c: lax.fori_loop(
            0, 3, lambda _, v: lax.ppermute(v, "y", ring) * 2.0, c), P(None, "y"), P(None, "y"), "y"),
        "psum_scatter over y": (two, lambda c: lax.psum_scatter(c, "y", scatter_dimension=1, tiled=True), P(),
                                P(None, "y"), "y"),
        "z inside x, y left to the compiler": (three, lambda c: lax.psum(c, ("x", "z")) * (lax.axis_index("z") + 1),
                                               P(None, "z"), P(None, "z"), "z"),
    }
    x = (np.arange(64.0, dtype=np.float32).reshape(8, 8) - 20.0) / 7.0
    rows = []
    for number, (label, (mesh, f, ins, outs, name)) in enumerate(programs.items()):
        made = {}
        # check_vma of the outer and the nested shard_map: alike, and mixed where the collective names only the
        # nested axis (JAX refuses a checked psum over an axis of an unchecked enclosing shard_map)
        for checks in ((False, False), (True, True), (False, True), (True, False))[:4 if number in (1, 2) else 2]:
            def outer(b: Any, f: Any = f, ins: Any = ins, outs: Any = outs, name: str = name,
                      check: bool = checks[1]) -> Any:
                inner = jax.shard_map(f, in_specs=ins, out_specs=outs, axis_names={name}, check_vma=check)
                return inner(b * 2.0) * 3.0

            g = jax.jit(jax.shard_map(outer, mesh=mesh, in_specs=P("x"), out_specs=P("x"), axis_names={"x"},
                                      check_vma=checks[0]))
            made[checks] = (g, jax.jit(jax.grad(lambda v, g=g: jnp.sum(jnp.sin(g(v))))))
            said = f"check_vma={checks[0]}" + (f", nested {checks[1]}" if checks[1] != checks[0] else "")
            for form, h in zip(("", "grad ")[:2 if checks[0] == checks[1] else 1], made[checks]):
                kind, text = error(lambda h=h: h(x))
                if kind != "no error":  # JAX cannot lower it: the same math unchecked is the answer
                    same = np.array_equal(oracles.simulate_jax(h, x).outputs, made[False, False][1](x))
                    rows.append((f"{form}{label} {said} (JAX: {kind})", same and "already bound by a parent" in text,
                                 text[:200]))
                    continue
                report = oracles.compare_jax(h, x)
                rows.append((f"{form}{label} {said}", report.agrees and "bit-identical" in str(report), str(report)))
    gathered = {(c.collective, c.label.split(" ")[-1])
                for c in oracles.simulate_jax(made[True, True][0], x).runs[0].calls}
    rows.append(("outputs gathered under the nested shard_map's line", ("all_gather", "(nested.<locals>.outer)")
                 in gathered, str(gathered)))
    return rows + _nested_more(three, x) + _nested_claim(two, x)


def _nested_more(mesh: Any, x: np.ndarray) -> list[tuple[str, bool, str]]:
    """Three levels of shard_map (forward and grad), a nested shard_map in one branch of a cond, and PRNG keys
    into a nested shard_map: equal to jitted JAX bit for bit."""
    def level2(b: Any) -> Any:
        inner = jax.shard_map(lambda c: lax.psum(c, ("x", "y", "z")) - lax.axis_index("z"), in_specs=P(None, "z"),
                              out_specs=P(None, "z"), axis_names={"z"})
        return inner(b) * 2.0 + lax.axis_index("y")

    def level1(a: Any) -> Any:
        return jax.shard_map(level2, in_specs=P(None, "y"), out_specs=P(None, "y"), axis_names={"y"})(a)

    def branch(a: Any) -> Any:
        inner = jax.shard_map(lambda c: lax.psum(c, "y"), in_specs=P(None, "y"), out_specs=P(None, "y"),
                              axis_names={"y"})
        return lax.cond(a.sum() > 0, inner, lambda c: c * 0.5, a)

    def keyed(key: Any, a: Any) -> Any:
        noise = lambda k, c: c + jax.random.normal(jax.random.fold_in(k[0], lax.axis_index("z")), c.shape)
        return jax.shard_map(noise, in_specs=(P(), P(None, "z")), out_specs=P(None, "z"), axis_names={"z"},
                             check_vma=False)(key, a)

    three = jax.jit(jax.shard_map(level1, mesh=mesh, in_specs=P("x"), out_specs=P("x"), axis_names={"x"}))
    cases = {"three levels": (three, (x,)),
             "grad, three levels": (jax.jit(jax.grad(lambda v: jnp.sum(three(v) ** 2))), (x,)),
             "in a cond": (jax.jit(jax.shard_map(branch, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                                 axis_names={"x"}, check_vma=False)), (x - 10.0,)),
             "keys in": (jax.jit(jax.shard_map(keyed, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"),
                                               axis_names={"x"}, check_vma=False)),
                         (jax.random.split(jax.random.key(0), 2), x))}
    rows = []
    for label, (h, args) in cases.items():
        report = oracles.compare_jax(h, *args)
        rows.append((label, report.agrees and "bit-identical" in str(report), str(report)))
    return rows


def _nested_claim(mesh: Any, x: np.ndarray) -> list[tuple[str, bool, str]]:
    """A nested shard_map under check_vma=False whose out_specs=P() claims replication along 'y' of a value
    that depends on 'y': the bridge returns what JAX returns and reports the claim; strict=True stops."""
    import warnings

    def outer(b: Any) -> Any:
        inner = jax.shard_map(lambda c: c + lax.axis_index("y").astype(c.dtype), in_specs=P(None, "y"), out_specs=P(),
                              axis_names={"y"}, check_vma=False)
        return inner(b)

    g = jax.jit(jax.shard_map(outer, mesh=mesh, in_specs=P("x"), out_specs=P("x"), axis_names={"x"},
                              check_vma=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        simulated = oracles.simulate_jax(g, x)
    found = [(d.kind, d.primitive, d.axes, d.devices) for d in simulated.diagnostics]
    kind, text = error(lambda: oracles.simulate_jax(g, x, strict=True))
    # checked outside, unchecked inside: JAX types the nested result invariant along 'x' (FINDINGS.md 26), so
    # out_specs=P() passes its check and returns the first 'x' device's rows
    inner = jax.shard_map(lambda c: c * 2.0, in_specs=P(None, "y"), out_specs=P(None, "y"), axis_names={"y"},
                          check_vma=False)
    typed = jax.jit(jax.shard_map(inner, mesh=mesh, in_specs=P("x"), out_specs=P(), axis_names={"x"}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        slipped = oracles.simulate_jax(typed, x)
    said = [(d.kind, d.axes, d.devices, d.finding) for d in slipped.diagnostics]
    # a warm call reports what its own run met: the same claim, true on columns that agree along 'y'
    doubled = jax.jit(jax.shard_map(jax.shard_map(lambda c: c * 2.0, in_specs=P(None, "y"), out_specs=P(),
                                                  axis_names={"y"}, check_vma=False),
                                    mesh=mesh, in_specs=P("x"), out_specs=P("x"), axis_names={"x"}, check_vma=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calls = [len(oracles.simulate_jax(doubled, v).diagnostics) for v in (x, np.ones_like(x), x)]
    return [("nested false claim reported", np.array_equal(simulated.outputs, g(x)) and found == [
        ("false replication claim", "nested shard_map output 0", ("y",), (1, 2, 3, 5, 6, 7))], str(found)),
        ("nested false claim under strict", kind == "JaxSlipError" and "claims replication along ['y']" in text,
         text),
        ("unchecked nested in checked: FINDINGS.md 26", np.array_equal(slipped.outputs, typed(x)) and said == [
            ("false replication claim", ("x",), (4, 5, 6, 7), 26)], str(said)),
        ("a warm call's claims are its own", calls == [1, 0, 1], str(calls))]
