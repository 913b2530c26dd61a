"""What a run costs besides its messages: placing the inputs in every device memory, starting every device
program, the results out. Each row is a program on many devices, in CPU seconds of this process (a shared
machine's other work barely moves them): the first run of a fresh `shard_map` (cold) and the best of the
next `--repeat` runs (warm, after a full garbage collection each), with the simulated messages per second
of the warm run.

    python benchmarks/start.py                        # every row
    python benchmarks/start.py --only identity-1024   # rows by key
    python benchmarks/start.py --repeat 5

The `identity` rows return their input: no collective, nothing but the fixed cost. The others are the
few-message algorithm rows of `benchmarks/scale.py` (about 10 k messages at 1024 devices), whose
per-message work is timed by that benchmark; an all_to_all row of a million messages is there to show that
the fixed cost's paths cost the big rows nothing.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np
from _scale_cases import body, workload

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

ROWS = [("identity", 1024, "direct"), ("identity", 4096, "direct"), ("psum", 1024, "recursive_doubling"),
        ("psum", 1024, "rabenseifner"), ("psum", 1024, "tree"), ("all_gather", 1024, "recursive_doubling"),
        ("psum_scatter", 1024, "recursive_halving"), ("all_to_all", 1024, "direct")]


def measure(op: str, n: int, algorithm: str, repeat: int) -> dict:
    """Cold and best warm CPU seconds of one row, its message count, its result checked against numpy."""
    import collectives
    import sim

    if op == "identity":
        inputs, evaluate, program = (np.arange(n, dtype=np.float32),), (lambda x: x), (lambda v: v)
    else:
        (inputs, evaluate), program = workload(op, n), body(op, n, algorithm, collectives)
    f = sim.shard_map(program, mesh=sim.Mesh({"x": n}), in_specs=tuple(sim.P("x") for _ in inputs),
                      out_specs=sim.P("x"), check_vma=False)
    gc.collect()
    start = time.process_time()
    run = f.run(*inputs)
    cold_s = time.process_time() - start
    if not np.array_equal(run.outputs, evaluate(*inputs)):
        raise SystemExit(f"{op}-{algorithm}-{n}: the simulator's result differs from numpy's")
    warm = []
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        run = f.run(*inputs)
        warm.append(time.process_time() - start)
    return {"cold_s": cold_s, "warm_s": min(warm), "messages": len(run.trace)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="row keys, e.g. identity-1024 psum-recursive_doubling-1024")
    parser.add_argument("--repeat", type=int, default=3, help="warm runs per row (the best is shown)")
    args = parser.parse_args()
    print(f"{'row':40s} {'cold ms':>9s} {'warm ms':>9s} {'messages':>9s} {'warm msg/s':>11s}")
    for op, n, algorithm in ROWS:
        key = f"{op}-{n}" if op == "identity" else f"{op}-{algorithm}-{n}"
        if args.only and key not in args.only:
            continue
        row = measure(op, n, algorithm, args.repeat)
        rate = row["messages"] / row["warm_s"] if row["messages"] else float("nan")
        print(f"{key:40s} {row['cold_s'] * 1e3:9.1f} {row['warm_s'] * 1e3:9.1f} {row['messages']:9d} {rate:11,.0f}")


if __name__ == "__main__":
    main()
