"""The differential campaign against JAX's own transformation rules, as one process and one report.

`python tests/campaign.py --profile default|wide|large [--ops NAME ...] [--kinds KIND ...] [--examples N]
[--mutant NAME] [--fixes] [--answers]` runs in its own process with 8 CPU devices and
`oracles.install_cpu_lowerings()` installed before jax is imported, and prints a JSON report: for every
(collective, property) of the profile, `scenarios.campaign._rules_search.search` (the calls Hypothesis draws
over the input space the docs allow, judged by `oracles._rules`: JAX's vjp/grad/linear_transpose against
meshsim's transposes and the adjoint identity, `jax.vmap` against a per-batch loop; by
`oracles._rules_forward`: `jax.jvp`/`jax.linearize` against float64 finite differences and JAX's vjp,
compositions of vmap, grad and jvp against per-batch loops; by `oracles._rules_control`: the collective
inside control flow against the unrolled program; by `oracles._rules_vma`: the device-variance types of
jax.lax's multi-operand primitives against the rule and each device's own result; by
`oracles._rules_partial`: shard_map manual over part of the mesh against the fully manual program). A
disagreement is classified by `oracles._rules.KNOWN` (the findings of FINDINGS.md); one that fits none is
shrunk to a minimal program and reported under "new". `--mutant` first plants a deliberately wrong rule, to
show the comparison can fail. `--fixes` installs every corrected JAX rule (`oracles.install_jax_fixes()`)
before the search, so the findings they fix are no longer met; `--answers` prints, instead of the search,
digests of JAX's answers on the calls no finding's predicate fits (`scenarios.campaign._rules_answers`), to
compare runs with and without `--fixes`. `meshsim campaign --kinds transpose vmap jvp compose control_flow
vma partial_manual` runs the same searches spread over Dask workers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import oracles  # noqa: E402

oracles.install_cpu_lowerings()

import jax  # noqa: E402

import collectives  # noqa: E402
from scenarios.campaign import (  # noqa: E402
    KINDS,
    search,
)

PROFILES = {"default": {"transpose": 10, "vmap": 10, "jvp": 2, "compose": 2, "control_flow": 2, "vma": 3,
                        "partial_manual": 2, "seed": None},
            "large": {"transpose": 150, "vmap": 100, "jvp": 60, "compose": 40, "control_flow": 60, "vma": 60,
                      "partial_manual": 40, "seed": "random"},
            # derandomized like default, its transposes and vmaps four to five times over: the coverage table
            "wide": {"transpose": 40, "vmap": 40, "jvp": 2, "compose": 2, "control_flow": 2, "vma": 3,
                     "partial_manual": 2, "seed": None}}
# the kinds of JAX's rules, each over `KINDS[kind]`: transpose, jvp and compose the linear collectives; vmap,
# control_flow and partial_manual every collective with arrays; vma jax.lax's multi-operand primitives
RULES = ("transpose", "vmap", "jvp", "compose", "control_flow", "vma", "partial_manual")


def campaign(profile: str, ops: tuple[str, ...] | None = None, shrink: bool = True,
             kinds: tuple[str, ...] = RULES, examples: int | None = None) -> list[dict[str, Any]]:
    """Every (collective or primitive, kind) of the profile, in order (default, wide: derandomized; large: new
    seeds), with `examples` per (collective, kind) instead of the profile's if given."""
    sizes = {**PROFILES[profile], **(dict.fromkeys(RULES, examples) if examples else {})}
    chosen = [(op, kind) for kind in kinds for op in KINDS[kind] if not ops or op in ops]
    seed = None if sizes["seed"] is None else int.from_bytes(os.urandom(4), "little")
    return [search(op, kind, sizes[kind], seed, shrink) for op, kind in chosen]


def main() -> None:
    """Parse the command line, run the campaign (with a mutant, if asked), print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="default")
    parser.add_argument("--ops", nargs="*", help="only these collectives (or, for vma, jax.lax primitives)")
    parser.add_argument("--kinds", nargs="*", choices=RULES, default=list(RULES), help="only these kinds")
    parser.add_argument("--examples", type=int, help="examples per (collective, kind) instead of the profile's")
    parser.add_argument("--mutant", choices=sorted(MUTANTS), help="run with a deliberately wrong rule")
    parser.add_argument("--no-shrink", action="store_true", help="report a new disagreement unshrunk")
    parser.add_argument("--fixes", action="store_true", help="install every corrected JAX rule first")
    parser.add_argument("--answers", action="store_true", help="print digests of JAX's answers instead")
    options = parser.parse_args()
    fixes = oracles.install_jax_fixes() if options.fixes else ()
    if options.mutant:
        MUTANTS[options.mutant]()
    if options.answers:
        print(json.dumps({"profile": options.profile, "fixes": list(fixes),
                          "rows": answered(options.profile, tuple(options.ops or ()))}))
        return
    start = time.perf_counter()
    rows = campaign(options.profile, tuple(options.ops) if options.ops else None, not options.no_shrink,
                    tuple(options.kinds), options.examples)
    print(json.dumps({"profile": options.profile, "fixes": list(fixes),
                      "seconds": round(time.perf_counter() - start, 1), "rows": rows}))


def answered(profile: str, ops: tuple[str, ...]) -> list[dict[str, Any]]:
    """JAX's answers on the profile's calls that no finding's predicate fits, per (collective, property)."""
    from scenarios.campaign._rules_answers import answers

    sizes = PROFILES[profile]
    return [answers(op, kind, sizes[kind]) for kind in ("transpose", "vmap") for op in KINDS[kind]
            if not ops or op in ops]


def _wrong_psum_transpose() -> None:
    """meshsim's psum transposed to twice the right cotangent."""
    definition = collectives.REGISTRY["psum"]
    right = definition.transpose
    object.__setattr__(definition, "transpose", lambda t: [None if c is None else c * 2 for c in right(t)])


def _wrong_all_gather_batching() -> None:
    """JAX's all_gather batching rule with the batch elements' results reversed."""
    from jax._src.interpreters import batching
    from jax._src.lax import parallel

    right = batching.fancy_primitive_batchers[parallel.all_gather_p]

    def reversed_batch(axis_data: Any, vals: Any, dims: Any, **params: Any) -> Any:
        out, dim = right(axis_data, vals, dims, **params)
        return (out if dim is None else jax.lax.rev(out, (dim,))), dim

    batching.fancy_primitive_batchers[parallel.all_gather_p] = reversed_batch


def _wrong_dot_general_typing() -> None:
    """JAX's dot_general typed invariant whatever its operands (a silent wrong answer under out_specs=P())."""
    from jax._src.lax import lax

    right = lax.dot_general_p.abstract_eval

    def invariant(*avals: Any, **params: Any) -> Any:
        out, effects = right(*avals, **params)
        return out.update_manual_axis_type(type(out.mat)()), effects

    lax.dot_general_p.abstract_eval = invariant


def _wrong_partial_psum() -> None:
    """JAX's psum lowered to twice the sum where the shard_map leaves some mesh axes to the compiler."""
    from jax._src.interpreters import mlir
    from jax._src.lax import parallel
    from jax._src.lib.mlir.dialects import hlo

    right = mlir._lowerings[parallel.psum_p].rule

    def doubled(ctx: Any, *args: Any, **params: Any) -> Any:
        outs = right(ctx, *args, **params)
        context = ctx.module_context.axis_context
        manual, mesh = getattr(context, "manual_axes", None), getattr(context, "mesh", None)
        partial = bool(manual) and mesh is not None and set(manual) != set(mesh.axis_names)
        return [hlo.add(o, o) for o in outs] if partial else outs

    mlir.register_lowering(parallel.psum_p, doubled)


def _wrong_all_gather_jvp() -> None:
    """JAX's all_gather JVP with the tangent doubled (the primal untouched)."""
    from jax._src.interpreters import ad
    from jax._src.lax import parallel

    right = ad.primitive_jvps[parallel.all_gather_p]

    def doubled(primals: Any, tangents: Any, **params: Any) -> Any:
        out, tangent = right(primals, tangents, **params)
        return out, tangent * 2

    ad.primitive_jvps[parallel.all_gather_p] = doubled


def _wrong_psum_scatter_batching() -> None:
    """JAX's psum_scatter batching rule with the batch elements' results reversed (met by all_gather's
    transpose under vmap only)."""
    from jax._src.interpreters import batching
    from jax._src.lax import parallel

    right = batching.fancy_primitive_batchers[parallel.reduce_scatter_p]

    def reversed_batch(axis_data: Any, vals: Any, dims: Any, **params: Any) -> Any:
        out, dim = right(axis_data, vals, dims, **params)
        return jax.lax.rev(out, (dim,)), dim

    batching.fancy_primitive_batchers[parallel.reduce_scatter_p] = reversed_batch


def _wrong_scan_transpose() -> None:
    """JAX's transpose of lax.scan fed twice the cotangents of the scan's outputs (met only by reverse mode
    through a scan: the unrolled program binds no scan)."""
    from jax._src.interpreters import ad
    from jax._src.lax.control_flow import loops

    right = ad.fancy_transposes[loops.scan_p]

    def doubled(cts: Any, *args: Any, **params: Any) -> Any:
        return right([c if type(c) is ad.Zero else c * 2 for c in cts], *args, **params)

    ad.fancy_transposes[loops.scan_p] = doubled


def _wrong_scan_batching() -> None:
    """JAX's batching rule of lax.scan with every batched result's batch elements reversed (met only by
    jax.vmap of a scan: the unrolled program binds no scan)."""
    from jax._src.interpreters import batching
    from jax._src.lax.control_flow import loops

    right = batching.fancy_primitive_batchers[loops.scan_p]

    def reversed_batch(axis_data: Any, args: Any, dims: Any, **params: Any) -> Any:
        outs, out_dims = right(axis_data, args, dims, **params)
        return [o if d is None else jax.lax.rev(o, (d,)) for o, d in zip(outs, out_dims)], out_dims

    batching.fancy_primitive_batchers[loops.scan_p] = reversed_batch


MUTANTS = {"psum-transpose": _wrong_psum_transpose, "all-gather-batching": _wrong_all_gather_batching,
           "dot-general-typing": _wrong_dot_general_typing, "partial-psum": _wrong_partial_psum,
           "all-gather-jvp": _wrong_all_gather_jvp, "psum-scatter-batching": _wrong_psum_scatter_batching,
           "scan-transpose": _wrong_scan_transpose, "scan-batching": _wrong_scan_batching}

if __name__ == "__main__":
    main()
