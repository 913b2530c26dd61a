"""Each device's input arrays: literal `[[device]]` tables, or drawn from `[inputs] seed` and `shape`."""

from __future__ import annotations

from typing import Any

import numpy as np

import layouts
import sim
from collectives import Definition
from scenarios import _fields as fields
from scenarios._errors import Source
from scenarios._fields import InFile
from sim.record import counted

Inputs = tuple[dict[str, np.ndarray], ...]


def device_inputs(source: Source, data: dict, mesh: sim.Mesh, spec: Definition, params: dict[str, Any],
                  abstract: bool = False) -> Inputs:
    """The arrays of each device of `mesh` for the collective `spec` called with `params`, typed and checked.

    Data arrays take `[inputs] dtype`, else float32 when any literal is a float, int32 when they are
    integers, bool when booleans (JAX's defaults). Offsets and sizes take `[inputs] index_dtype`, int32
    (JAX's default) or int64. A literal array may also be `{fill = v, shape = [...]}` or, to give every
    bit (NaN payloads), `{bits = ["0x7fc1", ...]}` in `[inputs] dtype`. A collective without arrays
    (axis_index) needs no inputs. With `abstract`, the data arrays (not the offsets and sizes) are abstract:
    their shapes and dtypes without values (none is drawn from a seed).

    Raises:
        ScenarioError: missing or extra arguments, a table count that is not the device count, values that
            are not rectangular numeric arrays or do not fit the dtype, bits without a dtype or wider than
            it, an index dtype other than int32 or int64, shapes that differ between devices,
            an operand that must be invariant along the axes (pvary, pscatter) but differs along them.
    """
    count = mesh.size
    settings = source.table(data, "inputs", required=False) or {}
    source.check_keys("inputs", settings, (), ("seed", "shape", "dtype", "index_dtype"))
    dtype = _dtype(source, settings.get("dtype"))
    index_dtype = _index_dtype(source, settings.get("index_dtype", "int32"))
    devices = data.get("device")
    if "seed" in settings or "shape" in settings:
        if devices is not None:
            raise source.error("device", None, "[[device]] tables and [inputs] seed/shape are alternatives; give one")
        return _generated(source, settings, mesh, spec, params, dtype or np.dtype(np.float32), abstract)
    if devices is None and not spec.arrays:
        return tuple({} for _ in range(count))
    if devices is None:
        raise source.error("", None, f"the inputs are missing: give {count} [[device]] tables (one per device, "
                                     f"in device order) or [inputs] seed and shape")
    inputs = _literal(source, devices, count, spec, dtype, index_dtype)
    _check_shapes(source, inputs)
    if spec.invariant_operand:
        _check_invariant(source, inputs, mesh, spec, params["axis_name"])
    if abstract:
        return tuple({name: x if name in spec.index_arrays else _hollow(x.shape, x.dtype) for name, x in mine.items()}
                     for mine in inputs)
    return inputs


def _dtype(source: Source, name: Any) -> np.dtype | None:
    """`[inputs] dtype` as a numpy dtype, None when absent."""
    if name is None:
        return None
    return fields.dtype(InFile(source, "inputs", "dtype", "[inputs] "), name,
                        example="'float32', 'bfloat16' or 'int32'")


def _hollow(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A read-only abstract array: `shape` and `dtype`, no values."""
    array = sim.memory.hollow_empty(shape, dtype)
    array.flags.writeable = False
    return array


def _generated(source: Source, settings: dict, mesh: sim.Mesh, spec: Definition, params: dict[str, Any],
               dtype: np.dtype, abstract: bool = False) -> Inputs:
    """One draw of `x` per device from `numpy.random.default_rng(seed)`, in device order.

    For an operand that must be invariant along the axes (pvary, pscatter), the devices that differ
    only along them share the draw of the first of them."""
    if spec.arrays != ("x",):
        raise source.error("inputs", "seed", f"[inputs] seed draws the one array x of a collective that takes "
                                             f"only x; {spec.name} needs literal [[device]] tables")
    shape = fields.shape(InFile(source, "inputs", "shape", "[inputs] "), settings.get("shape"))
    if abstract:  # nothing is drawn: a seed is optional (and checked when given)
        if "seed" in settings:
            fields.integer(InFile(source, "inputs", "seed", "[inputs] "), settings["seed"], minimum=0)
        return tuple({"x": _hollow(shape, dtype)} for _ in mesh.devices)
    seed = fields.integer(InFile(source, "inputs", "seed", "[inputs] "), settings.get("seed"), minimum=0)
    rng = np.random.default_rng(seed)
    drawn = [_frozen(_draw(rng, shape, dtype)) for _ in mesh.devices]
    if spec.invariant_operand:
        drawn = [drawn[_first_peer(mesh, d, params["axis_name"])] for d in mesh.devices]
    return tuple({"x": x} for x in drawn)


def _draw(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Floats from a standard normal, integers from [-9, 9] (unsigned [0, 9]), booleans by fair coin."""
    if layouts.is_any_float(dtype):
        return rounded(rng.standard_normal(shape), dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(max(-9, np.iinfo(dtype).min), 10, shape).astype(dtype)


def rounded(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Drawn float `values` rounded to the float `dtype` (bfloat16 and float8 included); float8_e8m0fnu, which
    holds no sign, takes their magnitudes (a negative value would round to its NaN)."""
    return (np.abs(values) if dtype.name == "float8_e8m0fnu" else values).astype(dtype)


def _index_dtype(source: Source, name: Any) -> np.dtype:
    """`[inputs] index_dtype`, the dtype of offsets and sizes: int32 (JAX's default) or int64."""
    if name not in ("int32", "int64"):
        raise source.error("inputs", "index_dtype", f"[inputs] index_dtype={name!r} must be 'int32' or 'int64'")
    return np.dtype(name)


def _literal(source: Source, devices: Any, count: int, spec: Definition, dtype: np.dtype | None,
             index_dtype: np.dtype) -> Inputs:
    """The `[[device]]` tables as arrays, data in one dtype, offsets and sizes in `index_dtype`."""
    if not isinstance(devices, list) or not all(isinstance(table, dict) for table in devices):
        raise source.error("", "device", "device must be an array of tables: write [[device]] once per device")
    if len(devices) != count:
        raise source.error("device", None, f"there {'is' if len(devices) == 1 else 'are'} "
                                           f"{counted(len(devices), '[[device]] table')} but the mesh has "
                                           f"{counted(count, 'device')}; give one per device, in device order")
    raw = []
    for d, table in enumerate(devices):
        source.check_keys("device", table, spec.arrays, (), index=d)
        raw.append({name: _array(source, d, name, table[name], dtype) for name in spec.arrays})
    dtype = dtype or _infer([arrays[name] for arrays in raw for name in spec.data_arrays])
    return tuple(
        {name: _typed(source, d, name, array, devices[d][name],
                      index_dtype if name in spec.index_arrays else dtype, name in spec.index_arrays)
         for name, array in arrays.items()}
        for d, arrays in enumerate(raw)
    )


def _array(source: Source, d: int, name: str, value: Any, dtype: np.dtype | None) -> np.ndarray:
    """A literal array, `{fill = v, shape = [...]}` for a constant one, or `{bits = [...]}` for one given
    bit for bit (hex strings of `[inputs] dtype`'s width: NaN payloads kept)."""
    where = f"[[device]] for device {d}: {name}"
    if isinstance(value, dict) and set(value) == {"bits"}:
        return _bits(source, where, name, value["bits"], dtype, d)
    if isinstance(value, dict):
        fill, shape = value.get("fill"), value.get("shape")
        if set(value) != {"fill", "shape"} or type(fill) not in (int, float, bool) or not fields.is_shape(shape):
            raise source.error("device", name, f"{where}={value!r} must be an array or a table "
                                               f"{{fill = <number>, shape = [<sizes>]}} or {{bits = [<hex>]}}", d)
        return np.full(shape, fill)
    try:
        array = np.array(value)
    except ValueError:  # nested lists of unequal lengths
        array = None
    if array is None or (array.size and array.dtype.kind not in "biuf"):
        shown = repr(value) if len(repr(value)) < 60 else repr(value)[:57] + "..."
        raise source.error("device", name, f"{where}={shown} must be a number or a rectangular array of numbers", d)
    return array


def _bits(source: Source, where: str, name: str, value: Any, dtype: np.dtype | None, d: int) -> np.ndarray:
    """`{bits = [...]}`: a rectangular array of hex strings, each one element's bits in `dtype`."""
    if dtype is None:
        raise source.error("device", name, f"{where}: {{bits = [...]}} needs [inputs] dtype, the dtype whose "
                                           f"bits the strings give", d)
    try:
        text = np.array(value, dtype=str)
        words = np.vectorize(lambda s: int(s, 16) if s.lower().startswith("0x") else -1, otypes=[object])(text)
    except ValueError:
        words = None
    limit = 1 << (8 * dtype.itemsize)
    if words is None or not text.size or not all(0 <= w < limit for w in words.ravel()):
        raise source.error("device", name, f"{where}: bits must be a rectangular array of hex strings of at most "
                                           f"{dtype.itemsize} bytes each (dtype={dtype.name}), e.g. "
                                           f"[\"0x{'7f' * dtype.itemsize}\"]", d)
    unsigned = np.dtype(f"u{dtype.itemsize}")
    return words.astype(unsigned).view(dtype)


def _infer(arrays: list[np.ndarray]) -> np.dtype:
    """JAX's default dtype for the literals: float32 if any is a float, else int32, else bool."""
    kinds = {array.dtype.kind for array in arrays if array.size}
    if "f" in kinds or not kinds:
        return np.dtype(np.float32)
    return np.dtype(np.int32) if kinds - {"b"} else np.dtype(bool)


def _typed(source: Source, d: int, name: str, array: np.ndarray, written: Any, dtype: np.dtype,
           index: bool) -> np.ndarray:
    """`array` (read from `written`) cast to `dtype` (the index dtype for offsets and sizes), refusing a cast
    that changes a value beyond rounding (`fields.cast_exactly`: 4.5 as int32, 1e40 as float32, 16777217 as
    float32)."""
    where = f"[[device]] for device {d}: {name}"
    if index and array.size and array.dtype.kind not in "iu":
        raise source.error("device", name, f"{where}={array.tolist()} must hold integers (offsets and sizes)", d)
    cast, problem = fields.cast_exactly(array, dtype, written)
    if problem is not None:
        raise source.error("device", name, f"{where}{problem}; change the value or [inputs] dtype", d)
    return _frozen(cast)


def _check_shapes(source: Source, inputs: Inputs) -> None:
    """Every device's array of one argument has the same shape: shard_map stacks them."""
    for name, first in inputs[0].items():
        for d, arrays in enumerate(inputs):
            if arrays[name].shape != first.shape:
                raise source.error("device", name, f"[[device]] for device {d}: {name} has shape "
                                                   f"{list(arrays[name].shape)} but device 0's has {list(first.shape)};"
                                                   f" every device's {name} must have the same shape", d)


def _check_invariant(source: Source, inputs: Inputs, mesh: sim.Mesh, spec: Definition, axis_name: Any) -> None:
    """Devices that differ only along `axis_name` hold the same arrays: `spec` takes an invariant operand."""
    for d, arrays in enumerate(inputs):
        twin = _first_peer(mesh, d, axis_name)
        for name, array in arrays.items():
            if array.tobytes() != inputs[twin][name].tobytes():
                raise source.error("device", name, f"[[device]] for device {d}: {name} differs from device {twin}'s, "
                                                   f"but {spec.name} takes an operand invariant along "
                                                   f"axis_name={axis_name!r}: devices that differ only along it "
                                                   f"must hold the same values", d)


def _first_peer(mesh: sim.Mesh, device: int, axis_name: Any) -> int:
    """The device that differs from `device` only along `axis_name`, at index 0 along it (without listing
    every peer, which would cost a mesh of n devices n * n steps)."""
    coords = mesh.coords(device)
    coords.update(dict.fromkeys(mesh.axis_names_of(axis_name), 0))
    first = 0
    for name in mesh.axis_names:
        first = first * mesh.shape[name] + coords[name]
    return first


def _frozen(array: np.ndarray) -> np.ndarray:
    """`array`, made read-only."""
    array.setflags(write=False)
    return array
