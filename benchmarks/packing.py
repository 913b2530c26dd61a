"""Packing cost of a strided all_gather against a contiguous one, on the simulated clock and the wall clock.

    python benchmarks/packing.py              # 8 devices, 1024 x 1024 float32 per device, best of 5
    python benchmarks/packing.py --rows 256 --repeat 3

Every case gathers the same blocks (tiled) over 8 devices on the default network and checks the result
against numpy; only the layouts differ:

- contiguous: row-major blocks gathered along axis 0 into a row-major result; every chunk is one run
  and lands in one run, so no copy step at all;
- strided: the same blocks gathered along axis 1; each chunk lands in a column block of the row-major
  result, one run per row, and is unpacked by a timed step;
- transposing: column-major blocks gathered along axis 0 into a row-major result; every element is a run
  of its own when the chunk is written.

The table shows the simulated end time, the simulated copy time on device 0, the copy steps of the whole
run, and the best wall-clock time of the call (placing inputs, running, assembling the output).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import collectives
import sim
from layouts import Layout

DEVICES = 8
CASES = {  # name: (gather axis, operand layout)
    "contiguous": (0, (0, 1)),
    "strided": (1, (0, 1)),
    "transposing": (0, (1, 0)),
}


def program(axis: int, operand: tuple[int, int]):
    """One device's program: lay its block out in `operand`, gather it tiled along `axis`, row-major result."""
    def body(block: Any) -> Any:
        x = block if operand == (0, 1) else sim.with_layout_constraint(block, Layout(operand))
        return collectives.all_gather(x, "x", axis=axis, tiled=True, out_layout=Layout((0, 1)))
    return body


def measure(name: str, x: np.ndarray, repeat: int) -> dict[str, Any]:
    """Best-of-`repeat` wall time of one case, with its simulated figures; raises if the result is wrong."""
    axis, operand = CASES[name]
    mesh = sim.Mesh({"x": DEVICES})
    f = sim.shard_map(program(axis, operand), mesh=mesh, in_specs=sim.P("x"), out_specs=sim.P("x"))
    expected = np.concatenate(np.split(x, DEVICES), axis=axis)
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        run = f.run(x)
        walls.append(time.perf_counter() - start)
        if not np.array_equal(run.outputs[: expected.shape[0]], expected):
            raise AssertionError(f"{name}: the gathered result differs from numpy")
    copies = [m for m in run.trace if isinstance(m, sim.CopyRecord) and m.kind in ("pack", "unpack")]
    on_0 = sum(m.arrival_time_s - m.start_time_s for m in copies if m.src == 0)
    return {"case": name, "simulated_us": run.end_time_s * 1e6, "copy_us_device_0": on_0 * 1e6,
            "copy_steps": len(copies), "runs_per_step": copies[0].detail["runs"] if copies else 0,
            "wall_ms": min(walls) * 1e3}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1024, help="rows and columns of each device's block")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions per case (best shown)")
    args = parser.parse_args(argv)
    n = args.rows
    x = np.random.default_rng(0).standard_normal((DEVICES * n, n)).astype(np.float32)
    print(f"all_gather(tiled) of {n} x {n} float32 per device ({n * n * 4 / 1e6:g} MB) over {DEVICES} devices; "
          f"copy cost {sim.DEFAULT_COPY_COST}")
    header = f"{'case':<12} {'simulated us':>13} {'copy us (dev 0)':>16} {'copy steps':>11} {'runs/step':>10} " \
             f"{'best wall ms':>13}"
    print(header)
    for name in CASES:
        row = measure(name, x, args.repeat)
        print(f"{row['case']:<12} {row['simulated_us']:>13.2f} {row['copy_us_device_0']:>16.2f} "
              f"{row['copy_steps']:>11} {row['runs_per_step']:>10} {row['wall_ms']:>13.1f}")


if __name__ == "__main__":
    main()
