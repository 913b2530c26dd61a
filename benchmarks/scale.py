"""How the engine scales with the number of devices and messages: tiny payloads, many devices.

    python benchmarks/scale.py                       # every row (issue 26's table and the algorithm rows)
    python benchmarks/scale.py --quick               # small rows only, once each
    python benchmarks/scale.py --only psum-ring-1024 # rows by key (shown in the table's last column)
    python benchmarks/scale.py --profile             # and where each row's time goes (cProfile)
    python benchmarks/scale.py --repeat 1            # one run per row instead of the best of 3

Each row runs in fresh subprocesses (so each peak RSS is its own): the simulator `--repeat` times (best of
3 by default; its peak RSS is that of the best run's process), its result checked against a plain numpy
evaluation of the same global output (best of 5: the numpy column), and real JAX on as many CPU virtual
devices for the 'direct' rows of at most `--jax-max-devices` devices (best of 5, its result checked too).

Peers and limits, as ratios of the row's simulated messages per second: SimGrid's 5.3 k messages/s at 1024
hosts (measured once side by side, SimGrid 4.1 through its Python S4U API on the same star network: issue
26), LogGOPSim's published 1 M events/s (C++), and raw SimPy's events/s, measured at the start of this run on
this machine (`_scale_cases.simpy_events_per_s`): the rate a SimPy-driven simulator cannot beat with one
event per message.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _scale_cases import QUICK, Row, abstract_workload, body, network, rows, simpy_events_per_s, workload
from _timing import best_of

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))

SIMGRID_MESSAGES_PER_S = 5.3e3  # SimGrid 4.1, 1024 hosts, plain max-min model (issue 26, measured side by side)
LOGGOPSIM_EVENTS_PER_S = 1e6  # LogGOPSim's published rate (C++)
# XLA:CPU runs one thread per device in a collective; on 2 cores 1024 of them miss its 40 s rendezvous
# deadline and the process aborts, so by default JAX is timed up to 256 devices.
JAX_MAX_DEVICES = 256
PROFILE_LINES = 12


def simulator_row(row: Row, profile: bool = False) -> dict:
    """Run one row on the simulator here (under cProfile with `profile`) and check it against numpy."""
    import resource

    import collectives
    import sim

    if row.payload == "abstract":
        return _abstract_row(row)
    inputs, evaluate = workload(row.op, row.devices)
    mesh = sim.Mesh({"x": row.devices}, network=network(row.network, row.devices))
    specs = tuple(sim.P("x") for _ in inputs)
    f = sim.shard_map(body(row.op, row.devices, row.algorithm, collectives), mesh=mesh, in_specs=specs,
                      out_specs=sim.P("x"), check_vma=False)
    profiler = _profiler() if profile else None
    start = time.perf_counter()
    run = f.run(*inputs)
    wall_s = time.perf_counter() - start
    if profiler is not None:
        profiler.disable()
    numpy_s, expect = best_of(lambda: evaluate(*inputs))
    if not np.array_equal(run.outputs, expect):
        raise SystemExit(f"{row.key}: the simulator's result differs from numpy's")
    picked = sorted({c.algorithm or "" for c in run.calls})
    return {"wall_s": wall_s, "messages": len(run.trace), "numpy_s": numpy_s, "ran": ",".join(picked),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "profile": None if profiler is None else _profile_text(profiler)}


def _abstract_row(row: Row) -> dict:
    """An abstract row: the run with shapes and dtypes only, its output's shape checked; on 8 devices or fewer
    also the same run with real bytes, whose trace and times it must equal exactly (`ran` says so)."""
    import json as _json
    import resource

    import collectives
    import sim

    inputs, expect, real = abstract_workload(row.op, row.devices)
    mesh = sim.Mesh({"x": row.devices}, network=network(row.network, row.devices))
    f = sim.shard_map(body(row.op, row.devices, row.algorithm, collectives), mesh=mesh, in_specs=sim.P("x"),
                      out_specs=sim.P("x"), check_vma=False)
    start = time.perf_counter()
    run = f.run(*inputs)
    wall_s = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if run.outputs != expect:
        raise SystemExit(f"{row.key}: the abstract output is {run.outputs}, not {expect}")
    ran = f"abstract, {run.trace.total_bytes / 2**30:,.0f} GiB over the network"
    if row.devices <= 8:
        bytes_run = f.run(*real())
        same = (_json.dumps(bytes_run.trace.to_json()) == _json.dumps(run.trace.to_json())
                and bytes_run.end_time_s == run.end_time_s)
        if not same:
            raise SystemExit(f"{row.key}: the abstract run's trace or times differ from the run with bytes")
        ran += f"; trace and times == bytes (end {run.end_time_s * 1e3:.6f} ms)"
    return {"wall_s": wall_s, "messages": len(run.trace), "numpy_s": float("nan"), "ran": ran,
            "peak_rss_mib": peak, "profile": None}


def jax_row(row: Row) -> dict:
    """Best-of-5 wall time of the real `jax.lax` program on the row's CPU virtual devices (XLA_FLAGS set by
    the caller)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    inputs, evaluate = workload(row.op, row.devices)
    mesh = Mesh(np.array(jax.devices()[:row.devices]), ("x",))
    spec = PartitionSpec("x")
    f = jax.jit(jax.shard_map(body(row.op, row.devices, "direct", jax.lax), mesh=mesh, in_specs=spec,
                              out_specs=spec, check_vma=False))
    placed = [jax.device_put(x, NamedSharding(mesh, spec)) for x in inputs]
    out = f(*placed).block_until_ready()
    if not np.array_equal(np.asarray(out), evaluate(*inputs)):
        raise SystemExit(f"{row.key}: JAX's result differs from numpy's")
    best_s, _ = best_of(lambda: f(*placed).block_until_ready())
    return {"jax_s": best_s}


def _profiler():
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    return profiler


def _profile_text(profiler) -> str:
    """The phases of the run and its heaviest functions by own time."""
    from _profile import phases, top

    return phases(profiler) + "\n" + top(profiler, "tottime", PROFILE_LINES)


def _subprocess(args: list[str], env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env)
    if out.returncode:
        return {"failed": (out.stderr.strip().splitlines() or ["(no message)"])[-1][:200]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(row: Row, repeat: int, jax_max_devices: int, profile: bool) -> dict:
    """The row's best simulator run of `repeat` (each in a fresh process), its JAX time, and its profile."""
    runs = [_subprocess(["--simulator-row", json.dumps(row.__dict__)]) for _ in range(repeat)]
    good = [r for r in runs if "failed" not in r]
    result = min(good, key=lambda r: r["wall_s"]) if good else runs[0]
    if good and row.algorithm == "direct" and row.network == "fully_connected" and row.devices <= jax_max_devices \
            and row.op != "ragged_all_to_all" and row.payload == "bytes":  # XLA:CPU cannot run ragged_all_to_all
        env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={row.devices}")
        result.update(_subprocess(["--jax-row", json.dumps(row.__dict__)], env))
    if good and profile:
        result["profile"] = _subprocess(["--simulator-row", json.dumps(row.__dict__), "--profile"]).get("profile")
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small rows only, once each")
    parser.add_argument("--only", nargs="+", metavar="KEY", help="run only these rows (keys as the table shows)")
    parser.add_argument("--repeat", type=int, default=None, help="simulator runs per row, the best kept "
                                                                 "(default 3; 1 with --quick)")
    parser.add_argument("--profile", action="store_true", help="print where each row's time goes (cProfile of "
                                                               "one more run: phases and top functions)")
    parser.add_argument("--jax-max-devices", type=int, default=JAX_MAX_DEVICES,
                        help=f"time JAX on rows of at most this many devices (default {JAX_MAX_DEVICES}; 0: none)")
    parser.add_argument("--simulator-row", help=argparse.SUPPRESS)
    parser.add_argument("--jax-row", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.simulator_row:
        print(json.dumps(simulator_row(Row(**json.loads(args.simulator_row)), args.profile)))
        return 0
    if args.jax_row:
        print(json.dumps(jax_row(Row(**json.loads(args.jax_row)))))
        return 0
    chosen = QUICK if args.quick else rows()
    if args.only:
        chosen = [row for row in rows() + QUICK if row.key in args.only]
    repeat = args.repeat or (1 if args.quick else 3)
    simpy_rate = simpy_events_per_s()
    print(f"raw SimPy here now: {simpy_rate:,.0f} events/s; peers: SimGrid {SIMGRID_MESSAGES_PER_S:,.0f} messages/s "
          f"(1024 hosts), LogGOPSim {LOGGOPSIM_EVENTS_PER_S:,.0f} events/s; simulator best of {repeat}")
    print(HEADER)
    for row in chosen:
        result = measure(row, repeat, args.jax_max_devices, args.profile)
        print(line(row, result, simpy_rate), flush=True)
        if result.get("profile"):
            print(f"--- where {row.key}'s time goes ---\n{result['profile']}", flush=True)
    return 0


HEADER = (f"{'row':<52} {'devices':>7} {'wall s':>8} {'messages':>10} {'msg/s':>10} {'peak RSS':>9} "
          f"{'numpy s':>9} {'jax s':>9} {'/SimGrid':>8} {'/LogGOPSim':>10} {'/SimPy':>7}  key")


def line(row: Row, result: dict, simpy_rate: float) -> str:
    """The row's line of the table (its failure's last line when the simulator refused or failed it)."""
    if "wall_s" not in result:
        return f"{row.label:<52} {row.devices:>7}  failed: {result.get('failed')}  {row.key}"
    rate = result["messages"] / result["wall_s"]
    jax_s = result.get("jax_s")
    label = row.label + (f" (ran {result['ran']})" if row.algorithm == "auto" else "")
    if row.payload != "bytes":
        label = f"{row.label} ({result['ran']})"
    return (f"{label:<52} {row.devices:>7} {result['wall_s']:>8.3f} {result['messages']:>10,} {rate:>10,.0f} "
            f"{result['peak_rss_mib']:>5.0f} MiB {result['numpy_s']:>9.2e} "
            f"{'-' if jax_s is None else f'{jax_s:.2e}':>9} {rate / SIMGRID_MESSAGES_PER_S:>7.1f}x "
            f"{rate / LOGGOPSIM_EVENTS_PER_S:>9.2f}x {rate / simpy_rate:>6.2f}x  {row.key}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
