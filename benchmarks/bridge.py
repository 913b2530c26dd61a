"""A warm `simulate_jax` call against JAX's warm call and against the simulation alone.

    python benchmarks/bridge.py              # best of 5 of each, in one process with 8 CPU devices
    python benchmarks/bridge.py --repeat 9
    python benchmarks/bridge.py --cpu        # process CPU time instead of wall time (a busy machine)
    python benchmarks/bridge.py --no-stepwise   # leave out the stepwise column (the slowest to measure)

Programs: the expert-parallel MoE layer of the bridge tests (top-k routing, argsort by expert, all_gather of
counts, ragged dispatch, grouped matmuls, ragged combine) on 4 and 8 devices, forward and gradient, and the
collective matmul that overlaps ppermute with the matmul (4 devices). Each is a jitted function, called
once before timing (so JAX and the bridge have compiled and traced what they keep).

Columns, all best-of-`--repeat` wall times measured side by side in this run: `jax` JAX's warm call (result
ready); `bridge` a warm `oracles.simulate_jax` call; `stepwise` the same with `compiled=False` (every
equation evaluated on its own); `alone` the simulation alone: the same collective calls with the same
operands, replayed as a `sim.shard_map` program per device (the messages, trace and simulated time of the
bridge's run, without the local work and the jaxpr walk, on a one-float block per device); `alone+io` the
same replay taking each shard_map's real inputs with its in_specs and giving its real output blocks with its
out_specs (so it also places the inputs in the device memories and assembles the outputs, which simulating
the program includes); `target` is alone + 2 x jax, the issue's bound,
and `ok` says whether `bridge` is within it. Each bridge result is first checked equal to JAX's bit for
bit. With `--cpu` each time is this process's CPU time (every thread), which other work on a shared machine
disturbs less than the wall clock.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()

import jax
import jax.numpy as jnp
import numpy as np
from _timing import best_of, check_repeat
from bridge_moe_layer import moe_args, moe_layer
from bridge_tutorial_programs import collective_matmul
from jax.sharding import AxisType

import oracles
import sim
from oracles import _bridge_device


def _moe_case(n: int) -> tuple[Callable[..., Any], tuple]:
    return moe_layer(n, 2 * n, k=2, capacity=3, check_vma=False), moe_args(n, jax.random.key(0))


def cases() -> dict[str, tuple[Callable[..., Any], tuple]]:
    """Each benchmark row's jitted function and arguments."""
    oracles.install_cpu_ragged_all_to_all()
    found = {}
    for n in (4, 8):
        f, args = _moe_case(n)
        found[f"moe forward, {n} devices"] = (jax.jit(f), args)
        grad = jax.grad(lambda *a, f=f: jnp.sum(f(*a) ** 2), argnums=(0, 1, 2, 3))
        found[f"moe grad, {n} devices"] = (jax.jit(grad), args)
    mesh = jax.make_mesh((4,), ("i",), axis_types=(AxisType.Auto,))
    matmul = collective_matmul(lambda body, i, o: jax.shard_map(body, mesh=mesh, in_specs=i, out_specs=o))
    rng = np.random.default_rng(0)
    found["collective matmul, 4 devices"] = (jax.jit(matmul), (rng.standard_normal((512, 256)).astype(np.float32),
                                                              rng.standard_normal((256, 512)).astype(np.float32)))
    return found


@dataclass(frozen=True)
class Recorded:
    """One shard_map run of the bridge, as the replays take it: its mesh and specs, the global inputs it
    placed, each device's collective calls (definition, equation, operands) and each device's output blocks."""

    mesh: sim.Mesh
    in_specs: Any
    out_specs: Any
    args: tuple
    calls: dict[int, list]
    blocks: dict[int, tuple]


def recorded(f: Callable[..., Any], args: tuple) -> list[Recorded]:
    """What each shard_map run of `simulate_jax(f, *args)` placed, called and returned, device by device."""
    found: list[Recorded] = []
    collective, run = _bridge_device._collective, sim.ShardMapped.run

    def record_call(definition: Any, eqn: Any, ins: list) -> list:
        found[-1].calls[sim.current().device].append((definition, eqn, [np.array(x) for x in ins]))
        return collective(definition, eqn, ins)

    def record_run(mapped: sim.ShardMapped, *a: Any) -> Any:
        found.append(Recorded(mapped.mesh, mapped.in_specs, mapped.out_specs, tuple(np.array(x) for x in a),
                              defaultdict(list), {}))
        result = run(mapped, *a)
        rows = [np.array(out) for out in result.outputs]  # one leading row per device (oracles._bridge_device)
        found[-1].blocks.update({d: tuple(out[d:d + 1] for out in rows) for d in mapped.mesh.devices})
        return result

    _bridge_device._collective, sim.ShardMapped.run = record_call, record_run  # type: ignore[method-assign]
    try:
        oracles.simulate_jax(f, *args)
    finally:
        _bridge_device._collective, sim.ShardMapped.run = collective, run  # type: ignore[method-assign]
    return found


def replays(f: Callable[..., Any], args: tuple, io: bool = False) -> list[Callable[[], Any]]:
    """One function per shard_map the bridge runs for `f(*args)`: its devices' collective calls, with the
    operands each device passed, replayed as a `sim.shard_map` program on the same mesh. Without `io` the
    program takes a one-float block per device and returns it; with `io` it takes the shard_map's own inputs
    with its in_specs and returns each device's recorded output blocks with its out_specs, so the replay
    also places the real inputs in the device memories and assembles the real outputs."""
    return [(_replay_io if io else _replay)(found) for found in recorded(f, args)]


def _replay(found: Recorded) -> Callable[[], Any]:
    """The recorded calls of each device as one run of a `sim.shard_map` program on a one-float block."""
    mesh, table = found.mesh, found.calls
    names = tuple(mesh.shape)

    def program(block: Any) -> Any:
        for definition, eqn, ins in table[sim.current().device]:
            _bridge_device._collective(definition, eqn, ins)
        return block

    spec = sim.P(names if len(names) > 1 else names[0])
    mapped = sim.shard_map(program, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
    block = np.zeros(int(np.prod(list(mesh.shape.values()))), np.float32)
    return lambda: mapped.run(block)


def _replay_io(found: Recorded) -> Callable[[], Any]:
    """The recorded calls of each device as one run of a `sim.shard_map` program with the shard_map's inputs,
    in_specs and out_specs, each device returning its recorded output blocks."""
    table, blocks = found.calls, found.blocks

    def program(*inputs: Any) -> Any:
        device = sim.current().device
        for definition, eqn, ins in table[device]:
            _bridge_device._collective(definition, eqn, ins)
        return blocks[device]

    mapped = sim.shard_map(program, mesh=found.mesh, in_specs=found.in_specs, out_specs=found.out_specs,
                           check_vma=False)
    return lambda: mapped.run(*found.args)


def row(name: str, f: Callable[..., Any], args: tuple, repeat: int, cpu: bool = False, stepwise: bool = True
        ) -> tuple:
    """(name, jax s, bridge s, stepwise s, alone s, alone+io s, target s, ok) for one program, after checking the
    bridge's outputs equal JAX's bit for bit; stepwise s is NaN unless `stepwise`."""
    expected = [np.asarray(x) for x in jax.tree.leaves(f(*args))]
    found = [np.asarray(x) for x in jax.tree.leaves(oracles.simulate_jax(f, *args).outputs)]
    if not all(a.dtype == b.dtype and a.tobytes() == b.tobytes() for a, b in zip(expected, found)):
        raise AssertionError(f"{name}: simulate_jax differs from jitted JAX")
    clock = time.process_time if cpu else time.perf_counter

    def measure(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
        return best_of(fn, repeat, clock)

    jax_s, _ = measure(lambda: jax.block_until_ready(f(*args)), repeat)
    bridge_s, _ = measure(lambda: oracles.simulate_jax(f, *args), repeat)
    stepwise_s = float("nan")
    if stepwise:
        oracles.simulate_jax(f, *args, compiled=False)
        stepwise_s, _ = measure(lambda: oracles.simulate_jax(f, *args, compiled=False), repeat)
    runs, with_io = replays(f, args), replays(f, args, io=True)
    alone_s, _ = measure(lambda: [run() for run in runs], repeat)
    alone_io_s, _ = measure(lambda: [run() for run in with_io], repeat)
    target = alone_s + 2 * jax_s
    return name, jax_s, bridge_s, stepwise_s, alone_s, alone_io_s, target, bridge_s <= target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="", help="run the rows whose name contains this text")
    parser.add_argument("--cpu", action="store_true", help="measure CPU time instead of wall time")
    parser.add_argument("--no-stepwise", action="store_true", help="leave out the stepwise column")
    args = parser.parse_args(argv)
    repeat = check_repeat(args.repeat)
    print(f"{'program':30} {'jax ms':>7} {'bridge ms':>10} {'stepwise ms':>12} {'alone ms':>9} {'alone+io ms':>12} "
          f"{'target ms':>10}  ok")
    for name, (f, operands) in cases().items():
        if args.only not in name:
            continue
        name, jax_s, bridge_s, stepwise_s, alone_s, alone_io_s, target, ok = row(
            name, f, operands, repeat, args.cpu, not args.no_stepwise)
        print(f"{name:30} {jax_s * 1e3:7.2f} {bridge_s * 1e3:10.2f} {stepwise_s * 1e3:12.2f} {alone_s * 1e3:9.2f} "
              f"{alone_io_s * 1e3:12.2f} {target * 1e3:10.2f}  {'yes' if ok else 'NO'}")


if __name__ == "__main__":
    main()
