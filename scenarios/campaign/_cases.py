"""Generated collective calls: `cases(op)` draws a `Case` of any registered collective with Hypothesis.

A `Case` is a collective call on a mesh: the op, the mesh shape, one per-device list per positional
argument, and the keyword parameters. `cases(op)` draws one for any registered collective: the mesh,
axes and values here, the call's own parameters and shapes from the strategy of the collective's
`Definition`. They only build cases the docs define and JAX 0.10.2 accepts, so any disagreement between
the simulator, the executable spec and real JAX is a finding. For the collectives of the JAX docs:

- meshes of 1 to 8 devices, 1-D `{'x': n}` and 2-D `{'x': a, 'y': b}`;
- `axis_name` as one name or a tuple of names, in either order;
- `axis_index_groups`: equal-size partitions of the axis with shuffled member order;
- arrays of rank 1 to 3 with small dims, 0 included where JAX allows it, in eight dtypes (bfloat16 and
  float16 among them) and, in `meshsim campaign`, the eight float8 types too for the collectives that only
  move data (`campaign_dtypes`), filled either with values unique per device and element (readable) or
  with random bits (NaN payloads, -0.0, subnormals, ...; bfloat16 and float8 NaNs as XLA:CPU leaves them,
  see `Fill`);
- all_gather / all_to_all: tiled and untiled, every valid axis; negative `axis` for all_gather (JAX
  0.10.2 cannot lower negative `split_axis`/`concat_axis`: `cases("all_to_all", negative_axes=True)`
  builds those for the rejection test);
- ragged_all_to_all: operands of rank 1 to 3 (ragged axis leading), 1 or 2 slices per peer, sizes 0 to 3,
  receive slices laid out without overlap by construction in shuffled order with padding between them,
  slices that end exactly at the last row, overlapping or repeated send slices, and `send_sizes` built as
  the all_to_all of `recv_sizes`.

Hypothesis is a need of the test suite and of `meshsim campaign` only: this module imports it, so only
they import this module (`scenarios.campaign._answers` runs a case without it).
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

import collectives
import layouts
from collectives._strategy import Axes, algorithms
from collectives._strategy import small_dims as _small_dims
from scenarios.campaign._answers import Case

DTYPES = tuple(np.dtype(t) for t in ("int8", "uint8", "int32", "int64", "bfloat16", "float16", "float32",
                                     "float64"))
MOVED_DTYPES = DTYPES + layouts.FLOAT8  # the collectives that only move data take the float8 types too
INDEX_DTYPES = (np.dtype("int32"), np.dtype("int64"))
# The NaN XLA:CPU moves each NaN of these float8 types as (it converts them through float16), by sign bit;
# the other float8 types keep every NaN (measured on 4 CPU devices, docs/concepts/numerics.md)
XLA_CPU_FLOAT8_NANS = {"float8_e5m2": (0x7F, 0x7F), "float8_e4m3": (0x7C, 0xFC), "float8_e3m4": (0x78, 0xF8)}
MAX_DEVICES = 8


# ---------------------------------------------------------------------------------------------- geometry


def device_groups(mesh_shape: dict[str, int], axis_name: Any, axis_index_groups: Any) -> list[list[int]]:
    """Every group a collective over `axis_name` runs on, as device ids in group-index order.

    Computed here from coordinates, independently of `sim` and `oracles.spec`, to lay out ragged cases.
    """
    names = list(mesh_shape)
    axes = list(axis_name) if isinstance(axis_name, tuple) else [axis_name]
    lines: dict[tuple, dict[int, int]] = collections.defaultdict(dict)
    for d, coords in enumerate(itertools.product(*(range(n) for n in mesh_shape.values()))):
        where = dict(zip(names, coords))
        index = 0
        for a in axes:
            index = index * mesh_shape[a] + where[a]
        lines[tuple(where[n] for n in names if n not in axes)][index] = d
    size = int(np.prod([mesh_shape[a] for a in axes]))
    chosen = axis_index_groups if axis_index_groups is not None else [list(range(size))]
    return [[line[i] for i in group] for line in lines.values() for group in chosen]


@st.composite
def meshes(draw: st.DrawFn) -> dict[str, int]:
    """1-D `{'x': n}` or 2-D `{'x': a, 'y': b}` meshes of 1 to 8 devices."""
    if not draw(st.booleans()):
        return {"x": draw(st.integers(1, MAX_DEVICES))}
    x = draw(st.integers(1, 4))
    return {"x": x, "y": draw(st.integers(1, MAX_DEVICES // x))}


@st.composite
def axis_names(draw: st.DrawFn, mesh_shape: dict[str, int]) -> Any:
    """One mesh axis name, or a tuple of distinct names in any order."""
    ordered = [names for k in range(1, len(mesh_shape) + 1) for names in itertools.permutations(mesh_shape, k)]
    chosen = draw(st.sampled_from(ordered))
    return chosen[0] if len(chosen) == 1 and not draw(st.booleans()) else chosen


@st.composite
def index_groups(draw: st.DrawFn, axis_size: int) -> list[list[int]] | None:
    """None, or a partition of range(axis_size) into equal-size groups with shuffled members."""
    if not draw(st.booleans()):
        return None
    group_size = draw(st.sampled_from([g for g in range(1, axis_size + 1) if axis_size % g == 0]))
    order = draw(st.permutations(range(axis_size)))
    return [list(order[i: i + group_size]) for i in range(0, axis_size, group_size)]


@st.composite
def collective_axes(draw: st.DrawFn, grouped: bool = True) -> Axes:
    """A mesh with an axis name over it and, if `grouped`, optional axis_index_groups."""
    mesh_shape = draw(meshes())
    axis_name = draw(axis_names(mesh_shape))
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    axis_size = int(np.prod([mesh_shape[n] for n in names]))
    groups = draw(index_groups(axis_size)) if grouped else None
    members = tuple(tuple(g) for g in device_groups(mesh_shape, axis_name, groups))
    return Axes(mesh_shape, axis_name, groups, len(groups[0]) if groups else axis_size, members)


# ---------------------------------------------------------------------------------------------- values


def small_dims() -> st.SearchStrategy[int]:
    """A dimension of 1 to 3 (shrinking to 1), or now and then 0 (the collectives' strategies share it)."""
    return _small_dims(st)


@dataclass(frozen=True)
class Fill:
    """How to fill arrays: 'iota' (unique per device and element, readable) or 'bits' (random bytes).

    Random bfloat16 bits keep every class (subnormals, -0.0, infinities, NaNs) but a NaN is the canonical
    0x7fc0 with its sign: XLA:CPU moves bfloat16 through float32 in some programs (a one-device
    all_gather, an identity ppermute), which canonicalises NaN payloads where no value is computed.
    test_bfloat16.py checks the reductions' payload rules on arbitrary NaNs. Likewise a NaN of the float8
    types XLA:CPU moves through float16 is the one it leaves (`XLA_CPU_FLOAT8_NANS`; test_float8.py checks
    every pattern); iota values past a float8 type's range round to its infinity or NaN.
    """

    style: str
    seed: int

    def array(self, shape: Sequence[int], dtype: np.dtype, salt: int) -> np.ndarray:
        """An array of `shape` and `dtype`; `salt` makes each (device, argument) distinct."""
        count = int(np.prod(shape))
        if self.style == "iota":
            start = 1 + salt * 97
            return _as_xla_cpu_moves((np.arange(start, start + count) % 251 if dtype.itemsize == 1 else
                                      np.arange(start, start + count)).astype(dtype).reshape(shape))
        rng = np.random.default_rng([self.seed, salt])
        bits = rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)
        if dtype == layouts.BFLOAT16:
            raw = bits.view(np.uint16)
            bits = np.where((raw & 0x7FFF) > 0x7F80, (raw & 0x8000) | 0x7FC0, raw).astype(np.uint16).view(dtype)
        return _as_xla_cpu_moves(bits)


def _as_xla_cpu_moves(values: np.ndarray) -> np.ndarray:
    """`values` with each NaN of a float8 type that XLA:CPU merges replaced by the NaN it leaves."""
    merged = XLA_CPU_FLOAT8_NANS.get(values.dtype.name)
    if merged is None:
        return values
    raw = values.view(np.uint8)
    nan = np.isnan(values.astype(np.float32))
    return np.where(nan, np.where(raw >> 7, merged[1], merged[0]), raw).astype(np.uint8).view(values.dtype)


fills = st.builds(Fill, st.sampled_from(["iota", "bits"]), st.integers(0, 2**32 - 1))
dtypes = st.sampled_from(DTYPES)


def campaign_dtypes(op: str) -> st.SearchStrategy[np.dtype]:
    """The dtypes `meshsim campaign` draws for `op`: `DTYPES`, and the float8 types too (`MOVED_DTYPES`) for a
    collective that only moves data (the test suite's generated cases keep to `DTYPES`, each new dtype being
    one more program for XLA to compile; test_float8.py covers the float8 types)."""
    return st.sampled_from(DTYPES if collectives.definition(op).reduction is not None else MOVED_DTYPES)


# ---------------------------------------------------------------------------------------------- cases

Filler = Callable[[tuple[int, ...], np.dtype, int], np.ndarray]  # (shape, dtype, salt) -> values


@st.composite
def cases(draw: st.DrawFn, op: str, leaves: int = 0, dtypes: st.SearchStrategy[np.dtype] = dtypes,
          fillers: st.SearchStrategy[Filler] | None = None, **options: Any) -> Case:
    """A valid call of the registered collective `op`: mesh and axes from here, its own parameters and
    shapes from its definition's strategy (given `options`, e.g. all_to_all's `negative_axes=True`; with
    `algorithms=True`, any of its algorithms that fits the group, `collectives._strategy.algorithms`), values
    from `fillers` (default: `fills`) in one of `dtypes` per leaf (default: `DTYPES`; `campaign_dtypes(op)`
    adds the float8 types for a collective that only moves data, as `meshsim campaign` draws them).

    With `leaves` > 0 every device holds a pytree `{'a': leaf, 'b': (leaf, ...)}` of that many arrays that
    share the parameters but not shape or dtype. An operand the collective takes invariant (pvary,
    pscatter) holds the same values on the devices that differ only along the axes.
    """
    definition = collectives.definition(op)
    grouped = definition.takes("axis_index_groups")
    axes = draw(collective_axes(grouped))
    sample = draw(definition.strategy(st, axes, **options))
    params = {"axis_name": axes.axis_name, **({"axis_index_groups": axes.axis_index_groups} if grouped else {}),
              **sample.params}
    if options.get("algorithms") and definition.takes("algorithm"):
        params["algorithm"] = draw(algorithms(st, axes, definition.algorithms))
    fill = draw(fillers if fillers is not None else fills.map(lambda f: f.array))
    n = int(np.prod(list(axes.mesh_shape.values())))
    per_leaf = []
    for leaf in range(max(leaves, 1)):
        shapes, dtype = draw(sample.shapes), draw(dtypes)
        per_leaf.append({name: [fill(tuple(shape), dtype, d + (leaf + k) * MAX_DEVICES) for d in range(n)]
                         for k, (name, shape) in enumerate(shapes.items())})
    if definition.invariant_operand:
        for arrays in per_leaf:
            for group in device_groups(axes.mesh_shape, params["axis_name"], None):
                for xs in arrays.values():
                    for d in group:
                        xs[d] = xs[group[0]].copy()
    index_dtype = draw(st.sampled_from(INDEX_DTYPES)) if definition.index_arrays else None
    return Case(op, axes.mesh_shape, _arguments(definition, n, per_leaf, sample.index, index_dtype, leaves), params)


def _arguments(definition: collectives.Definition, n: int, per_leaf: list[dict[str, list[np.ndarray]]],
               index: tuple[dict[str, list[int]], ...], index_dtype: np.dtype | None,
               leaves: int) -> tuple[tuple[Any, ...], ...]:
    """Each argument's values on each of `n` devices, in call order: index arrays in `index_dtype`, data
    arrays as one array or, with `leaves`, the pytree `{'a': leaf, 'b': (leaf, ...)}`."""
    args = []
    for name in definition.arrays:
        if name in definition.index_arrays:
            args.append(tuple(np.array(index[d][name], index_dtype) for d in range(n)))
        elif leaves:
            args.append(tuple({"a": per_leaf[0][name][d], "b": tuple(p[name][d] for p in per_leaf[1:])}
                              for d in range(n)))
        else:
            args.append(tuple(per_leaf[0][name]))
    return tuple(args)
