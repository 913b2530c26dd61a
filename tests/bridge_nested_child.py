"""The rules campaign's nested programs through the bridge: `python tests/bridge_nested_child.py N` prints JSON.

For every collective with a JAX binding that can be nested (`oracles._rules_control.constructs`), `N` calls
drawn by the campaign's strategy (derandomized: the same calls on every run; any dtype, meshes of up to 8
devices) become the campaign's nested program (`oracles._rules_control.Nested`: the collective in a
shard_map manual over its own axes, inside one manual over the others). Each program that nests (a mesh of
two axes or more) runs in JAX and through `oracles.simulate_jax`; the outputs must be equal bit for bit.
Prints {"counts": {op: programs compared}, "flat": calls on a one-axis mesh, "differ": [...]}.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from hypothesis import HealthCheck, given, settings

import collectives
import oracles
import oracles._jax_setup
from oracles._rules import Program
from oracles._rules_control import Nested, constructs
from scenarios.campaign._rules_search import drawn


def same(want: np.ndarray, got: np.ndarray) -> bool:
    """Bit for bit (NaNs included)."""
    return want.dtype == got.dtype and want.shape == got.shape and want.tobytes() == got.tobytes()


def main(examples: int) -> dict:
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
            if not same(want, got):
                differ.append(f"{op} check_vma={check_vma} {case}: JAX {want.reshape(-1)[:6]}, bridge "
                              f"{got.reshape(-1)[:6]}")

        compare()
    flat = counts.pop("flat", 0)
    return {"counts": dict(counts), "flat": flat, "differ": differ}


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    print(json.dumps(main(int(sys.argv[1]))))
