"""`jit`: compile a per-device function for given shapes and formats, the layout guide's ahead-of-time flow.

`jit(fn, in_shardings=..., out_shardings=...).trace(*avals).lower().compile()` gives a `Compiled` whose
`input_formats` and `output_formats` say which layout and sharding every argument and result has; entries
given as `Format(Layout.AUTO)` are chosen by the rule in `sim.memory._auto`. `fn` runs on each device of the
shardings on that device's blocks, like a `shard_map` body whose in_specs and out_specs are the
shardings' specs; it may call collectives. Calling the `Compiled`:

- a *committed* argument whose layout differs from the compiled one is an error naming the argument, the
  passed and the required layout (all mismatches at once);
- an *uncommitted* one is relaid out first, by a timed "relayout" step that shows in the trace;
- results are written in the output formats, committed when any argument was.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from layouts import AUTO, Format, Layout, layout_of, native_dtype
from sim._errors import InvalidArgumentError, InvalidTypeError
from sim.memory._abstract import ShapeDtypeStruct  # noqa: F401  (re-exported: sim.program.ShapeDtypeStruct)
from sim.memory._array import Array, device_put
from sim.memory._sharding import Sharding, SingleDeviceSharding, check_sharding
from sim.program._execute import Plan, execute, probe
from sim.program._shard_map import ShardMapped


def jit(fn: Callable[..., Any], *, in_shardings: Any = None, out_shardings: Any = None) -> Jitted:
    """`fn` made compilable for the simulated devices, with input and output formats.

    Args:
        fn: a per-device function of positional array arguments returning an array or a tuple of arrays.
        in_shardings: one entry for every argument, or a tuple with one per argument. An entry is a
            `Format` (its layout concrete, `Layout.AUTO` or None for row-major; its sharding None for the
            argument's own), a bare sharding, or None (the argument's own format when it is an `Array`).
        out_shardings: the same for the results; a result's sharding may be left out only when the
            arguments live on one device.

    Returns:
        A `Jitted`: `.trace(*avals).lower().compile()` for ahead-of-time use, or call it directly. An
        argument in non-native byte order ('>f4') is compiled for and placed as its native dtype (float32),
        converted once by `device_put`, as JAX does.

    Example, as in the layout guide (`y[:, 0]` reads a column, so AUTO lays `y` out column-major):

    >>> import numpy as np
    >>> from layouts import AUTO, Format
    >>> from sim import ShapeDtypeStruct, jit
    >>> apply_fn = lambda x, y: (x[0, :], y[:, 0])
    >>> duck = ShapeDtypeStruct((4, 8), np.float32)
    >>> exe = jit(apply_fn, in_shardings=Format(AUTO), out_shardings=Format(AUTO)).trace(duck, duck).lower().compile()
    >>> [f.layout.major_to_minor for f in exe.input_formats[0]]
    [(0, 1), (1, 0)]
    """
    if not callable(fn):
        raise InvalidTypeError(f"fn={fn!r} must be callable")
    if isinstance(fn, ShardMapped):  # jax.jit(jax.shard_map(...)) reads as this, and means the mapped call
        raise InvalidTypeError(
            f"fn is a sim.shard_map (of {getattr(fn.f, '__name__', fn.f)!r}), which maps its body over the mesh "
            f"itself; sim.jit maps a per-device function over its shardings' mesh: call the shard_map directly, "
            f"or give sim.jit its body with in_shardings and out_shardings")
    return Jitted(fn, in_shardings, out_shardings)


class Jitted:
    """A function with formats, not yet compiled; see `jit`. Calls reuse compilations per argument signature."""

    def __init__(self, fn: Callable[..., Any], in_shardings: Any, out_shardings: Any) -> None:
        self.fn, self.in_shardings, self.out_shardings = fn, in_shardings, out_shardings
        self._compiled: dict[tuple, Compiled] = {}

    def trace(self, *args: Any) -> Lowered:
        """Fix the argument shapes, dtypes and shardings (`ShapeDtypeStruct` or `Array` objects, or numpy arrays)."""
        return Lowered(self, args)

    lower = trace

    def __call__(self, *args: Any) -> Any:
        """Compile for `args` (once per shapes, dtypes and formats) and call the result on them."""
        key = tuple((np.shape(a), _dtype(a).str, a.format if isinstance(a, Array) else None) for a in args)
        if key not in self._compiled:
            self._compiled[key] = self.trace(*args).compile()
        return self._compiled[key](*args)


class Lowered:
    """A traced function awaiting `compile()`; `lower()` returns itself, as JAX's chain expects."""

    def __init__(self, jitted: Jitted, args: tuple) -> None:
        self.jitted, self.args = jitted, args

    def lower(self) -> Lowered:
        return self

    def compile(self) -> Compiled:
        """Resolve every format (AUTO included) by running the function once on zeros."""
        fn, args = self.jitted.fn, self.args
        names = argument_names(fn, len(args))
        entries = _expand(self.jitted.in_shardings, len(args), "in_shardings")
        formats = [_input_format(names[i], a, e) for i, (a, e) in enumerate(zip(args, entries))]
        shapes = [(tuple(np.shape(a)), _dtype(a)) for a in args]
        resolved, out_blocks, _ = probe(Plan(fn, names, shapes, formats, []), auto=[f.is_auto for f in formats])
        relaid = [f.is_auto and layout != Layout.row_major(len(s))
                  for f, layout, (s, _) in zip(formats, resolved, shapes)]
        formats = [Format(layout, f.sharding) for layout, f in zip(resolved, formats)]
        if any(relaid) and _any_auto(self.jitted.out_shardings):  # outputs may come out in another order now
            _, out_blocks, _ = probe(Plan(fn, names, shapes, formats, []), auto=[False] * len(formats))
        outputs = _output_formats(self.jitted.out_shardings, out_blocks, formats)
        return Compiled(Plan(fn, names, shapes, formats, outputs), isinstance(out_blocks, tuple))


class Compiled:
    """A function compiled for fixed shapes and formats. Call it with `Array` objects (or numpy arrays).

    `input_formats` is `(per-argument Formats, {})` and `output_formats` one Format, or a tuple of them
    for a function returning a tuple. `last_run` holds the trace of the latest call.
    """

    def __init__(self, plan: Plan, returns_tuple: bool) -> None:
        self.plan, self.returns_tuple = plan, returns_tuple
        self.last_run: Any = None

    @property
    def input_formats(self) -> tuple[tuple[Format, ...], dict]:
        return tuple(self.plan.in_formats), {}

    @property
    def output_formats(self) -> Format | tuple[Format, ...]:
        formats = tuple(f for f, _ in self.plan.out_formats)
        return formats if self.returns_tuple else formats[0]

    def __call__(self, *args: Any) -> Any:
        return self.run(*args).outputs

    def run(self, *args: Any) -> Any:
        """Call the function and return a `sim.Run`: outputs (Arrays), trace and simulated end time.

        Raises:
            InvalidArgumentError: wrong number, shape or dtype of arguments; a committed argument whose
                sharding or layout does not match the compiled one (every mismatch listed).
        """
        plan = self.plan
        if len(args) != len(plan.names):
            raise InvalidArgumentError(f"the function was compiled for {len(plan.names)} arguments, got {len(args)}")
        arrays = [_placed(plan, i, a) for i, a in enumerate(args)]
        _check_layouts(plan, arrays)
        run = execute(plan, arrays)
        outputs = run.outputs if self.returns_tuple else run.outputs[0]
        self.last_run = type(run)(outputs, run.trace, run.end_time_s, run.simulation)
        return self.last_run


def argument_names(fn: Callable[..., Any], count: int) -> list[str]:
    """The names of `fn`'s first `count` positional parameters, `args[i]` where it has none."""
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"args[{i}]" for i in range(count)]


def _expand(entries: Any, count: int, what: str) -> list[Any]:
    if isinstance(entries, (tuple, list)):
        if len(entries) != count:
            raise InvalidArgumentError(f"{what} has {len(entries)} entries but there are {count} values; give one "
                                       f"entry for all or one per value")
        return list(entries)
    return [entries] * count


def _any_auto(entries: Any) -> bool:
    items = entries if isinstance(entries, (tuple, list)) else [entries]
    return any(isinstance(e, Format) and e.is_auto for e in items)


def _dtype(value: Any) -> np.dtype:
    """An argument's dtype in native byte order, as `device_put` places it (`layouts.native_dtype`)."""
    return native_dtype(value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype)


def _own_sharding(value: Any) -> Sharding:
    sharding = getattr(value, "sharding", None)
    return sharding if sharding is not None else SingleDeviceSharding(0)


def _input_format(name: str, value: Any, entry: Any) -> Format:
    """The format argument `name` is compiled for; `layout` stays AUTO until the probe resolves it."""
    rank = len(np.shape(value))
    if entry is None:
        if isinstance(value, Array) and value.committed:
            return value.format
        return Format(Layout.row_major(rank), _own_sharding(value))
    if not isinstance(entry, Format):
        return Format(Layout.row_major(rank), check_sharding(entry, f"in_shardings for argument {name}"))
    sharding = check_sharding(entry.sharding, f"in_shardings for argument {name}") if entry.sharding is not None \
        else _own_sharding(value)
    layout = entry.layout if entry.layout is not None else Layout.row_major(rank)
    if isinstance(layout, Layout):
        layout.check_rank(rank, f"in_shardings for argument {name}")
    return Format(layout, sharding)


def _output_formats(entries: Any, blocks: Any, in_formats: Sequence[Format]) -> list[tuple[Format, tuple]]:
    """Each result's format and its global shape, from `out_shardings` and the probe's blocks."""
    blocks = list(blocks) if isinstance(blocks, tuple) else [blocks]
    found = []
    for k, (entry, block) in enumerate(zip(_expand(entries, len(blocks), "out_shardings"), blocks)):
        what = f"out_shardings for result {k}"
        sharding = entry.sharding if isinstance(entry, Format) else entry
        sharding = _default_out_sharding(in_formats, what) if sharding is None else check_sharding(sharding, what)
        layout = entry.layout if isinstance(entry, Format) else None
        if layout is AUTO:
            layout = layout_of(block)
        layout = layout or Layout.row_major(block.ndim)
        layout.check_rank(block.ndim, what)
        found.append((Format(layout, sharding), _global_shape(sharding, block.shape)))
    return found


def _default_out_sharding(in_formats: Sequence[Format], what: str) -> Sharding:
    shardings = {f.sharding for f in in_formats}
    if not shardings:
        return SingleDeviceSharding(0)
    if len(shardings) == 1 and isinstance(next(iter(shardings)), SingleDeviceSharding):
        return next(iter(shardings))
    raise InvalidArgumentError(f"{what} has no sharding; when the arguments are sharded over a mesh, give each "
                               f"result a sim.NamedSharding saying how the per-device results assemble")


def _global_shape(sharding: Sharding, block_shape: tuple[int, ...]) -> tuple[int, ...]:
    if isinstance(sharding, SingleDeviceSharding):
        return tuple(block_shape)
    shape = list(block_shape)
    for dim, entry in enumerate(sharding.spec):
        if entry is not None:
            shape[dim] *= sharding.mesh.axis_size(entry)
    return tuple(shape)


def _placed(plan: Plan, i: int, value: Any) -> Array:
    """Argument `i` as an Array on the compiled sharding (uncommitted values are moved there)."""
    name, (shape, dtype), wanted = plan.names[i], plan.shapes[i], plan.in_formats[i]
    array = value if isinstance(value, Array) else device_put(value)
    if (array.shape, array.dtype) != (shape, dtype):
        raise InvalidArgumentError(f"argument {name} is {array.dtype}{list(array.shape)} but the function was "
                                   f"compiled for {dtype}{list(shape)}")
    if array.sharding == wanted.sharding:
        return array
    if array.committed:
        raise InvalidArgumentError(f"argument {name} is committed to sharding {array.sharding!r}, which does not "
                                   f"match the compiled sharding {wanted.sharding!r}")
    moved = device_put(np.asarray(array), Format(array.layout, wanted.sharding))
    return Array(moved.shape, moved.dtype, moved.format, False, moved.shards)


def _check_layouts(plan: Plan, arrays: Sequence[Array]) -> None:
    """Every committed argument must already have its compiled layout; list every one that does not."""
    lines = []
    for name, array, wanted in zip(plan.names, arrays, plan.in_formats):
        if array.committed and array.layout != wanted.layout:
            lines.append(f"argument {name} with shape {array.dtype}{list(array.shape)}: passed layout "
                         f"{array.layout!r} does not match the required layout {wanted.layout!r}")
    if lines:
        raise InvalidArgumentError(
            f"the function was compiled for input layouts that committed arguments do not have "
            f"({len(lines)} mismatch(es)):\n  " + "\n  ".join(lines)
            + "\ncommitted arrays are never relaid out implicitly: device_put them with the compiled "
              "input_formats, or pass uncommitted arrays")
