"""What a collective call costs inside a device program: the ppermute ring program (n - 1 calls over n devices).

    python benchmarks/calls.py              # 256 devices, 255 calls, best of 3
    python benchmarks/calls.py --devices 64 --repeat 5 --count-calls

Each device shifts its block one step round the ring n - 1 times, so every block comes back home. The
result is checked against the same program in numpy (np.roll of the global array) before any time is
shown. Columns: the simulator's seconds (best of `--repeat`), simulated messages per second, microseconds
per device per call, the numpy evaluation's seconds in the same run, and with `--count-calls` the Python
function calls per device per call (cProfile, one more run).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import numpy as np
from _timing import best_of

import collectives
import sim


def ring_program(n: int) -> sim.ShardMapped:
    """n - 1 ppermutes round a ring of n devices, each device's block one float32."""
    perm = [(i, (i + 1) % n) for i in range(n)]

    def body(v):
        for _ in range(n - 1):
            v = collectives.ppermute(v, "x", perm)
        return v

    return sim.shard_map(body, mesh=sim.Mesh({"x": n}), in_specs=sim.P("x"), out_specs=sim.P("x"),
                         check_vma=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--count-calls", action="store_true", help="also count Python calls (one more run)")
    args = parser.parse_args(argv)
    n = args.devices
    x = np.arange(n, dtype=np.float32)
    program = ring_program(n)
    simulated, run = best_of(lambda: program.run(x), args.repeat)

    def in_numpy() -> np.ndarray:
        v = x
        for _ in range(n - 1):
            v = np.roll(v, 1)
        return v

    plain, expected = best_of(in_numpy, args.repeat)
    if run.outputs.tobytes() != expected.tobytes():
        raise SystemExit("the simulator's result differs from numpy's: nothing timed")
    messages, device_calls = len(run.trace), n * (n - 1)
    print(f"ppermute ring, {n} devices, {n - 1} calls: {simulated:.2f} s, {messages / simulated:,.0f} msg/s, "
          f"{simulated / device_calls * 1e6:.1f} us per device per call; numpy {plain * 1e3:.2f} ms")
    if args.count_calls:
        profile = cProfile.Profile()
        profile.runcall(program.run, x)
        total = pstats.Stats(profile).total_calls
        print(f"Python calls per device per call: {total / device_calls:.0f}")


if __name__ == "__main__":
    main()
