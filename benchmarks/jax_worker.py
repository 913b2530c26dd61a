"""Time JAX's all_to_all or ragged_all_to_all on 8 CPU virtual devices; print the result as one JSON line.

Run by `run.py` in a fresh process, because the virtual device count must be set before JAX starts:

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python benchmarks/jax_worker.py --case all_to_all \
        --rows R --repeat N

The inputs are generated from the same seed as in `run.py`, placed on the devices before timing; compile
time is measured apart; each timed call ends with `block_until_ready`. The output line carries every run's
seconds, the path taken ("real", or for ragged_all_to_all on XLA:CPU "decomposition", see
`_jax_ragged.py`) and a digest of the global result, which `run.py` compares with the numpy reference.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from _ragged import RaggedWorkload
from _timing import peak_resident_gib
from _workload import AXIS_NAME, DEVICES, Workload, digest, make_input

CASES = ("all_to_all", "ragged_all_to_all")

_FLAG = "--xla_force_host_platform_device_count"


def _configure_devices(count: int) -> None:
    """Ask XLA for `count` CPU devices; must run before jax is imported."""
    if _FLAG not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}={count}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES, default="all_to_all", help="the exchange to time")
    parser.add_argument("--rows", type=int, required=True, help="rows of the global float32 array")
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions (best is reported)")
    return parser.parse_args(argv)


def _compiled_exchange(mesh, placed: tuple):
    """The jitted shard_map of `jax.lax.all_to_all`, compiled for `placed`; returns (executable, seconds)."""
    import jax
    from jax.sharding import PartitionSpec as P

    def exchange(block):
        return jax.lax.all_to_all(block, AXIS_NAME, 0, 0, tiled=True)

    mapped = jax.jit(jax.shard_map(exchange, mesh=mesh, in_specs=P(AXIS_NAME), out_specs=P(AXIS_NAME)))
    start = time.perf_counter()
    executable = mapped.lower(*placed).compile()
    return executable, time.perf_counter() - start


def _placed(mesh, host):
    """`host` sharded by rows over the mesh, on the devices."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    placed = jax.device_put(host, NamedSharding(mesh, P(AXIS_NAME)))
    placed.block_until_ready()
    return placed


def _prepared(case: str, mesh, rows: int) -> tuple[tuple, object, float, str]:
    """The placed arguments of `case`, its compiled executable, compile seconds and path."""
    workload = Workload(rows=rows)
    if case == "all_to_all":
        placed = (_placed(mesh, make_input(workload)),)
        return (placed, *_compiled_exchange(mesh, placed), "real")
    from _jax_ragged import compiled_ragged

    ragged = RaggedWorkload(workload)
    hosts = [make_input(workload), ragged.make_output(), *ragged.index_arrays()]
    placed = tuple(_placed(mesh, hosts.pop(0)) for _ in range(len(hosts)))  # each host copy dropped when placed
    return (placed, *compiled_ragged(mesh, placed, int(ragged.sizes.max())))


def _time_runs(executable, placed: tuple, repeat: int) -> tuple[list[float], object]:
    """Wall seconds of `repeat` calls after one warm-up call, and the last call's output."""
    executable(*placed).block_until_ready()
    runs_s, out = [], None
    for _ in range(repeat):
        out = None
        start = time.perf_counter()
        out = executable(*placed)
        out.block_until_ready()
        runs_s.append(time.perf_counter() - start)
    return runs_s, out


def main(argv: list[str] | None = None) -> None:
    """Measure, check the device count, and print {'runs_s', 'compile_s', 'digest', 'path', ...} as JSON."""
    args = _parse(sys.argv[1:] if argv is None else argv)
    _configure_devices(DEVICES)
    import jax

    devices = jax.devices()
    if len(devices) < DEVICES:
        raise SystemExit(f"jax sees {len(devices)} devices; {DEVICES} are needed ({_FLAG} was not applied)")
    mesh = jax.sharding.Mesh(np.array(devices[:DEVICES]), (AXIS_NAME,))
    placed, executable, compile_s, path = _prepared(args.case, mesh, args.rows)
    runs_s, out = _time_runs(executable, placed, args.repeat)
    del placed
    result = {"runs_s": runs_s, "compile_s": compile_s, "digest": digest(np.asarray(out)), "path": path,
              "jax": jax.__version__, "devices": f"{DEVICES} x {devices[0].platform}",
              "peak_resident_gib": peak_resident_gib()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
