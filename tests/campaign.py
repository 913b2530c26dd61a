"""The differential campaign against JAX's own transformation rules, as one process and one report.

`python tests/campaign.py --profile default|large [--ops NAME ...] [--kinds KIND ...] [--examples N]
[--mutant NAME]` runs in its own process with 8 CPU devices and `oracles.install_cpu_lowerings()` installed
before jax is imported, and prints a JSON report: for every (collective, property) of the profile,
`scenarios.campaign._rules_search.search` (the calls Hypothesis draws over the input space the docs allow,
judged by `oracles._rules`: JAX's vjp/grad/linear_transpose against meshsim's transposes and the adjoint
identity, `jax.vmap` against a per-batch loop; by `oracles._rules_forward`: `jax.jvp`/`jax.linearize`
against float64 finite differences and JAX's vjp, compositions of vmap, grad and jvp against per-batch
loops; by `oracles._rules_control`: the collective inside control flow against the unrolled program). A
disagreement is classified by `oracles._rules.KNOWN` (the findings of FINDINGS.md); one that fits none is
shrunk to a minimal program and reported under "new". `--mutant` first plants a deliberately wrong rule,
to show the comparison can fail. `meshsim campaign --kinds transpose vmap jvp compose control_flow` runs
the same searches spread over Dask workers.
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
    BATCHED,
    LINEAR,
    search,
)

PROFILES = {"default": {"transpose": 10, "vmap": 8, "jvp": 2, "compose": 2, "control_flow": 2, "seed": None},
            "large": {"transpose": 150, "vmap": 100, "jvp": 60, "compose": 40, "control_flow": 60, "seed": "random"}}
# the collectives each property applies to (jvp and compose: linear ones; control_flow: every one with arrays)
APPLIES = {"transpose": LINEAR, "vmap": BATCHED, "jvp": LINEAR, "compose": LINEAR, "control_flow": BATCHED}


def campaign(profile: str, ops: tuple[str, ...] | None = None, shrink: bool = True,
             kinds: tuple[str, ...] | None = None, examples: int | None = None) -> list[dict[str, Any]]:
    """Every (collective, property) of the profile, in order (default: derandomized; large: new seeds), with
    `examples` per property instead of the profile's if given."""
    sizes = {**PROFILES[profile], **(dict.fromkeys(APPLIES, examples) if examples else {})}
    chosen = [(op, kind) for kind, names in APPLIES.items() for op in names
              if (not ops or op in ops) and (not kinds or kind in kinds)]
    seed = None if sizes["seed"] is None else int.from_bytes(os.urandom(4), "little")
    return [search(op, kind, sizes[kind], seed, shrink) for op, kind in chosen]


def main() -> None:
    """Parse the command line, run the campaign (with a mutant, if asked), print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="default")
    parser.add_argument("--ops", nargs="*", help="only these collectives")
    parser.add_argument("--kinds", nargs="*", choices=sorted(APPLIES), help="only these properties")
    parser.add_argument("--examples", type=int, help="examples per (collective, property) instead of the profile's")
    parser.add_argument("--mutant", choices=sorted(MUTANTS), help="run with a deliberately wrong rule")
    parser.add_argument("--no-shrink", action="store_true", help="report a new disagreement unshrunk")
    options = parser.parse_args()
    if options.mutant:
        MUTANTS[options.mutant]()
    start = time.perf_counter()
    rows = campaign(options.profile, tuple(options.ops) if options.ops else None, not options.no_shrink,
                    tuple(options.kinds) if options.kinds else None, options.examples)
    print(json.dumps({"profile": options.profile, "seconds": round(time.perf_counter() - start, 1), "rows": rows}))


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
        return jax.lax.rev(out, (dim,)), dim

    batching.fancy_primitive_batchers[parallel.all_gather_p] = reversed_batch


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
           "all-gather-jvp": _wrong_all_gather_jvp, "psum-scatter-batching": _wrong_psum_scatter_batching,
           "scan-transpose": _wrong_scan_transpose, "scan-batching": _wrong_scan_batching}

if __name__ == "__main__":
    main()
