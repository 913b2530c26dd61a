"""The rules campaign's nested and partial-manual programs through the bridge.

`python tests/bridge_nested_child.py N M` prints JSON. For every collective with a JAX binding that can be
nested (`oracles._rules_control.constructs`), `N` calls drawn by the campaign's strategy (derandomized: the
same calls on every run; any dtype, meshes of up to 8 devices) become the campaign's nested program
(`oracles._rules_control.Nested`: the collective in a shard_map manual over its own axes, inside one manual
over the others); for every collective with a JAX binding, `M` calls of the partial_manual kind
(`scenarios.campaign._vma_cases.partial_cases`) become its partial program (`oracles._rules_partial`: manual
over the collective's axes and some others, the rest and an added axis left to the compiler, the arguments
sharded over every axis). Each program runs in JAX and through `oracles.simulate_jax`; the outputs must be
equal bit for bit. Prints {"counts": {op: nested programs compared}, "flat": calls on a one-axis mesh,
"partial": {op: partial programs compared}, "differ": [...]}.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from bridge_checks import same_bits
from hypothesis import HealthCheck, given, settings

import collectives
import oracles
import oracles._jax_setup
from oracles._rules import Program
from oracles._rules_control import Nested, constructs
from scenarios.campaign._rules_search import drawn
from scenarios.campaign._vma_cases import partial_cases


def partial(examples: int, differ: list[str]) -> dict:
    """The partial_manual kind's programs of every collective with arrays, JAX against the bridge."""
    import jax
    from jax.sharding import Mesh, NamedSharding

    from oracles import _rules_partial as rp

    counts: Counter[str] = Counter()
    for op in [d.name for d in collectives.REGISTRY.values() if d.jax is not None and d.arrays]:
        @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(partial_cases(op))
        def compare(drawn: tuple) -> None:
            case, check_vma, manual = drawn
            if rp.bfloat16_reduction(case):  # JAX's compile aborts the process (FINDINGS.md 16)
                return
            program = Program(case, check_vma)
            names = [(rp.AUTO, *rp._names(s)) for s in program.jax_specs]
            args = [rp._split(case, g, n[1:], k not in program.linear)
                    for k, (g, n) in enumerate(zip(program.globals, names))]
            shape = rp.layout(case)
            mesh = Mesh(np.array(jax.devices()[:int(np.prod(list(shape.values())))]).reshape(tuple(shape.values())),
                        tuple(shape))
            f = jax.jit(jax.shard_map(rp._body(case, manual), mesh=mesh,
                                      in_specs=tuple(rp._spec(shape, n, manual) for n in names),
                                      out_specs=rp._spec(shape, tuple(shape), manual), axis_names=set(manual),
                                      check_vma=check_vma))
            placed = [jax.device_put(a, NamedSharding(mesh, rp._spec(shape, n, tuple(shape))))
                      for a, n in zip(args, names)]
            try:
                want = np.asarray(f(*placed))
            except Exception:  # JAX refuses the program (the campaign's kind reports that): nothing to compare
                return
            got = np.asarray(oracles.simulate_jax(f, *placed).outputs)
            counts[case.op] += 1
            if not same_bits([want], [got]):
                differ.append(f"partial {case.op} manual={manual} check_vma={check_vma} {case}: JAX "
                              f"{want.reshape(-1)[:6]}, bridge {got.reshape(-1)[:6]}")

        compare()
    return dict(counts)


def main(examples: int, partial_examples: int) -> dict:
    counts: Counter[str] = Counter()
    differ: list[str] = []
    ops = [d.name for d in collectives.REGISTRY.values() if d.jax is not None and "nested" in constructs(d.name)]
    for op in ops:
        @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(drawn(op, False))
        def compare(pair: tuple) -> None:
            case, check_vma = pair
            op = case.op
            program = Program(case, check_vma)
            nested = Nested(program)
            if not nested.outer:
                counts["flat"] += 1
                return
            f = nested.program()
            want = np.asarray(f(*program.globals))
            got = np.asarray(oracles.simulate_jax(f, *program.globals).outputs)
            counts[op] += 1
            if not same_bits([want], [got]):
                differ.append(f"{op} check_vma={check_vma} {case}: JAX {want.reshape(-1)[:6]}, bridge "
                              f"{got.reshape(-1)[:6]}")

        compare()
    flat = counts.pop("flat", 0)
    return {"counts": dict(counts), "flat": flat, "partial": partial(partial_examples, differ), "differ": differ}


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
