"""What a collective call costs inside a device program: the ppermute ring program (n - 1 calls over n devices).

    python benchmarks/calls.py              # 256 devices, 255 calls, best of 3
    python benchmarks/calls.py --devices 64 --repeat 5 --count-calls
    python benchmarks/calls.py --against ../main --rounds 3    # side by side with another checkout's code

Each device shifts its block one step round the ring n - 1 times, so every block comes back home. The
result is checked against the same program in numpy (np.roll of the global array) before any time is
shown. Columns: the simulator's seconds (best of `--repeat`), simulated messages per second, microseconds
per device per call, the numpy evaluation's seconds in the same run, and with `--count-calls` the Python
function calls per device per call (cProfile, one more run).

`--against DIR` times the same program on the code of the checkout DIR and on this checkout's, each in a
process of its own, taking turns `--rounds` times (so both see the same load on a shared machine): the best
wall and CPU seconds of each, and this checkout's over DIR's.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import subprocess
import sys
import time
from pathlib import Path

# `--code DIR` (a child of `--against`): the simulator's packages are imported from DIR
sys.path.insert(1, sys.argv[sys.argv.index("--code") + 1] if "--code" in sys.argv else
                str(Path(__file__).resolve().parent.parent))

import numpy as np
from _timing import best_of

import collectives
import sim

_HERE = Path(__file__).resolve()
_CODE = Path(collectives.__file__).resolve().parent.parent  # the checkout whose code runs


def ring_program(n: int) -> sim.ShardMapped:
    """n - 1 ppermutes round a ring of n devices, each device's block one float32."""
    perm = [(i, (i + 1) % n) for i in range(n)]

    def body(v):
        for _ in range(n - 1):
            v = collectives.ppermute(v, "x", perm)
        return v

    return sim.shard_map(body, mesh=sim.Mesh({"x": n}), in_specs=sim.P("x"), out_specs=sim.P("x"),
                         check_vma=False)


def measure(n: int, repeat: int) -> dict:
    """The ring program's best wall and CPU seconds over `repeat` runs, its messages, and numpy's seconds;
    raises when the simulator's result differs from numpy's."""
    x = np.arange(n, dtype=np.float32)
    program = ring_program(n)
    walls, cpus = [], []
    for _ in range(repeat):  # both clocks on the same runs
        wall, cpu = time.perf_counter(), time.process_time()
        run = program.run(x)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)

    def in_numpy() -> np.ndarray:
        v = x
        for _ in range(n - 1):
            v = np.roll(v, 1)
        return v

    plain, expected = best_of(in_numpy, repeat)
    if run.outputs.tobytes() != expected.tobytes():
        raise SystemExit("the simulator's result differs from numpy's: nothing timed")
    return {"wall_s": min(walls), "cpu_s": min(cpus), "messages": len(run.trace), "numpy_s": plain}


def count_calls(n: int) -> float:
    """Python function calls per device per call in one run (cProfile)."""
    x = np.arange(n, dtype=np.float32)
    program = ring_program(n)
    profile = cProfile.Profile()
    profile.runcall(program.run, x)
    return pstats.Stats(profile).total_calls / (n * (n - 1))


def side_by_side(n: int, repeat: int, rounds: int, against: Path) -> None:
    """Time the program on `against`'s code and on this checkout's, taking turns (see the module's docstring)."""
    best: dict[str, dict] = {}
    for _ in range(rounds):
        for name, code in (("against", against), ("this", _CODE)):
            out = subprocess.run([sys.executable, str(_HERE), "--devices", str(n), "--repeat", str(repeat),
                                  "--code", str(code), "--json"], check=True, capture_output=True, text=True)
            got = json.loads(out.stdout.splitlines()[-1])
            kept = best.setdefault(name, got)
            for key in ("wall_s", "cpu_s"):
                kept[key] = min(kept[key], got[key])
    for name, code in (("against", against), ("this", _CODE)):
        print(f"{code!s:40s} wall {best[name]['wall_s']:.3f} s  cpu {best[name]['cpu_s']:.3f} s")
    print(f"this / against: wall {best['this']['wall_s'] / best['against']['wall_s']:.2f}, "
          f"cpu {best['this']['cpu_s'] / best['against']['cpu_s']:.2f} "
          f"(best of {repeat} runs in each of {rounds} turns)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--count-calls", action="store_true", help="also count Python calls (one more run)")
    parser.add_argument("--against", type=Path, help="another checkout whose code runs side by side")
    parser.add_argument("--rounds", type=int, default=2, help="turns each side takes with --against")
    parser.add_argument("--code", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    n = args.devices
    if args.against is not None:
        side_by_side(n, args.repeat, args.rounds, args.against.resolve())
        return
    got = measure(n, args.repeat)
    if args.json:
        print(json.dumps(got))
        return
    simulated, device_calls = got["wall_s"], n * (n - 1)
    print(f"ppermute ring, {n} devices, {n - 1} calls: {simulated:.2f} s (cpu {got['cpu_s']:.2f} s), "
          f"{got['messages'] / simulated:,.0f} msg/s, {simulated / device_calls * 1e6:.1f} us per device per call; "
          f"numpy {got['numpy_s'] * 1e3:.2f} ms")
    if args.count_calls:
        print(f"Python calls per device per call: {count_calls(n):.0f}")


if __name__ == "__main__":
    main()
