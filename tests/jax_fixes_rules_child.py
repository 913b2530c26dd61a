"""The programs FINDINGS.md pins for findings 4, 6, 7, 10, 11 and 12, run in JAX with their fixes installed.

`python tests/jax_fixes_rules_child.py [ID ...]` runs with 8 CPU devices and `oracles.install_cpu_lowerings()`
(XLA:CPU has no CollectiveBroadcast), installs the fixes named (default: every one of
`oracles.jax_fixes._rules.FIXES`) and prints one JSON object: for each program, `["ok", answer]` or
`["error", kind, message]`. Answers are JAX's, as nested lists; the test (`test_jax_fixes_rules.py`) judges
them without jax.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import oracles  # noqa: E402

oracles.install_cpu_lowerings()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax._src.lax import parallel  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from oracles.jax_fixes import _rules  # noqa: E402


def mesh(n: int) -> jax.sharding.Mesh:
    return jax.sharding.Mesh(np.array(jax.devices()[:n]), ("i",))


def varying(f: Callable[..., Any], primitive: str, *args: Any) -> list[list[str]]:
    """The axes each result of the first `primitive` equation (at any depth) varies along, as JAX's jaxpr types them."""
    first = next(e for e in equations(jax.make_jaxpr(f)(*args).jaxpr) if e.primitive.name == primitive)
    return [sorted(v.aval.mat.varying) for v in first.outvars]


def equations(jaxpr: Any) -> Any:
    """Every equation of `jaxpr` and of the jaxprs inside it (shard_map's body, jit's), in order."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            inner = getattr(param, "jaxpr", param)
            if hasattr(inner, "eqns"):
                yield from equations(inner)


def argsort() -> dict[str, Any]:
    """Finding 4's program (out_specs=P()), the same with out_specs=P('i'), its type and the bridge on it; the
    gradient of invariant values sorted by varying keys."""
    x = np.array([3, 1, 2, 0, 1, 2], np.float32)
    mapped = jax.shard_map(jnp.argsort, mesh=mesh(2), in_specs=P("i"), out_specs=P("i"))
    keyed = jax.shard_map(lambda k, v: lax.sort_key_val(k, v)[1], mesh=mesh(2), in_specs=(P("i"), P()),
                          out_specs=P("i"))
    return {"replicated": lambda: jax.shard_map(jnp.argsort, mesh=mesh(2), in_specs=P("i"), out_specs=P())(x),
            "mapped": lambda: mapped(x), "mapped type": lambda: varying(mapped, "sort", x),
            "bridge": lambda: oracles.simulate_jax(mapped, x).outputs,
            "sort_key_val grad": lambda: jax.grad(lambda v: (keyed(x, v) * jnp.arange(6.0)).sum())(
                np.array([10, 20, 30], np.float32))}


def all_to_all() -> dict[str, Any]:
    """Finding 6: jax.grad of sum(w * untiled all_to_all(x)), split_axis 0, concat_axis 1 (and 1, 0)."""
    out: dict[str, Any] = {}
    for split, concat, shape in ((0, 1, (16, 3)), (1, 0, (12, 4))):
        f = jax.shard_map(lambda u, s=split, c=concat: lax.all_to_all(u, "i", s, c, tiled=False), mesh=mesh(4),
                          in_specs=P("i"), out_specs=P("i"))
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        w = 1 + np.arange(np.asarray(jax.eval_shape(f, x).shape).prod(), dtype=np.float32)
        out[f"grad {split} {concat}"] = lambda f=f, x=x, w=w: jax.grad(
            lambda v: (f(v) * w.reshape(f(v).shape)).sum())(x)
    return out


def psum_scatter() -> dict[str, Any]:
    """Finding 7: vmap over axis 2 of an untiled psum_scatter with scatter_dimension 1 (and axis 0, tiled)."""
    x = np.arange(96, dtype=np.float32).reshape(8, 4, 3)

    def f(tiled: bool) -> Any:
        return jax.shard_map(lambda u: lax.psum_scatter(u, "i", scatter_dimension=1, tiled=tiled), mesh=mesh(4),
                             in_specs=P("i"), out_specs=P("i"))

    return {"vmap untiled 2": lambda: jax.vmap(f(False), in_axes=2)(x),
            "vmap tiled 2": lambda: jax.vmap(f(True), in_axes=2)(x),
            "vmap untiled 0": lambda: jax.vmap(f(False), in_axes=0)(np.moveaxis(x, 2, 0))}


def all_gather_invariant() -> dict[str, Any]:
    """Finding 10: the vjp of all_gather_invariant at ct = [1, 2, 3, 4], untyped and typed."""
    def f(check_vma: bool, out: P) -> Any:
        return jax.shard_map(lambda x: parallel.all_gather_invariant(x, "i", tiled=True), mesh=mesh(2),
                             in_specs=P("i"), out_specs=out, check_vma=check_vma)

    x = jnp.array([1.0, 2.0])
    return {"untyped": lambda: jax.vjp(f(False, P("i")), x)[1](jnp.array([1.0, 2.0, 3.0, 4.0]))[0],
            "typed": lambda: jax.vjp(f(True, P()), x)[1](jnp.array([1.0, 2.0]))[0]}


def pbroadcast() -> dict[str, Any]:
    """Findings 11 and 12: grad of a (8, 2) pbroadcast from member 2, typed and untyped, both out_specs;
    the result's type; an invariant operand, forward and under grad."""
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    programs: dict[str, Any] = {}
    for check_vma in (True, False):
        for name, out in (("mapped", P("i")), ("replicated", P())):
            f = jax.shard_map(lambda v: lax.pbroadcast(v, "i", 2), mesh=mesh(4), in_specs=P("i"), out_specs=out,
                              check_vma=check_vma)
            w = 1 + np.arange(16 if name == "mapped" else 4, dtype=np.float32)
            programs[f"grad {name} {check_vma}"] = lambda f=f, w=w: jax.grad(
                lambda v: (f(v) * w.reshape(f(v).shape)).sum())(x)
            programs[f"forward {name} {check_vma}"] = lambda f=f: f(x)
    typed = jax.shard_map(lambda v: lax.pbroadcast(v, "i", 1), mesh=mesh(4), in_specs=P("i"), out_specs=P("i"))
    invariant = jax.shard_map(lambda v: lax.pbroadcast(v, "i", 1), mesh=mesh(4), in_specs=P(), out_specs=P("i"))
    programs["type"] = lambda: varying(typed, "pbroadcast", jnp.ones(8))
    programs["invariant operand"] = lambda: invariant(jnp.arange(2.0))
    programs["invariant operand grad"] = lambda: jax.grad(lambda v: (invariant(v) * jnp.arange(8.0)).sum())(
        jnp.arange(2.0))
    return programs


def precv() -> dict[str, Any]:
    """Entry 12's slip: the pipeline `tests/bridge_programs.py` pins, its precv's type and out_specs=P()."""
    perm = [(0, 1), (1, 2), (2, 3)]

    def stage(v: Any) -> Any:
        token = lax.psend(v * 2, "i", perm)
        return lax.precv(token, jax.ShapeDtypeStruct(v.shape, v.dtype), "i", perm) + v

    x = jnp.ones((8, 2))
    f = jax.shard_map(stage, mesh=mesh(4), in_specs=P("i"), out_specs=P("i"))
    return {"pipeline jaxpr": lambda: str(jax.make_jaxpr(f)(x)), "type": lambda: varying(f, "precv", x),
            "pipeline replicated": lambda: str(jax.make_jaxpr(jax.shard_map(
                stage, mesh=mesh(4), in_specs=P("i"), out_specs=P()))(x))}


def answer(call: Callable[[], Any]) -> list[Any]:
    try:
        value = call()
    except Exception as error:  # a refusal is an answer too
        return ["error", type(error).__name__, str(error)[:400]]
    return ["ok", value if isinstance(value, (str, list)) else np.asarray(value).tolist()]


def main() -> None:
    oracles.install_jax_fixes(sys.argv[1:] or list(_rules.FIXES))
    programs = {f"{group.__name__}: {name}": call for group in (argsort, all_to_all, psum_scatter,
                                                               all_gather_invariant, pbroadcast, precv)
                for name, call in group().items()}
    print(json.dumps({"installed": list(oracles.jax_fixes.installed()),
                      "answers": {name: answer(call) for name, call in programs.items()}}))


if __name__ == "__main__":
    main()
