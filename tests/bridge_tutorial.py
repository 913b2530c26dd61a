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
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import jax.experimental
import jax.numpy as jnp
import numpy as np
from bridge_checks import run_differences, ulps_apart
from bridge_moe_layer import moe, moe_fp8
from bridge_reach import (
    cut_programs,
    diagnostics,
    explicit_types,
    fusion,
    fusion_across_runs,
    operands,
    primitives,
    reach,
    segments,
)
from bridge_tutorial_programs import PROGRAMS, Program
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import oracles

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


def run_one(program: Program, way: str) -> list[tuple]:
    """(program, way, form, agrees, bit-identical, largest difference in ulps, runs, report, differences) per
    form; with `mesh=`, `differences` says where the run with compiled=False (each equation evaluated on its
    own) differs from the compiled one in what it simulates (`bridge_checks.run_differences`), else None."""
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
                ulps = max((ulps_apart(w, s) for w, s in zip(report.expected, jax.tree.leaves(
                    report.simulated.outputs))), default=0)
                stepwise = run_differences(report.simulated, oracles.simulate_jax(g, *args, compiled=False)) \
                    if given else None
                rows.append((program.name, way, form, report.agrees, all(o.equal_bytes for o in report.outputs),
                             ulps, len(report.simulated.runs), str(report), stepwise))
    return rows


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def corpus() -> list[tuple]:
    """Every program in every way, each form."""
    rows = []
    for program in PROGRAMS:
        for way in WAYS:
            try:
                rows += run_one(program, way)
            except Exception as error:
                rows.append((program.name, way, "error", False, False, 0, 0,
                             f"{type(error).__name__}: {error}"[:2000], None))
    return rows


BATCHES: dict[str, Callable[[], Any]] = {"corpus": corpus, "diagnostics": diagnostics, "reach": reach,
                                         "explicit_types": explicit_types, "primitives": primitives,
                                         "fusion": fusion, "fusion_across_runs": fusion_across_runs,
                                         "cut_programs": cut_programs, "moe": moe, "moe_fp8": moe_fp8,
                                         "operands": operands,
                                         "segments": segments}


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
