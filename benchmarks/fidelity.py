"""The validation table: simulated times of every collective x algorithm x topology against closed forms, and
the presets against published measurements.

    python benchmarks/fidelity.py            # the whole table (about a minute)
    python benchmarks/fidelity.py --quick    # the small-message rows and the published cases only

For each case of `benchmarks/closed_forms.py` the simulator runs the call twice: with 64-byte operands
(latency-bound: the simulated time must equal the alpha-beta form exactly) and with 8 MiB operands
(bandwidth-bound: within 2% of the published bandwidth form). Local copies are free here (a `CopyCost` of
unbounded bandwidth), so the table measures the network model alone. Each result is checked against a plain
numpy evaluation before its time is shown. algbw and busbw are nccl-tests' (size / time, and algbw times
2(n-1)/n for AllReduce, (n-1)/n otherwise), so the columns can be laid beside nccl-tests output. A row may
bound its operand bytes (`Case.sized`) where a larger result would not fit in memory. Then, for each
collective on each topology and grid, every algorithm is simulated at 64 bytes and 256 KiB and 'auto''s
pick must come within 1% of the fastest.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))

import collectives  # noqa: E402
import layouts  # noqa: E402
import sim  # noqa: E402
from benchmarks._neighbours import growth_s  # noqa: E402
from benchmarks.closed_forms import (  # noqa: E402
    BANDWIDTH,
    INTER_BANDWIDTH,
    INTER_LATENCY_S,
    LATENCY_S,
    NIC_SWITCH_LATENCY_S,
    NODE_SIZE,
    Case,
    busbw_factor,
    cases,
    nccl_size,
)

TINY_BYTES = 64
LARGE_BYTES = 8 << 20
AUTO_BYTES = (TINY_BYTES, 256 << 10)  # the sizes 'auto''s picks are checked at, against every algorithm
FREE_COPIES = sim.CopyCost(bandwidth_bytes_per_s=1e30, run_overhead_s=0.0)


def network(topology: str, axes: tuple[tuple[str, int], ...]) -> sim.Network:
    """The table's network of `topology` (a = 1 us per hop, w = 10 GB/s per link and direction)."""
    if topology == "fully_connected":
        return sim.Network.fully_connected(LATENCY_S, BANDWIDTH)
    if topology == "switch":
        return sim.Network.switch(LATENCY_S, BANDWIDTH)
    if topology == "switch_reduces":
        return dataclasses.replace(sim.Network.switch(LATENCY_S, BANDWIDTH), switch_reduces=True)
    if topology == "hierarchical_reduces":  # nodes on a 4w switch, NICs of w: the NIC switch reduces the group
        nodes = sim.Network.hierarchical(NODE_SIZE, None, LATENCY_S, 4 * BANDWIDTH, NIC_SWITCH_LATENCY_S, BANDWIDTH)
        return dataclasses.replace(nodes, switch_reduces=True)
    if topology == "ring":
        return sim.Network.ring(LATENCY_S, BANDWIDTH)
    if topology == "hierarchical":  # nodes of the last axis's size; A and w_net between them
        return sim.Network.hierarchical(axes[-1][1], None, LATENCY_S, BANDWIDTH, INTER_LATENCY_S, INTER_BANDWIDTH)
    if topology == "torus_multipath":
        return sim.Network.torus(tuple(n for _, n in axes), True, LATENCY_S, BANDWIDTH, multipath=True)
    if topology == "leaf_spine":  # nodes of 2 on a 4w switch; 2 nodes a leaf, uplinks at 2:1; a hop of a each
        return sim.Network.hierarchical(2, None, LATENCY_S, 4 * BANDWIDTH, LATENCY_S, BANDWIDTH, leaf_size=2,
                                        oversubscription=2, spine_latency_s=LATENCY_S)
    return sim.Network.torus(tuple(n for _, n in axes), topology == "torus", LATENCY_S, BANDWIDTH)


def expected(collective: str, x: np.ndarray, p: int) -> np.ndarray:
    """The global result by plain numpy, for blocks of `x` (p rows, one per device)."""
    if collective == "all_gather":
        return np.tile(x.reshape(-1), p)
    if collective == "psum":
        return np.tile(x.sum(0), p)
    if collective == "psum_scatter":
        return x.sum(0)
    return np.ascontiguousarray(x.reshape(p, p, -1).transpose(1, 0, 2)).reshape(-1)


def measure(case: Case, size_bytes: int, *, abstract: bool = False) -> float:
    """The simulated seconds of `case` with `size_bytes` per device (at most the row's `most_bytes`), its
    result checked against numpy; `abstract` runs shapes and dtypes alone (`sim.ShapeDtypeStruct`: the same
    messages and times, no bytes and no result to check)."""
    return _timed(case, case.sized(size_bytes), abstract)[1]


def pick(case: Case, size_bytes: int, *, abstract: bool = False) -> str:
    """The algorithm the call of `case` ran with (what 'auto' chose)."""
    return _timed(case, size_bytes, abstract)[0]


_TIMED: dict[tuple, tuple[str, float]] = {}  # a row's (algorithm run, seconds) by row, operand bytes and payload


def _timed(case: Case, size_bytes: int, abstract: bool) -> tuple[str, float]:
    """The algorithm `case` ran with and its simulated seconds, each (row, size, payload) simulated once
    (a large run's buffers freed at once, as in `measure_published`)."""
    key = (case.collective, case.algorithm, case.topology, case.axes, case.costs, size_bytes, abstract)
    if key not in _TIMED:
        run = _run(case, size_bytes, abstract)
        _TIMED[key] = (run.calls[0].algorithm, max(call.exit_s for call in run.calls))
        del run
        if size_bytes >= 1 << 20 and not abstract:
            gc.collect()
    return _TIMED[key]


def _run(case: Case, size_bytes: int, abstract: bool = False) -> sim.Run:
    names = tuple(name for name, _ in case.axes)
    axis_name = names if len(names) > 1 else names[0]
    p = case.devices
    links = network(case.topology, case.axes)
    links = links if case.costs is None else replace(links, costs=case.costs)
    mesh = sim.Mesh(dict(case.axes), network=links, copy_cost=FREE_COPIES)
    # small integers in float32, so every order of addition is exact
    x = (sim.memory.hollow_empty((p, size_bytes // 4), np.float32) if abstract else
         (np.arange(p * size_bytes // 4) % 7).astype(np.float32).reshape(p, -1))
    spec = sim.P(names)
    # the call as a sweep makes it (`Sweep.call`, `Sweep.inputs`): ragged slices equal, in member order
    sweep = collectives.definition(case.collective).sweep
    args = sweep.inputs(x.reshape(-1), np.arange(p, dtype=np.int32), x.shape[1] // p, p)
    f = sim.shard_map(sweep.call(axis_name, p, case.algorithm), mesh=mesh, in_specs=(spec,) * len(args),
                      out_specs=spec, check_vma=False)
    run = f.run(*args)
    if not abstract and not np.array_equal(np.asarray(run.outputs), expected(case.collective, x, p)):
        raise SystemExit(f"{case.name}: the simulator's result differs from numpy's")
    return run


@dataclass(frozen=True)
class Published:
    """A preset, calibrated by `calibration`, against a published figure: `collective` with `algorithm` over
    mesh axis `axis_name` of a mesh `axes` on the preset's `shape`, the operand a bfloat16 `array` sharded by
    `spec` (all_to_all: `size_bytes` of uint8 per device; ragged_all_to_all: the growth of
    `benchmarks._neighbours`' exchange from 16 to 64 devices, `empty_slices` as given)."""

    name: str
    preset: str
    shape: tuple[int, ...]
    published_s: float
    size_bytes: int  # nccl-tests' size
    collective: str
    source: str
    why: str = ""  # why the model misses, where it does
    pinned: float = 0.0  # the relative error a row that misses is pinned at (with `why`)
    calibration: str = "measured"
    algorithm: str = "auto"
    axes: tuple[tuple[str, int], ...] = ()
    axis_name: str | tuple[str, ...] = "x"
    array: tuple[int, ...] = ()
    spec: tuple = ("x",)
    empty_slices: str | None = None


_V4P = (("x", 4), ("y", 4), ("z", 4))
_V4P_ARRAY = (1024, 4096)
_V5E = (("x", 8), ("y", 4))

PUBLISHED = [
    Published("TPU v4p 4x4x4, AllGather over X of bf16[1024, 4096] sharded [B over X, D over Y]", "tpu-v4p",
              (4, 4, 4), 23.3e-6, 2 * 1024 * 4096 // 4, "all_gather",
              "How to Scale Your Model, 'Sharded Matrices' (AllGather cost on TPU v4p)",
              "the published figure is the line model V/W_bidi, 2 MiB over 90 GB/s, with no (N-1)/N factor; the "
              "bidirectional ring moves (N-1)/N of it (1.5 blocks of 512 KiB each way, 17.5 us at 45 GB/s) in "
              "N/2 = 2 hops over X (1 us each, the book's ICI figure); closing the gap with a launch cost would "
              "push AllReduce over Z past its own 10%, and no public TPU launch figure supports one",
              -0.164, calibration="ideal", axes=_V4P, array=_V4P_ARRAY, spec=("x", "y")),
    Published("TPU v4p 4x4x4, AllReduce over Z of bf16[1024, 4096] sharded [B over X, D over Y]", "tpu-v4p",
              (4, 4, 4), 11.65e-6, 2 * 1024 * 4096 // 16, "psum",
              "How to Scale Your Model, 'Sharded Matrices' (AllReduce = 2 x AllGather's V/W_bidi)",
              calibration="ideal", axes=_V4P, axis_name="z", array=_V4P_ARRAY, spec=("x", "y")),
    Published("TPU v4p 4x4x4, AllGather over X and Y of bf16[1024, 4096] sharded [B over X, D over Y]", "tpu-v4p",
              (4, 4, 4), 46.6e-6, 2 * 1024 * 4096, "all_gather",
              "How to Scale Your Model, 'Sharded Matrices' (AllGather over several axes: V / (W_bidi x 2 axes))",
              calibration="ideal", axes=_V4P, axis_name=("x", "y"), array=_V4P_ARRAY, spec=("x", "y")),
    Published("8xH100 NVLink, AllGather of bf16[1024, 16384] (33.55 MB)", "h100-nvlink", (8,), 65e-6,
              2 * 1024 * 16384, "all_gather", "nccl-tests all_gather_perf on DGX H100 (line rate 450 GB/s)",
              calibration="ideal", axes=(("x", 8),), array=(1024, 16384)),
    Published("TPU v5e 8x4, AllGather over Y of bf16[2048, 8192] sharded over Y (line model)", "tpu-v5e", (8, 4),
              560e-6, 2 * 2048 * 8192, "all_gather",
              "How to Scale Your Model, 'Sharded Matrices' (line model, (N-1) V / (N W) on 45 GB/s)",
              calibration="ideal", axes=_V5E, axis_name="y", array=(2048, 8192), spec=("y",)),
    Published("TPU v5e 8x4, AllGather over Y of bf16[2048, 8192] sharded over Y (measured)", "tpu-v5e", (8, 4),
              680e-6, 2 * 2048 * 8192, "all_gather",
              "How to Scale Your Model, 'Sharded Matrices' (measured on a v5e 8x4 slice)",
              axes=_V5E, axis_name="y", array=(2048, 8192), spec=("y",)),
    Published("4xH100, all_to_all of 524,288,000 bytes", "h100-nvlink", (4,), 1174e-6, 524_288_000,
              "all_to_all", "nccl-tests alltoall_perf (algbw 446.5 GB/s, busbw 334.9 GB/s; NVIDIA/nccl#2169)",
              axes=(("x", 4),)),
    Published("A100x4 nodes + HDR200, ragged neighbour exchange, growth 16 -> 64 GPUs (XLA pays empty slices)",
              "a100-hdr200", (4, 4), 625e-6, 0, "ragged_all_to_all",
              "openxla/xla#46982 (jax 0.10.0: 478 / 647 / 1103 us on 16 / 32 / 64 A100s)", empty_slices="pay"),
    Published("2 nodes x 8 H100 (h100-ib), psum of 64 MiB over all 16", "h100-ib", (2, 8), 430e-6, 64 << 20, "psum",
              "hierarchical all-reduce by hand from the preset's own links: a reduce-scatter inside each node sends "
              "7/8 of 64 MiB through each GPU's 450 GB/s NVLink port (58.7 MB, 130.5 us); the GPUs of each local "
              "rank all-reduce their 8 MiB shard between the two nodes, each over its own 50 GB/s NIC, half of it "
              "there and the other half back (8.39 MB, 167.8 us); the all-gather inside the node takes what the "
              "reduce-scatter took (130.5 us): 428.7 us of bandwidth, ~430 us (the latencies add 2 + 5 + 5 + 2 us)",
              calibration="ideal", axes=(("x", 16),), array=(16 * (32 << 20),)),
    Published("8xH100 NVLink, AllReduce (NVLS) of 64 MiB (busbw ~480 GB/s at large sizes)", "h100-nvlink",
              (8,), 67_108_864 / (480e9 / busbw_factor("psum", 8)), 67_108_864, "psum",
              "nccl-tests all_reduce_perf with NVLink SHARP on 8 H100 (peak busbw ~480 GB/s, algbw ~275 GB/s: "
              "github.com/NVIDIA/nccl-tests/issues/212)", axes=(("x", 8),), array=(8 * (32 << 20),)),
]


def measure_published(case: Published, algorithm: str | None = None) -> float:
    """Simulated seconds of a published case on its preset, with its algorithm or `algorithm` (for the ragged
    exchange, its growth)."""
    if case.collective == "ragged_all_to_all":
        return growth_s(case.calibration, case.empty_slices)
    return max(call.exit_s for call in run_published(case, algorithm).calls)


def run_published(case: Published, algorithm: str | None = None) -> sim.Run:
    """The run of a published case on its preset, with its algorithm or `algorithm` (its calls name the
    algorithm 'auto' picked). Its operand is a `sim.ShapeDtypeStruct`: the figures are times alone, and an
    abstract run sends the same messages at the same times as one with bytes, without a byte in memory."""
    network = sim.Network.preset(case.preset, case.shape, case.calibration)
    mesh = sim.Mesh(dict(case.axes), network=network, copy_cost=FREE_COPIES)
    spec, axis, algorithm = sim.P(*case.spec), case.axis_name, algorithm or case.algorithm
    if case.collective == "all_to_all":
        x = sim.ShapeDtypeStruct((len(mesh.devices) * case.size_bytes,), np.uint8)
        call = lambda v: collectives.all_to_all(v, axis, 0, 0, tiled=True, algorithm=algorithm)
    elif case.collective == "psum":
        x = sim.ShapeDtypeStruct(case.array, layouts.BFLOAT16)
        call = lambda v: collectives.psum(v, axis, algorithm=algorithm)
    else:
        x = sim.ShapeDtypeStruct(case.array, layouts.BFLOAT16)
        call = lambda v: collectives.all_gather(v, axis, tiled=True, algorithm=algorithm)
    f = sim.shard_map(call, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
    return f.run(x)


@dataclass(frozen=True)
class Pick:
    """'auto' on one group of rows (a collective on a topology and grid) at one size, beside every algorithm."""

    group: str
    size_bytes: int
    picked: str
    auto_s: float
    fastest: str
    fastest_s: float

    @property
    def ok(self) -> bool:
        """Whether auto's pick is within 1% of the fastest simulated algorithm."""
        return self.auto_s <= self.fastest_s * 1.01


def auto_picks(size_bytes: int, rows: list[Case] | None = None, *, abstract: bool = False) -> list[Pick]:
    """For each (collective, topology, grid) of the table's rows, every algorithm that fits simulated at
    `size_bytes` (the row's `sized`; shapes and dtypes alone if `abstract`), and 'auto''s pick beside the
    fastest."""
    groups: dict[tuple, Case] = {}
    for case in cases() if rows is None else rows:
        groups.setdefault((case.collective, case.topology, case.axes), case)
    found = []
    for case in groups.values():
        p, grid = case.devices, len(case.axes) > 1
        reduces = network(case.topology, case.axes).switch_reduces
        names = [a.name for a in collectives.definition(case.collective).algorithms
                 if not a.auto and a.fits(p) and (grid or not a.grid) and (reduces or not a.in_network)]
        times = {name: measure(dataclasses.replace(case, algorithm=name), size_bytes, abstract=abstract)
                 for name in names}
        fastest = min(times, key=times.get)
        picked, auto_s = _timed(dataclasses.replace(case, algorithm="auto"), case.sized(size_bytes), abstract)
        found.append(Pick(case.name.replace("/" + case.algorithm, ""), case.sized(size_bytes), picked, auto_s,
                          fastest, times[fastest]))
    return found


def _bandwidths(collective: str, size_bytes: int, p: int, seconds: float) -> tuple[float, float]:
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * busbw_factor(collective, p)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small-message rows and published cases only")
    args = parser.parse_args(argv)
    failed = 0
    print(f"{'case':<58} {'tiny sim us':>11} {'alpha-beta':>10} {'large sim us':>12} {'closed form':>11} "
          f"{'error':>7} {'algbw GB/s':>10} {'busbw':>7}  source")
    for case in cases():
        tiny = measure(case, TINY_BYTES)
        exact = sum(case.exact(case.sized(TINY_BYTES)))
        ok = abs(tiny - exact) <= 1e-9 * exact
        large_text = form_text = error_text = algbw_text = busbw_text = "-"
        if not args.quick:
            large, form = measure(case, LARGE_BYTES), case.textbook(case.sized(LARGE_BYTES))
            error = large / form - 1
            ok = ok and abs(error) <= 0.02
            size = nccl_size(case.collective, case.sized(LARGE_BYTES), case.devices)
            algbw, busbw = _bandwidths(case.collective, size, case.devices, large)
            large_text, form_text, error_text = f"{large * 1e6:.1f}", f"{form * 1e6:.1f}", f"{error:+.2%}"
            algbw_text, busbw_text = f"{algbw:.2f}", f"{busbw:.2f}"
        failed += not ok
        print(f"{case.name:<58} {tiny * 1e6:>11.4f} {exact * 1e6:>10.4f} {large_text:>12} {form_text:>11} "
              f"{error_text:>7} {algbw_text:>10} {busbw_text:>7}  {case.source}{'' if ok else '  MISMATCH'}")
    print()
    print(f"{'published case':<80} {'calib.':<8} {'algorithm':<19} {'sim us':>8} {'published':>9} {'error':>7} "
          f"{'algbw':>7} {'busbw':>7}")
    for case in PUBLISHED:
        if case.collective == "ragged_all_to_all":
            seconds, algorithm, algbw, busbw = measure_published(case), "direct", 0.0, 0.0
        else:
            run = run_published(case)
            seconds, algorithm = max(call.exit_s for call in run.calls), run.calls[0].algorithm
            names = case.axis_name if isinstance(case.axis_name, tuple) else (case.axis_name,)
            p = math.prod(dict(case.axes)[name] for name in names)
            algbw, busbw = _bandwidths(case.collective, case.size_bytes, p, seconds)
        error = seconds / case.published_s - 1
        verdict = "within 10%" if abs(error) <= 0.10 else f"misses: {case.why}"
        print(f"{case.name:<80} {case.calibration:<8} {algorithm:<19} {seconds * 1e6:>8.1f} "
              f"{case.published_s * 1e6:>9.1f} {error:>+7.1%} {algbw:>7.1f} {busbw:>7.1f}  {verdict}")
    print()
    print(f"{'auto picks':<58} {'size':>9} {'picked':<19} {'sim us':>9} {'fastest':<19} {'sim us':>9}")
    for size in AUTO_BYTES[:1] if args.quick else AUTO_BYTES:
        for row in auto_picks(size):
            failed += not row.ok
            print(f"{row.group:<58} {row.size_bytes:>9} {row.picked:<19} {row.auto_s * 1e6:>9.3f} {row.fastest:<19} "
                  f"{row.fastest_s * 1e6:>9.3f}{'' if row.ok else '  SLOWER THAN 1%'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
