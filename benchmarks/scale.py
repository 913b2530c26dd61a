"""How the engine scales with the number of devices and messages: tiny payloads, many devices.

    python benchmarks/scale.py              # every case of the table in BENCHMARKS.md
    python benchmarks/scale.py --quick      # the small cases only

Each case runs once in a fresh subprocess (so its peak RSS is its own), checks its result against a plain
numpy evaluation, and reports wall time, messages, messages per second, peak RSS and the most threads the
process had (OS threads, read inside a device program). The last line fits wall time ~ messages^k over the
all_to_all cases and states k.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))

CASES = [("all_to_all", 64), ("all_to_all", 256), ("all_to_all", 1024), ("ppermute", 1024), ("ppermute", 4096),
         ("psum", 1024), ("all_gather", 1024)]
QUICK = [("all_to_all", 64), ("all_to_all", 256), ("ppermute", 1024), ("psum", 256), ("all_gather", 256)]


def _program(op: str, n: int):
    """The per-device program, its global input and the numpy answer for `op` on n devices."""
    import collectives

    if op == "all_to_all":  # one float per destination
        x = np.arange(n * n, dtype=np.float32)
        body = lambda v: collectives.all_to_all(v, "x", 0, 0, tiled=True)
        expect = x.reshape(n, n).T.reshape(-1)
    elif op == "ppermute":  # a ring
        x = np.arange(n, dtype=np.float32)
        perm = [(i, (i + 1) % n) for i in range(n)]
        body = lambda v: collectives.ppermute(v, "x", perm)
        expect = np.roll(x, 1)
    elif op == "psum":  # 16 floats
        x = np.arange(n * 16, dtype=np.float32) % 7
        body = lambda v: collectives.psum(v, "x")
        expect = np.tile(x.reshape(n, 16).sum(0), n)
    else:  # tiled all_gather of 16 floats
        x = np.arange(n * 16, dtype=np.float32)
        body = lambda v: collectives.all_gather(v, "x", tiled=True)
        expect = np.tile(x, n)
    return body, x, expect


def one_case(op: str, n: int) -> dict:
    """Run one case here and return its measurements; the thread count is read inside a device program."""
    import resource

    import sim

    body, x, expect = _program(op, n)
    threads = [_os_threads()]

    def counted(v):
        if len(threads) < 3:  # the first devices to run: the thread count cannot depend on which
            threads.append(_os_threads())
        return body(v)

    f = sim.shard_map(counted, mesh=sim.Mesh({"x": n}), in_specs=sim.P("x"), out_specs=sim.P("x"),
                      check_vma=False)
    start = time.perf_counter()
    run = f.run(x)
    wall_s = time.perf_counter() - start
    if not np.array_equal(run.outputs, expect):
        raise SystemExit(f"{op} on {n} devices: wrong result")
    return {"op": op, "devices": n, "wall_s": wall_s, "messages": len(run.trace), "sim_time_s": run.end_time_s,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "threads": max(threads)}


def _os_threads() -> int:
    """The process's OS threads (numpy's BLAS pool included), from /proc."""
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("Threads:")).split()[1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small cases only")
    parser.add_argument("--case", nargs=2, metavar=("OP", "DEVICES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(one_case(args.case[0], int(args.case[1]))))
        return 0
    rows = []
    for op, n in QUICK if args.quick else CASES:
        out = subprocess.run([sys.executable, __file__, "--case", op, str(n)], capture_output=True, text=True)
        if out.returncode:
            print(out.stderr, file=sys.stderr)
            return 1
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        show(rows[-1])
    fit(rows)
    return 0


def show(row: dict) -> None:
    print(f"{row['op']:<11} {row['devices']:>5} devices  {row['wall_s']:8.2f} s  {row['messages']:>9} messages  "
          f"{row['messages'] / row['wall_s']:>10,.0f} msg/s  peak RSS {row['peak_rss_mib']:7.0f} MiB  "
          f"threads {row['threads']}", flush=True)


def fit(rows: list[dict]) -> None:
    """Least-squares exponent k of wall time ~ messages^k over the all_to_all rows."""
    points = [(r["messages"], r["wall_s"]) for r in rows if r["op"] == "all_to_all"]
    if len(points) >= 2:
        k = np.polyfit(np.log([m for m, _ in points]), np.log([t for _, t in points]), 1)[0]
        print(f"all_to_all: wall time grows as messages^{k:.2f}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
