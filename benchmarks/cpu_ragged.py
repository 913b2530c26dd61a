"""Cost of `oracles.install_cpu_ragged_all_to_all()`: JAX's ragged_all_to_all on 8 CPU devices, side by side.

    python benchmarks/cpu_ragged.py [--rows 1000000] [--columns 1] [--repeat 5]

Every device holds `--rows` rows of `--columns` float32 in its operand and its output; the slices are the
benchmark's uneven ragged workload (`_ragged.RaggedWorkload`: about one slice in seven empty). Timed, each
as one compiled `jax.jit(jax.shard_map(...))` on arguments already on the devices, best of `--repeat`:

- numpy: `numpy_ragged_all_to_all` on the global arrays (the reference the others are checked against);
- ragged, cpu lowering: the real `jax.lax.ragged_all_to_all` through the installed lowering;
- all_to_all, payload bytes: a tiled `jax.lax.all_to_all` of each device's operand (rows x columns);
- all_to_all, lowering's bytes: a tiled `jax.lax.all_to_all` of the rows the lowering moves per device
  (`lowering_rows`), in one collective: in its one-shot form (8 slots x rows, up to the lowering's
  `ONE_SHOT_BYTES` with their row numbers), 8 x rows; in rounds, its rounds x 8 slots x its chunk of
  ceil(rows / 8) rows. The table names the form.

The lowering's result digest must equal numpy's. Lower + compile seconds are measured apart, once. Sets
XLA_FLAGS itself, so run it in a fresh process.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from _ragged import INDEX_DTYPE, RaggedWorkload, numpy_ragged_all_to_all
from _workload import AXIS_NAME, DEVICES, Workload, digest

import oracles


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="operand and output rows per device")
    parser.add_argument("--columns", type=int, default=1, help="float32 columns per row")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions (best is reported)")
    return parser.parse_args(argv)


def _compiled(body: Callable[..., Any], *placed: Any) -> tuple[Any, float]:
    """The jitted shard_map of `body` over the 8 devices, lowered and compiled; (executable, seconds)."""
    import jax
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:DEVICES]), (AXIS_NAME,))
    mapped = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(AXIS_NAME), out_specs=P(AXIS_NAME)))
    start = time.perf_counter()
    executable = mapped.lower(*placed).compile()
    return executable, time.perf_counter() - start


def _best(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm-up
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return min(runs)


def _placed(*arrays: np.ndarray) -> list[Any]:
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    sharding = NamedSharding(Mesh(np.array(jax.devices()[:DEVICES]), (AXIS_NAME,)), P(AXIS_NAME))
    return [jax.device_put(a, sharding) for a in arrays]


def measure(rows: int, columns: int, repeat: int) -> list[tuple[str, float | None, float, int]]:
    """(stage, compile s, best run s, bytes moved per device) for the four stages."""
    import jax

    oracles.install_cpu_ragged_all_to_all()
    ragged = RaggedWorkload(Workload(rows=rows * DEVICES, columns=columns))
    operand = np.random.default_rng(0).standard_normal(ragged.workload.shape, dtype=np.float32)
    output = ragged.make_output()
    want = numpy_ragged_all_to_all(operand, output, ragged)
    numpy_s = _best(lambda: numpy_ragged_all_to_all(operand, output, ragged), repeat)
    row_bytes = columns * 4
    found = [("numpy", None, numpy_s, ragged.moved_rows * row_bytes // DEVICES)]

    args = _placed(operand, output, *ragged.index_arrays())
    lowered, compile_s = _compiled(lambda *a: jax.lax.ragged_all_to_all(*a, axis_name=AXIS_NAME), *args)
    if digest(np.asarray(lowered(*args))) != digest(want):
        raise AssertionError("the cpu lowering's result differs from numpy's")
    moved, form = lowering_rows(ragged.sizes, rows, row_bytes + np.dtype(INDEX_DTYPE).itemsize)
    run_s = _best(lambda: lowered(*args).block_until_ready(), repeat)
    found.append((f"ragged, cpu lowering ({form})", compile_s, run_s, moved * row_bytes))

    def exchange(block: Any) -> Any:
        return jax.lax.all_to_all(block, AXIS_NAME, 0, 0, tiled=True)

    for stage, shape in (("all_to_all, payload bytes", ragged.workload.shape),
                         ("all_to_all, lowering's bytes", (DEVICES * moved, columns))):
        found.append((stage, *_dense(exchange, shape, repeat), shape[0] // DEVICES * row_bytes))
    return found


def lowering_rows(sizes: np.ndarray, rows: int, row_bytes: int) -> tuple[int, str]:
    """Rows the lowering sends per device, and its form, on slices of `sizes[i, j]` rows into outputs of `rows` rows of
    `row_bytes` with a row number each: `rows` per slot in one shot when they fit the lowering's
    `ONE_SHOT_BYTES`, else one chunk of ceil(rows / slots) rows per slot and round, for as many rounds as
    the longest slice needs."""
    from oracles._cpu_ragged_rule import ONE_SHOT_BYTES

    slots = sizes.shape[1]
    if slots * rows * row_bytes <= ONE_SHOT_BYTES:
        return slots * rows, "one shot"
    chunk = max(1, -(-rows // slots))
    return int(max(1, -(-int(sizes.max()) // chunk))) * slots * chunk, "rounds"


def _dense(exchange: Callable[..., Any], shape: tuple[int, int], repeat: int) -> tuple[float, float]:
    """Compile seconds and best run seconds of `exchange` on a zero global array of `shape`."""
    [block] = _placed(np.zeros(shape, np.float32))
    dense, compile_s = _compiled(exchange, block)
    return compile_s, _best(lambda: dense(block).block_until_ready(), repeat)


def table(found: list[tuple[str, float | None, float, int]]) -> str:
    """A Markdown table of the stages with their ratios to the lowering and to each all_to_all."""
    runs = {stage: run for stage, _, run, _ in found}
    lowering = next(run for stage, run in runs.items() if stage.startswith("ragged"))
    lines = ["| stage | lower + compile s | best run s | bytes sent per device | lowering / this |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for stage, compile_s, run, sent in found:
        shown = "" if compile_s is None else f"{compile_s:.3f}"
        lines.append(f"| {stage} | {shown} | {run:.4f} | {sent / 1e6:.1f} MB | {lowering / run:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Measure and print the table."""
    options = _parse(sys.argv[1:] if argv is None else argv)
    import jax

    print(f"jax {jax.__version__}, {DEVICES} CPU devices, {options.rows} rows x {options.columns} float32 per "
          f"device, best of {options.repeat}")
    print(table(measure(options.rows, options.columns, options.repeat)))


if __name__ == "__main__":
    main()
