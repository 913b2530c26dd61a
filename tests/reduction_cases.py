"""Generated calls of the reductions and their kin (every registered collective but the JAX docs' three): 1-D
and 2-D meshes of up to 8 devices, in one of `DTYPES`, filled in one of `STYLES` (readable integers, random
bits, wide magnitudes, special values), with the executable spec's answer. Shared by test_reductions.py,
test_reductions_differential.py, test_layouts_collectives.py and test_bfloat16.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import strategies
from hypothesis import strategies as st

import collectives
import oracles
from oracles import spec

DTYPES = tuple(np.dtype(t) for t in ("int8", "int32", "float16", "float32", "float64"))
# Every registered collective but the JAX docs' three (test_differential.py), so a new one is covered here.
OPS = tuple(op for op in collectives.REGISTRY if op not in strategies.DOCUMENTED)
STYLES = ("iota", "bits", "wide", "special")


# ---------------------------------------------------------------------------------------------- cases


@dataclass(frozen=True, eq=False, repr=False)
class ReductionCase(oracles.Call):
    """One call: `args` is () or (xs,) with xs[d] device d's array; `params` are the keyword arguments."""

    def __repr__(self) -> str:
        lines = [f"ReductionCase({self.op} on mesh {self.mesh_shape}: "
                 + ", ".join(f"{k}={v!r}" for k, v in self.params.items()) + ")"]
        for xs in self.args:
            lines.append(f"  x: {xs[0].dtype}{list(xs[0].shape)} per device")
            lines += [f"    device {d}: {np.array2string(x, separator=', ', threshold=64)} bits "
                      f"{np.ascontiguousarray(x).tobytes().hex()[:48]}" for d, x in enumerate(xs)]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def _special(dtype: np.dtype, rng: np.random.Generator, count: int) -> np.ndarray:
    """Signed zeros, infinities, NaNs with payloads (quiet and signalling), subnormals and extremes."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.choice(np.array([0, 1, -1, info.min, info.max, info.max // 2 + 1], dtype), count)
    info = np.finfo(dtype)
    unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
    sign = 1 << (8 * dtype.itemsize - 1)
    exponent = (sign - 1) & ~((1 << info.nmant) - 1)
    quiet_nan = exponent | 1 << (info.nmant - 1) | 5
    nans = np.array([quiet_nan, sign | quiet_nan, exponent | 1], unsigned).view(dtype)  # nan, -nan, snan
    numbers = np.array([0.0, -0.0, np.inf, -np.inf, info.smallest_subnormal, -info.smallest_subnormal,
                        info.smallest_normal, 1.0, -3.0, info.max], dtype)
    return rng.choice(np.concatenate([numbers, nans]), count)


def fill(style: str, seed: int, shape: tuple[int, ...], dtype: np.dtype, salt: int) -> np.ndarray:
    """Values in one of STYLES: unique readable ints, random bits, floats of wide magnitudes, specials."""
    count = int(np.prod(shape))
    rng = np.random.default_rng([seed, salt])
    if style == "iota":
        start = 1 + salt * 97
        values = np.arange(start, start + count) % (101 if dtype.itemsize == 1 else 1 << 20)
    elif style == "bits":
        return rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)
    elif style == "special":
        return _special(dtype, rng, count).reshape(shape)
    elif dtype.kind == "f":
        spread = 10 if dtype == np.float16 else 40
        values = rng.standard_normal(count) * np.exp2(rng.integers(-spread, spread, count))
    else:
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, count, endpoint=True)
    return values.astype(dtype).reshape(shape)


def _fillers(styles: tuple[str, ...]) -> st.SearchStrategy[strategies.Filler]:
    """Fillers of one of `styles` with a random seed."""
    def filler(style: str, seed: int) -> strategies.Filler:
        return lambda shape, dtype, salt: fill(style, seed, shape, dtype, salt)
    return st.builds(filler, st.sampled_from(styles), st.integers(0, 2**32 - 1))


@st.composite
def reduction_cases(draw: st.DrawFn, op: str, styles: tuple[str, ...] = STYLES) -> ReductionCase:
    """A valid call of `op` that JAX 0.10.2 also runs (1-D and 2-D meshes up to 8 devices), drawn by its
    definition's strategy, in one of DTYPES filled in one of `styles`."""
    case = draw(strategies.cases(op, dtypes=st.sampled_from(DTYPES), fillers=_fillers(styles)))
    return ReductionCase(case.op, case.mesh_shape, case.args, case.params)


def run_spec(case: ReductionCase) -> list[np.ndarray]:
    """The executable spec's answer for `case`."""
    return spec.of(collectives.definition(case.op))(*[list(xs) for xs in case.args], dict(case.mesh_shape),
                                                    **case.params)
