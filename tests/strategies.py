"""Generated collective cases, how each implementation answers one, and the one comparison of answers.

A `Case` is a collective call on a mesh: the op, the mesh shape, one per-device list per positional
argument, and the keyword parameters. `cases(op)` draws one for any registered collective: the mesh,
axes and values here, the call's own parameters and shapes from the strategy of the collective's
`Definition`. They only build cases the docs define and JAX 0.10.2 accepts, so any disagreement between
the simulator, the executable spec and real JAX is a finding. For the collectives of the JAX docs:

- meshes of 1 to 8 devices, 1-D `{'x': n}` and 2-D `{'x': a, 'y': b}`;
- `axis_name` as one name or a tuple of names, in either order;
- `axis_index_groups`: equal-size partitions of the axis with shuffled member order;
- arrays of rank 1 to 3 with small dims, 0 included where JAX allows it, in eight dtypes (bfloat16 and
  float16 among them), filled either with values unique per device and element (readable) or with random
  bits (NaN payloads, -0.0, subnormals, ...; bfloat16 NaNs canonical, see `Fill`);
- all_gather / all_to_all: tiled and untiled, every valid axis; negative `axis` for all_gather (JAX
  0.10.2 cannot lower negative `split_axis`/`concat_axis`: `cases("all_to_all", negative_axes=True)`
  builds those for the rejection test);
- ragged_all_to_all: operands of rank 1 to 3 (ragged axis leading), 1 or 2 slices per peer, sizes 0 to 3,
  receive slices laid out without overlap by construction in shuffled order with padding between them,
  slices that end exactly at the last row, overlapping or repeated send slices, and `send_sizes` built as
  the all_to_all of `recv_sizes`.

`check_agreement` runs a case through the simulator (via `sim.shard_map`, as a user would), the spec and,
given an oracle, real JAX, and fails with every byte-level difference listed; `differences` lists them as
text, found by `oracles.compare`, the package's one comparator.
"""

from __future__ import annotations

import collections
import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

import collectives
import layouts
import sim
from collectives._ragged import sender_tables
from collectives._strategy import Axes, algorithms
from collectives._strategy import small_dims as _small_dims
from oracles import compare, describe, spec
from oracles._compare import aval as _aval
from oracles._compare import flatten as _flatten
from oracles._compare import show as _show

DTYPES = tuple(np.dtype(t) for t in ("int8", "uint8", "int32", "int64", "bfloat16", "float16", "float32",
                                     "float64"))
INDEX_DTYPES = (np.dtype("int32"), np.dtype("int64"))
# The collectives of the JAX docs have their own generated tests, beside the docs' examples, in
# test_differential.py; every other registered collective is generated in test_reductions*.py.
DOCUMENTED = ("all_gather", "all_to_all", "ragged_all_to_all")
MAX_DEVICES = 8

# How many cases were checked in this process, by (op, "jax" or "spec"): the test summary reports it.
CHECKED: collections.Counter[tuple[str, str]] = collections.Counter()


@dataclass(frozen=True, eq=False, repr=False)
class Case:
    """One collective call: `args[k][d]` is device d's value of positional argument k (an array or a pytree)."""

    op: str
    mesh_shape: dict[str, int]
    args: tuple[tuple[Any, ...], ...]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def devices(self) -> int:
        return int(np.prod(list(self.mesh_shape.values())))

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        lines = [f"Case({self.op} on mesh {self.mesh_shape}: {params})"]
        for name, per_device in zip(collectives.definition(self.op).arrays, self.args):
            for path, first in _flatten(per_device[0]):
                lines.append(f"  {name}{path}: {_aval(first)} per device")
                for d, value in enumerate(per_device):
                    leaf = dict(_flatten(value))[path]
                    lines.append(f"    device {d}: {_show(leaf)}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """Hypothesis prints falsifying examples with this: the same readable text as repr()."""
        printer.text(repr(self))


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
    test_bfloat16.py checks the reductions' payload rules on arbitrary NaNs.
    """

    style: str
    seed: int

    def array(self, shape: Sequence[int], dtype: np.dtype, salt: int) -> np.ndarray:
        """An array of `shape` and `dtype`; `salt` makes each (device, argument) distinct."""
        count = int(np.prod(shape))
        if self.style == "iota":
            start = 1 + salt * 97
            return (np.arange(start, start + count) % 251 if dtype.itemsize == 1 else
                    np.arange(start, start + count)).astype(dtype).reshape(shape)
        rng = np.random.default_rng([self.seed, salt])
        bits = rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)
        if dtype == layouts.BFLOAT16:
            raw = bits.view(np.uint16)
            bits = np.where((raw & 0x7FFF) > 0x7F80, (raw & 0x8000) | 0x7FC0, raw).astype(np.uint16).view(dtype)
        return bits


fills = st.builds(Fill, st.sampled_from(["iota", "bits"]), st.integers(0, 2**32 - 1))
dtypes = st.sampled_from(DTYPES)


# ---------------------------------------------------------------------------------------------- cases

Filler = Callable[[tuple[int, ...], np.dtype, int], np.ndarray]  # (shape, dtype, salt) -> values


@st.composite
def cases(draw: st.DrawFn, op: str, leaves: int = 0, dtypes: st.SearchStrategy[np.dtype] = dtypes,
          fillers: st.SearchStrategy[Filler] | None = None, **options: Any) -> Case:
    """A valid call of the registered collective `op`: mesh and axes from here, its own parameters and
    shapes from its definition's strategy (given `options`, e.g. all_to_all's `negative_axes=True`; with
    `algorithms=True`, any of its algorithms that fits the group, `collectives._strategy.algorithms`), values
    from `fillers` (default: `fills`) in one of `dtypes` per leaf.

    With `leaves` > 0 every device holds a pytree `{'a': leaf, 'b': (leaf, ...)}` of that many arrays that
    share the parameters but not shape or dtype. An operand the collective takes invariant (pbroadcast,
    pscatter) holds the same values on the devices that differ only along the axes.
    """
    definition = collectives.definition(op)
    grouped = definition.takes("axis_index_groups")
    axes = draw(collective_axes(grouped))
    sample = draw(definition.strategy(st, axes, **options))
    params = {"axis_name": axes.axis_name, **({"axis_index_groups": axes.axis_index_groups} if grouped else {}),
              **sample.params}
    if options.get("algorithms") and definition.takes("algorithm"):
        params["algorithm"] = draw(algorithms(st, axes, definition.param("algorithm").choices))
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


# ---------------------------------------------------------------------------------------------- ragged


def _ragged(mesh_shape: dict[str, int], params: dict[str, Any], tables: list[list[list[int]]],
            rows: int, out_rows: int, trailing: tuple[int, ...], dtype: np.dtype, index_dtype: np.dtype,
            fill: Fill) -> Case:
    """Assemble a ragged case from its index tables (input_offsets, send_sizes, output_offsets, recv_sizes)."""
    n = len(tables[0])
    operands = tuple(fill.array((rows, *trailing), dtype, salt=d) for d in range(n))
    outputs = tuple(fill.array((out_rows, *trailing), dtype, salt=MAX_DEVICES + d) for d in range(n))
    index = [tuple(np.array(v, index_dtype) for v in table) for table in tables]
    return Case("ragged_all_to_all", dict(mesh_shape), (operands, outputs, *index), params)


def ragged_case(mesh_shape: dict[str, int], axis_name: Any, recv_sizes: Sequence[Sequence[int]], *,
                axis_index_groups: list[list[int]] | None = None, trailing: tuple[int, ...] = (),
                dtype: Any = "int32", index_dtype: Any = "int32") -> Case:
    """A hand-specified ragged case: `recv_sizes[d]` for every device d, the rest laid out deterministically.

    Each device receives its slices in reverse order after one padding row, one padding row between
    slices, and the device with the most rows has its last slice end at the last output row. Each device
    sends its slices packed in order from row 0; the operand has one padding row at its end.
    """
    recv_sizes = [list(sizes) for sizes in recv_sizes]
    recv_offsets, out_rows = [], []
    for sizes in recv_sizes:
        offsets, cursor = [0] * len(sizes), 1
        for i in reversed(range(len(sizes))):
            offsets[i], cursor = cursor, cursor + sizes[i] + 1
        recv_offsets.append(offsets)
        out_rows.append(cursor - 1)
    send_sizes, output_offsets = sender_tables(device_groups(mesh_shape, axis_name, axis_index_groups), recv_sizes,
                                               recv_offsets)
    input_offsets = [[int(v) for v in np.cumsum([0, *sizes[:-1]])] for sizes in send_sizes]
    params = {"axis_name": axis_name, "axis_index_groups": axis_index_groups}
    return _ragged(mesh_shape, params, [input_offsets, send_sizes, output_offsets, recv_sizes],
                   max(sum(sizes) for sizes in send_sizes) + 1, max(out_rows), tuple(trailing), np.dtype(dtype),
                   np.dtype(index_dtype), Fill("iota", 0))


def dense_case(op: str, mesh_shape: dict[str, int], shape: Sequence[int], dtype: Any = "int32",
               **params: Any) -> Case:
    """A hand-specified all_gather or all_to_all case with readable per-device values."""
    n = int(np.prod(list(mesh_shape.values())))
    xs = tuple(Fill("iota", 0).array(tuple(shape), np.dtype(dtype), salt=d) for d in range(n))
    defaults = {"axis_index_groups": None, "tiled": False}
    return Case(op, dict(mesh_shape), (xs,), {**defaults, **params})


# The ragged_all_to_all docs' example, literal numbers: the results are [1, 3, 0, 0] and [2, 2, 4, 0].
DOCS_RAGGED = Case(
    "ragged_all_to_all", {"x": 2},
    tuple(tuple(np.array(v) for v in per_device) for per_device in (
        ([1, 2, 2], [3, 4, 0]), ([0, 0, 0, 0], [0, 0, 0, 0]), ([0, 1], [0, 1]), ([1, 2], [1, 1]),
        ([0, 0], [1, 2]), ([1, 1], [2, 1]))),
    {"axis_name": "x", "axis_index_groups": None},
)


# ---------------------------------------------------------------------------------------------- features


def features(case: Case) -> set[str]:
    """The properties of `case` the suite must cover, as short labels (also Hypothesis events)."""
    p = case.params
    found = {case.op, f"{len(case.mesh_shape)}-D mesh"}
    if isinstance(p["axis_name"], tuple):
        found.add("tuple axis_name")
        if len(p["axis_name"]) > 1 and list(p["axis_name"]) != [n for n in case.mesh_shape if n in p["axis_name"]]:
            found.add("tuple axis_name against mesh order")
    if p.get("axis_index_groups") is not None:
        found.add("axis_index_groups")
    leaves = [leaf for _, leaf in _flatten(case.args[0][0])]
    if len(leaves) > 1 or not isinstance(case.args[0][0], np.ndarray):
        found.add("pytree")
    if case.op != "ragged_all_to_all":
        found.add("tiled" if p.get("tiled", False) else "untiled")
        if any(p.get(a, 0) < 0 for a in ("axis", "split_axis", "concat_axis")):
            found.add("negative axis")
    found |= {f"rank {x.ndim}" for x in leaves} | {f"dtype {x.dtype}" for x in leaves}
    if any(0 in x.shape for x in leaves):
        found.add("zero-size dimension")
    if case.op == "ragged_all_to_all":
        found |= _ragged_features(case)
    return found


def _ragged_features(case: Case) -> set[str]:
    operands, outputs, input_offsets, send_sizes, output_offsets, recv_sizes = case.args
    found = set()
    if any((s == 0).any() for s in send_sizes):
        found.add("zero-size ragged slice")
    rows = outputs[0].shape[0]
    for offsets, sizes in zip(output_offsets, send_sizes):
        if any(o + s == rows and s for o, s in zip(offsets, sizes)):
            found.add("slice ends at last output row")
    for d, (offsets, sizes) in enumerate(zip(input_offsets, send_sizes)):
        if any(o + s == operands[d].shape[0] and s for o, s in zip(offsets, sizes)):
            found.add("slice ends at last operand row")
    written = sum(int(s.sum()) for s in recv_sizes)
    if written < sum(o.shape[0] for o in outputs):
        found.add("output rows left as padding")
    return found


# ---------------------------------------------------------------------------------------------- answers


def _unflatten(like: Any, leaves: list[Any]) -> Any:
    """A pytree shaped like `like` holding `leaves` in `_flatten` order."""
    it = iter(leaves)

    def build(node: Any) -> Any:
        if isinstance(node, dict):
            built = {key: build(node[key]) for key in sorted(node)}
            return {key: built[key] for key in node}
        if isinstance(node, (tuple, list)):
            return type(node)(build(child) for child in node)
        return next(it)

    return build(like)


def run_simulator(case: Case) -> list[Any]:
    """The simulator's per-device results, run the way a user would: one `sim.shard_map` over the mesh.

    Per-device inputs are stacked along a new leading axis sharded over every mesh axis; the body takes
    row [0] and returns its result with a new leading axis, under the same spec.
    """
    definition = collectives.definition(case.op)
    mesh = sim.Mesh(dict(case.mesh_shape))
    spec = sim.P(tuple(case.mesh_shape))
    fn = definition.function
    stacked = [_unflatten(per_device[0], [np.stack([leaf for _, leaf in leaves])
                                          for leaves in zip(*(_flatten(v) for v in per_device))])
               for per_device in case.args]

    def body(*blocks: Any) -> Any:
        result = fn(*(sim.tree_map(lambda x: x[0], b) for b in blocks), **case.params)
        return sim.tree_map(lambda x: x[None], result)

    # Inputs split over every axis are typed varying; pbroadcast and pscatter take invariant operands, so
    # their values are checked untyped (their types are checked in test_vma.py).
    mapped = sim.shard_map(body, mesh=mesh, in_specs=(spec,) * len(stacked), out_specs=spec,
                           check_vma=not definition.invariant_operand)
    out = mapped(*stacked)
    return [sim.tree_map(operator.itemgetter(d), out) for d in range(case.devices)]


def run_spec(case: Case, op_spec: Callable[..., list[np.ndarray]] | None = None) -> list[Any]:
    """The executable spec's per-device results, applied leaf by leaf to pytrees."""
    op_spec = op_spec or spec.of(collectives.definition(case.op))
    if not case.args:  # axis_index: no arrays, one result per device
        return op_spec(dict(case.mesh_shape), **case.params)
    per_leaf_args = [[[dict(_flatten(v))[path] for v in per_device] for per_device in case.args]
                     for path, _ in _flatten(case.args[0][0])]
    per_leaf_out = [op_spec(*args, dict(case.mesh_shape), **case.params) for args in per_leaf_args]
    return [_unflatten(case.args[0][d], [out[d] for out in per_leaf_out]) for d in range(case.devices)]


def run_jax(case: Case, oracle: Any) -> list[Any]:
    """Real JAX's per-device results from the oracle's worker, leaf by leaf for pytrees."""
    if not case.args:  # axis_index: no arrays, one result per device
        return oracle.run(case.op, dict(case.mesh_shape), (), dict(case.params)).outputs
    per_leaf_out = []
    for path, _ in _flatten(case.args[0][0]):
        args = tuple([dict(_flatten(v))[path] for v in per_device] for per_device in case.args)
        per_leaf_out.append(oracle.run(case.op, dict(case.mesh_shape), args, dict(case.params)).outputs)
    return [_unflatten(case.args[0][d], [out[d] for out in per_leaf_out]) for d in range(case.devices)]


def differences(expected: Sequence[Any], actual: Sequence[Any], expected_name: str = "spec",
                actual_name: str = "simulator") -> list[str]:
    """Every device and leaf where `actual` differs from `expected` in dtype, shape or bytes, as text
    (`oracles.compare`, the one comparator of answers, finds them)."""
    return [describe(d, expected_name, actual_name) for d in compare(expected, actual)]


def check_agreement(case: Case, oracle: Any = None, *, simulator: Callable[[Case], list[Any]] = run_simulator,
                    reference: Callable[[Case], list[Any]] = run_spec) -> None:
    """Assert simulator == spec (== real JAX when `oracle` is given), bit for bit, on every device.

    Raises:
        AssertionError: listing every difference, each naming the device, the leaf and the elements.
    """
    answers = {"spec": reference(case), "simulator": simulator(case)}
    if oracle is not None:
        answers["jax"] = run_jax(case, oracle)
    CHECKED[case.op, "jax" if oracle is not None else "spec"] += 1
    found = differences(answers["spec"], answers["simulator"], "spec", "simulator")
    if "jax" in answers:
        found += differences(answers["jax"], answers["spec"], "jax", "spec")
        found += differences(answers["jax"], answers["simulator"], "jax", "simulator")
    if found:
        raise AssertionError(f"{len(found)} difference(s) on\n{case!r}\n  " + "\n  ".join(found))
