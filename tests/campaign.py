"""The differential campaign against JAX's own transpose and batching rules, as one process and one report.

`python tests/campaign.py --profile default|wide|large [--ops NAME ...] [--mutant NAME]` runs in its own process
with 8 CPU devices and `oracles.install_cpu_lowerings()` installed before jax is imported, and
prints a JSON report: for every (collective, property) of the profile, `scenarios.campaign._rules_search.search`
(the calls Hypothesis draws over the input space the docs allow, judged by `oracles._rules`: JAX's
vjp/grad/linear_transpose against meshsim's transposes and the adjoint identity, `jax.vmap` against a
per-batch loop). A disagreement is classified by `oracles._rules.KNOWN` (the findings of FINDINGS.md); one
that fits none is shrunk to a minimal program and reported under "new". `--mutant` first plants a
deliberately wrong rule, to show the comparison can fail. `meshsim campaign --kinds transpose vmap` runs the
same searches spread over Dask workers.
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

PROFILES = {"default": {"transpose": 10, "vmap": 8, "seed": None},
            "large": {"transpose": 150, "vmap": 100, "seed": "random"},
            # derandomized like default, four to five times its programs: benchmarks/jax_coverage.py's table
            "wide": {"transpose": 40, "vmap": 40, "seed": None}}


def campaign(profile: str, ops: tuple[str, ...] | None = None, shrink: bool = True) -> list[dict[str, Any]]:
    """Every (collective, property) of the profile, in order (default, wide: derandomized; large: new seeds)."""
    sizes = PROFILES[profile]
    chosen = [(op, kind) for kind, names in (("transpose", LINEAR), ("vmap", BATCHED)) for op in names
              if not ops or op in ops]
    seed = None if sizes["seed"] is None else int.from_bytes(os.urandom(4), "little")
    return [search(op, kind, sizes[kind], seed, shrink) for op, kind in chosen]


def main() -> None:
    """Parse the command line, run the campaign (with a mutant, if asked), print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="default")
    parser.add_argument("--ops", nargs="*", help="only these collectives")
    parser.add_argument("--mutant", choices=sorted(MUTANTS), help="run with a deliberately wrong rule")
    parser.add_argument("--no-shrink", action="store_true", help="report a new disagreement unshrunk")
    options = parser.parse_args()
    if options.mutant:
        MUTANTS[options.mutant]()
    start = time.perf_counter()
    rows = campaign(options.profile, tuple(options.ops) if options.ops else None, not options.no_shrink)
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
        return (out if dim is None else jax.lax.rev(out, (dim,))), dim

    batching.fancy_primitive_batchers[parallel.all_gather_p] = reversed_batch


MUTANTS = {"psum-transpose": _wrong_psum_transpose, "all-gather-batching": _wrong_all_gather_batching}

if __name__ == "__main__":
    main()
