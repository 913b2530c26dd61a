"""How the engine scales with the number of devices and messages: tiny payloads, many devices.

    python benchmarks/scale.py                      # every case of the table in BENCHMARKS.md
    python benchmarks/scale.py --quick              # the small cases only
    python benchmarks/scale.py --jax-max-devices 0  # without the JAX column

Cases run on the default fully connected network unless named: the 1024-device all_to_all also runs on a
switch (`sim.Network.switch()`) and on a 32 x 32 torus (`sim.Network.torus((32, 32))`), side by side, with
the same latency and bandwidth (1 us, 100 GB/s): the cost of routes and max-min fair sharing.

Each case runs in fresh subprocesses (so each peak RSS is its own): the simulator once, with its result
checked against a plain numpy evaluation of the same collective, and real JAX on as many CPU virtual devices
(up to `--jax-max-devices`), best of 5, its result checked too. The table gives the simulator's wall time,
messages, messages per second, peak RSS and the most OS threads its process had (read inside a device
program), then the numpy and JAX wall times. The last line fits wall time ~ messages^k over the all_to_all
cases and states k.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))

CASES = [("all_to_all", 64), ("all_to_all", 256), ("all_to_all", 1024), ("all_to_all", 1024, "switch"),
         ("all_to_all", 1024, "torus"), ("ppermute", 1024), ("ppermute", 4096), ("psum", 1024), ("all_gather", 1024)]
QUICK = [("all_to_all", 64), ("all_to_all", 256), ("ppermute", 1024), ("psum", 256), ("all_gather", 256)]
# XLA:CPU runs one thread per device in a collective; on 2 cores 1024 of them miss its 40 s rendezvous
# deadline and the process aborts, so by default JAX is timed up to 256 devices.
JAX_MAX_DEVICES = 256


def workload(op: str, n: int) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
    """The global input of `op` on n devices and its plain numpy evaluation (the global output)."""
    if op == "all_to_all":  # one float per destination
        return np.arange(n * n, dtype=np.float32), lambda x: np.ascontiguousarray(x.reshape(n, n).T).reshape(-1)
    if op == "ppermute":  # a ring
        return np.arange(n, dtype=np.float32), lambda x: np.roll(x, 1)
    if op == "psum":  # 16 floats, integers so any order of addition is exact
        return np.arange(n * 16, dtype=np.float32) % 7, lambda x: np.tile(x.reshape(n, 16).sum(0), n)
    return np.arange(n * 16, dtype=np.float32), lambda x: np.tile(x, n)  # tiled all_gather of 16 floats


def body(op: str, n: int, lax) -> Callable:
    """The per-device program, with `lax` either meshsim's `collectives` or `jax.lax`."""
    if op == "all_to_all":
        return lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True)
    if op == "ppermute":
        perm = [(i, (i + 1) % n) for i in range(n)]
        return lambda v: lax.ppermute(v, "x", perm)
    if op == "psum":
        return lambda v: lax.psum(v, "x")
    return lambda v: lax.all_gather(v, "x", tiled=True)


def network(name: str, n: int):
    """The case's network: fully connected (the default), a switch, or a square 2-D torus of n devices."""
    import sim

    if name == "switch":
        return sim.Network.switch()
    if name == "torus":
        side = round(n ** 0.5)
        return sim.Network.torus((side, n // side))
    return sim.Network.fully_connected()


def simulator_case(op: str, n: int, network_name: str = "fully_connected") -> dict:
    """Run one case on the simulator here; the thread count is read inside device programs."""
    import resource

    import collectives
    import sim

    x, evaluate = workload(op, n)
    program, threads = body(op, n, collectives), [_os_threads()]

    def counted(v):
        if len(threads) < 3:  # the first devices to run: the thread count cannot depend on which
            threads.append(_os_threads())
        return program(v)

    f = sim.shard_map(counted, mesh=sim.Mesh({"x": n}, network=network(network_name, n)), in_specs=sim.P("x"),
                      out_specs=sim.P("x"),
                      check_vma=False)
    start = time.perf_counter()
    run = f.run(x)
    wall_s = time.perf_counter() - start
    numpy_s, expect = _best(lambda: evaluate(x))
    if not np.array_equal(run.outputs, expect):
        raise SystemExit(f"{op} on {n} devices: the simulator's result differs from numpy's")
    return {"op": op, "devices": n, "network": network_name, "wall_s": wall_s, "messages": len(run.trace),
            "numpy_s": numpy_s,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "threads": max(threads)}


def jax_case(op: str, n: int) -> dict:
    """Best-of-5 wall time of the real `jax.lax` op on n CPU virtual devices (XLA_FLAGS set by the caller)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    x, evaluate = workload(op, n)
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))
    spec = PartitionSpec("x")
    f = jax.jit(jax.shard_map(body(op, n, jax.lax), mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))
    placed = jax.device_put(x, NamedSharding(mesh, spec))
    out = f(placed).block_until_ready()
    if not np.array_equal(np.asarray(out), evaluate(x)):
        raise SystemExit(f"{op} on {n} devices: JAX's result differs from numpy's")
    best_s, _ = _best(lambda: f(placed).block_until_ready())
    return {"jax_s": best_s}


def _best(fn: Callable, repeat: int = 5) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def _os_threads() -> int:
    """The process's OS threads (numpy's BLAS pool included), from /proc."""
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("Threads:")).split()[1])


def _subprocess(flag: str, op: str, n: int, env: dict | None = None, *more: str) -> dict:
    out = subprocess.run([sys.executable, __file__, flag, op, str(n), *more], capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"{flag} {op} {n} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small cases only")
    parser.add_argument("--jax-max-devices", type=int, default=JAX_MAX_DEVICES,
                        help=f"time JAX on cases of at most this many devices (default {JAX_MAX_DEVICES}; 0: none)")
    parser.add_argument("--simulator-case", nargs="+", metavar="OP DEVICES [NETWORK]", help=argparse.SUPPRESS)
    parser.add_argument("--jax-case", nargs=2, metavar=("OP", "DEVICES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.simulator_case:
        op, n, *name = args.simulator_case
        print(json.dumps(simulator_case(op, int(n), *name)))
        return 0
    if args.jax_case:
        op, n = args.jax_case
        print(json.dumps(jax_case(op, int(n))))
        return 0
    rows = []
    print(f"{'op':<11} {'devices':>7} {'network':>15} {'wall s':>8} {'messages':>9} {'msg/s':>10} {'peak RSS':>9} "
          f"{'threads':>7} {'numpy s':>9} {'jax s':>9} {'sim/numpy':>10} {'sim/jax':>8}")
    for op, n, *name in QUICK if args.quick else CASES:
        row = _subprocess("--simulator-case", op, n, None, *name)
        if n <= args.jax_max_devices and not name:
            env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={n}")
            row.update(_subprocess("--jax-case", op, n, env))
        rows.append(row)
        show(row)
    fit(rows)
    return 0


def show(row: dict) -> None:
    jax_s = row.get("jax_s")
    jax_text = "-" if jax_s is None else f"{jax_s:.2e}"
    ratio = "-" if jax_s is None else f"{row['wall_s'] / jax_s:.1f}x"
    print(f"{row['op']:<11} {row['devices']:>7} {row['network']:>15} {row['wall_s']:>8.3f} {row['messages']:>9} "
          f"{row['messages'] / row['wall_s']:>10,.0f} {row['peak_rss_mib']:>5.0f} MiB {row['threads']:>7} "
          f"{row['numpy_s']:>9.2e} {jax_text:>9} {row['wall_s'] / row['numpy_s']:>9.0f}x {ratio:>8}", flush=True)


def fit(rows: list[dict]) -> None:
    """Least-squares exponent k of wall time ~ messages^k over the all_to_all rows."""
    points = [(r["messages"], r["wall_s"]) for r in rows
              if r["op"] == "all_to_all" and r["network"] == "fully_connected"]
    if len(points) >= 2:
        k = np.polyfit(np.log([m for m, _ in points]), np.log([t for _, t in points]), 1)[0]
        print(f"all_to_all: wall time grows as messages^{k:.2f}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
