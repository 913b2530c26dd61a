"""How far each all-reduce algorithm's float sum lands from the exact sum, per dtype, size and group size.

    python benchmarks/numerics.py             # bfloat16, float16, float32; 1024 and 16384 elements; 8, 64, 256 devices
    python benchmarks/numerics.py --quick     # 1024 elements, 8 and 64 devices
    python benchmarks/numerics.py --sizes 4096 --groups 8 32

Every device of a mesh {'x': n} holds a gradient-like vector (a shared signal plus per-device noise, about
1e-2 in size, drawn in float64 from a fixed seed and rounded to the dtype), and `collectives.psum` sums them
with each algorithm the psum definition lists (read from the registry at run time, so a new algorithm
appears here by itself; one that refuses the group size is shown as n/a). The exact sum of the rounded
inputs is `math.fsum` of each element's terms (correctly rounded to float64). Per run the table shows,
over the elements of device 0's result:

- relative error |got - exact| / |exact|: max and mean;
- error in ulps of the dtype at the exact sum: max and mean;
- the share of elements within 0.5 ulp, i.e. correctly rounded.

Elements whose exact sum is 0 are left out. The maxima come from elements where the terms nearly cancel:
there an error of a few ulps of the terms is many ulps (and a large fraction) of the small sum.

Meshes are fully connected, but on a switch that reduces for 'in_network'. 'direct' is XLA:CPU's order and
arithmetic (bfloat16 folded in float32 and rounded once), and so is 'in_network' (the switch folds in group
order); the others round every partial sum they send to the dtype.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import collectives
import layouts
import sim
from sim import P

DTYPES = ("bfloat16", "float16", "float32")
SIZES = (1024, 16384)
GROUPS = (8, 64, 256)


@dataclass(frozen=True)
class Row:
    """One measured run: where, which algorithm, and the error statistics (None: the algorithm refused)."""

    dtype: str
    size: int
    devices: int
    algorithm: str
    stats: tuple[float, float, float, float, float] | None


def algorithms() -> tuple[str, ...]:
    """psum's algorithms, as its registered definition lists them."""
    return next(p.choices for p in collectives.definition("psum").params if p.name == "algorithm")


def gradients(dtype: np.dtype, size: int, devices: int, seed: int = 0) -> np.ndarray:
    """`devices` rows of gradient-like values in `dtype`: a shared signal plus noise, about 1e-2."""
    rng = np.random.default_rng([seed, size, devices])
    signal = rng.standard_normal(size) * 0.3
    return ((signal + rng.standard_normal((devices, size))) * 1e-2).astype(dtype)


def exact_sum(terms: np.ndarray) -> np.ndarray:
    """Each column's exact sum, correctly rounded to float64."""
    wide = terms.astype(np.float64)
    return np.array([math.fsum(column) for column in wide.T])


def ulp(dtype: np.dtype, value: np.ndarray) -> np.ndarray:
    """The spacing of `dtype`'s numbers at each |value| (its smallest subnormal at 0), in float64."""
    info = layouts.finfo(dtype)
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log2(np.abs(value)))
    exponent = np.maximum(np.where(np.isfinite(exponent), exponent, info.minexp), info.minexp)
    return np.exp2(exponent - info.nmant)


def errors(dtype: np.dtype, got: np.ndarray, exact: np.ndarray) -> tuple[float, float, float, float]:
    """(max relative, mean relative, max ulps, mean ulps, share within 0.5 ulp) of `got` against `exact`."""
    nonzero = exact != 0
    got, exact = got.astype(np.float64)[nonzero], exact[nonzero]
    difference = np.abs(got - exact)
    relative = difference / np.abs(exact)
    ulps = difference / ulp(dtype, exact)
    return (float(relative.max()), float(relative.mean()), float(ulps.max()), float(ulps.mean()),
            float((ulps <= 0.5).mean()))


def measure(dtype_name: str, size: int, devices: int) -> list[Row]:
    """Every algorithm's errors on one workload."""
    dtype = np.dtype(dtype_name)
    terms = gradients(dtype, size, devices)
    exact = exact_sum(terms)
    rows = []
    for algorithm in algorithms():
        in_switch = collectives.definition("psum").algorithm(algorithm).in_network  # needs a switch that reduces
        network = sim.Network(topology="switch", switch_reduces=True) if in_switch else None
        f = sim.shard_map(lambda x, a=algorithm: collectives.psum(x, "x", algorithm=a),
                          mesh=sim.Mesh({"x": devices}, network=network), in_specs=P("x"), out_specs=P("x"))
        try:
            got = f(terms)[0]
        except sim.InvalidArgumentError:
            rows.append(Row(dtype_name, size, devices, algorithm, None))
            continue
        rows.append(Row(dtype_name, size, devices, algorithm, errors(dtype, got, exact)))
    return rows


def table(rows: list[Row]) -> str:
    """The rows as a markdown table."""
    lines = ["| dtype | elements | devices | algorithm | max rel. error | mean rel. error | max ulps | mean ulps "
             "| correctly rounded |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        cells = ["n/a"] * 5 if r.stats is None else [f"{r.stats[0]:.2e}", f"{r.stats[1]:.2e}", f"{r.stats[2]:.4g}",
                                                     f"{r.stats[3]:.3f}", f"{100 * r.stats[4]:.1f}%"]
        lines.append(f"| {r.dtype} | {r.size} | {r.devices} | {r.algorithm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1024 elements on 8 and 64 devices")
    parser.add_argument("--sizes", type=int, nargs="+", help=f"elements per device (default {SIZES})")
    parser.add_argument("--groups", type=int, nargs="+", help=f"devices in the group (default {GROUPS})")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    args = parser.parse_args(argv)
    sizes = args.sizes or ((1024,) if args.quick else SIZES)
    groups = args.groups or ((8, 64) if args.quick else GROUPS)
    rows = [row for dtype in args.dtypes for size in sizes for devices in groups
            for row in measure(dtype, size, devices)]
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
