"""Abstract payloads: arrays that have a shape, a dtype and a size in bytes, and no values.

An abstract array is an ordinary numpy array whose dtype is a *hollow* stand-in for its real one: a
structured dtype with no fields and the real dtype's itemsize, which carries the real dtype in its
metadata. Everything a collective does to buffers works on it unchanged and costs nothing per byte:
slicing, views, reshapes and transposes; `nbytes`, strides, contiguity and addresses are those of the real
array, so messages, their sizes, the trace and the times are those of the run with real bytes. Copying a
hollow array copies no bytes (numpy moves no data for a dtype without fields), and its storage is address
space the operating system never backs (`hollow_empty` maps large ones without reserving memory), so a run
grows with its messages, not with its bytes.

What has no meaning without values is routed or refused: arithmetic on hollow operands gives a hollow
result of numpy's result shape and dtype (`hollow_ufunc`), and reading values raises `AbstractValueError`.

>>> x = hollow_empty((4, 1 << 20), np.float32)
>>> x.nbytes, logical_dtype(x.dtype), is_abstract(x[1:3].reshape(-1))
(16777216, dtype('float32'), True)
>>> y = x[::2].copy()  # a copy moves no bytes
>>> as_struct(y).shape, as_struct(y).dtype
((2, 1048576), dtype('float32'))
"""

from __future__ import annotations

import math
import mmap
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from layouts import ABSTRACT_KEY as _KEY
from layouts import is_movable, logical, native_dtype
from sim._errors import InvalidArgumentError, InvalidTypeError
from sim.memory._sharding import Sharding

_MAP_NORESERVE = 0x4000  # Linux: map address space without reserving memory for it
_MAPPED_BYTES = 1 << 20  # hollow arrays past this size are mapped, not allocated (no commit charge)
_HOLLOW: dict[np.dtype, np.dtype] = {}
_BUFFER_DTYPE = np.ndarray.dtype.__get__  # numpy's own attribute, past a subclass's `dtype` (`sim.Varying`'s)


@dataclass(frozen=True)
class ShapeDtypeStruct:
    """A shape, a dtype and (optionally) a sharding, without values (JAX's `jax.ShapeDtypeStruct`): what
    `jit(...).trace` compiles for, and an abstract operand of `shard_map` (see the module docstring).

    The dtype is kept in native byte order (`layouts.native_dtype`: '>f4' is float32), as every array a
    device holds is."""

    shape: tuple[int, ...]
    dtype: Any
    sharding: Sharding | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        object.__setattr__(self, "dtype", native_dtype(self.dtype))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


class AbstractValueError(InvalidArgumentError):
    """An operation needed the values of an abstract (shape and dtype only) array."""


def hollow_dtype(dtype: Any) -> np.dtype:
    """The hollow stand-in of `dtype`: no fields, `dtype`'s itemsize, `dtype` in native byte order in its
    metadata (one object per dtype). A hollow dtype is its own stand-in."""
    dtype = np.dtype(dtype)
    if is_hollow(dtype):
        return dtype
    dtype = native_dtype(dtype)
    found = _HOLLOW.get(dtype)
    if found is None:
        found = _HOLLOW[dtype] = np.dtype({"names": [], "formats": [], "itemsize": dtype.itemsize},
                                          metadata={_KEY: dtype})
    return found


def is_hollow(dtype: Any) -> bool:
    """Whether `dtype` is a hollow stand-in (see `hollow_dtype`)."""
    metadata = getattr(dtype, "metadata", None)
    return metadata is not None and _KEY in metadata


def logical_dtype(dtype: Any) -> np.dtype:
    """The dtype `dtype` stands for: the real one of a hollow dtype, else `dtype` itself."""
    return logical(dtype)


def buffer_dtype(value: np.ndarray) -> np.dtype:
    """The dtype numpy holds `value`'s elements in: an abstract array's hollow stand-in, also where the array
    is a `sim.Varying`, whose `dtype` is the logical one a program reads (as on the run with bytes)."""
    return _BUFFER_DTYPE(value)


def is_abstract(value: Any) -> bool:
    """Whether `value` is an abstract array (a numpy array of a hollow dtype) or a shape-dtype struct."""
    if isinstance(value, np.ndarray):
        return is_hollow(_BUFFER_DTYPE(value))
    return is_struct(value)


def is_struct(value: Any) -> bool:
    """Whether `value` says a shape and a dtype without values: `sim.ShapeDtypeStruct`, or JAX's (told by its
    name, so that JAX need not be imported)."""
    return (not isinstance(value, np.ndarray) and type(value).__name__ == "ShapeDtypeStruct"
            and hasattr(value, "shape") and hasattr(value, "dtype"))


def hollow_empty(shape: Any, dtype: Any) -> np.ndarray:
    """A writable, C-contiguous abstract array of `shape` standing for `dtype`: large ones in address space
    mapped without reserving memory (never touched: no bytes are ever written to it).

    Raises:
        InvalidArgumentError: a negative dimension.
        InvalidTypeError: a dtype that holds no numbers.
        MemoryError: the process has no address space left for it (about 128 TiB at once on x86-64 Linux).
    """
    shape = tuple(int(n) for n in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    if any(n < 0 for n in shape):
        raise InvalidArgumentError(f"shape={shape} must not have negative dimensions")
    if not is_movable(dtype):
        raise InvalidTypeError(f"dtype={np.dtype(dtype)} must be numeric or a float8 type for an abstract array")
    hollow = hollow_dtype(dtype)
    count = 1
    for n in shape:
        count *= n
    size = count * hollow.itemsize
    if size <= _MAPPED_BYTES:
        return np.zeros(shape, hollow)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE
    try:
        region = mmap.mmap(-1, size, flags=flags)
    except OSError as error:
        raise MemoryError(f"an abstract {logical(dtype)}{list(shape)} needs {size} bytes of address space and the "
                          f"process has no more ({error}); run fewer or smaller abstract arrays at once, or raise "
                          f"the process's address-space limit (a scenario's code runs under one, --max-memory): "
                          f"it counts abstract arrays at their full size, which they never take in memory") from None
    return np.frombuffer(region, hollow, count).reshape(shape)


def abstract_like(value: Any) -> np.ndarray:
    """An abstract array of `value`'s shape and dtype: a shape-dtype struct, an array (its values dropped) or
    an abstract array (returned as it is).

    Raises:
        InvalidTypeError: `value` has no shape and dtype.
    """
    if isinstance(value, np.ndarray) and is_hollow(value.dtype):
        return value
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        raise InvalidTypeError(f"value={value!r} must have a shape and a dtype (a ShapeDtypeStruct or an array)")
    return hollow_empty(tuple(shape), np.dtype(dtype))


def as_struct(value: np.ndarray) -> ShapeDtypeStruct:
    """The `ShapeDtypeStruct` of an abstract array (its shape and real dtype)."""
    return ShapeDtypeStruct(value.shape, logical_dtype(value.dtype))


def global_struct(mesh: Any, spec: Any, path: str, per_device: tuple) -> ShapeDtypeStruct:
    """The global `ShapeDtypeStruct` a `shard_map` output of abstract blocks `per_device` assembles to under
    `spec` (the values are never put together: there are none).

    Raises:
        InvalidArgumentError: the devices' blocks differ in shape or dtype, or some are abstract and some not;
            `spec` has more entries than the rank.
    """
    first = per_device[0]
    for d, block in enumerate(per_device):
        if block.shape != first.shape or block.dtype != first.dtype or not is_abstract(block):
            kind = "an abstract" if is_abstract(block) else "a concrete"
            raise InvalidArgumentError(
                f"{path}: device {d} returned {kind} {logical_dtype(block.dtype)}{list(block.shape)} but device 0 "
                f"returned an abstract {logical_dtype(first.dtype)}{list(first.shape)}; every device must return "
                f"the same shape and dtype")
    if len(spec) > first.ndim:
        raise InvalidArgumentError(f"{path}: out_specs entry {spec!r} has more entries than rank {first.ndim}")
    shape = [n * (mesh.axis_size(entry) if entry is not None else 1) for n, entry in
             zip(first.shape, (*spec, *(None,) * (first.ndim - len(spec))))]
    return ShapeDtypeStruct(tuple(shape), logical_dtype(first.dtype))


def hollow_ufunc(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict) -> Any:
    """What `getattr(ufunc, method)(*inputs, **kwargs)` gives on abstract operands, without values: an
    abstract array of the shape and dtype numpy gives the same call on real arrays (the dtype worked out on
    0-d stand-ins, the shape from the operands' shapes), written to `out` when given.

    Raises:
        AbstractValueError: the call is not elementwise or a reduction along axes (`method` other than
            `__call__`, `reduce`, `accumulate`), or numpy refuses it on the real dtypes.
    """
    if method not in ("__call__", "reduce", "accumulate"):
        raise AbstractValueError(f"ufunc={ufunc.__name__}.{method} needs values; abstract arrays have none")
    kwargs = dict(kwargs)
    out = kwargs.pop("out", None)
    axis, keepdims = kwargs.pop("axis", 0), kwargs.pop("keepdims", False)
    kwargs.pop("where", None)
    core = ufunc.signature is not None and method == "__call__"  # a gufunc: matmul, vecdot, ...
    try:
        with np.errstate(all="ignore"):  # the stand-ins' zeros are no one's values: 0/0 warns of nothing real
            scalars, shapes = _worked_out(ufunc, method, inputs, kwargs, core, axis, keepdims)
    except (TypeError, ValueError) as error:
        raise AbstractValueError(f"ufunc={ufunc.__name__}.{method} on abstract operands: {error}") from None
    results = scalars if isinstance(scalars, tuple) else (scalars,)
    made = tuple(hollow_empty(shape, np.asarray(r).dtype) for r, shape in zip(results, shapes))
    if out is not None:
        return out if len(out) > 1 else out[0]
    return made if isinstance(scalars, tuple) else made[0]


def _worked_out(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict, core: bool, axis: Any,
                keepdims: bool) -> tuple[Any, list]:
    """`hollow_ufunc`'s call on stand-ins: its result(s) on real zeros (of numpy's dtypes) and the shapes of
    its results on the abstract operands."""
    if core:
        stand_ins, shapes = _core_shapes(ufunc, [np.shape(x) for x in inputs])
        return ufunc(*[np.zeros(s, logical_dtype(np.asarray(x).dtype)) if isinstance(x, np.ndarray) else x
                       for x, s in zip(inputs, stand_ins)], **kwargs), shapes
    scalars = getattr(ufunc, method)(*[_stand_in(x) for x in inputs], **kwargs) if method == "__call__" \
        else getattr(ufunc, method)(np.zeros(1, logical_dtype(np.asarray(inputs[0]).dtype)), **kwargs)
    return scalars, [_result_shape(method, [np.shape(x) for x in inputs], axis, keepdims)] * ufunc.nout


# how numpy names a hollow dtype when it refuses one: its repr, its DType class, its scalar type; a ufunc
# without a loop for it
_STAND_IN_WORDS = ("'names': [], 'formats': []", "VoidDType", "numpy.void", "not supported for the input types")


def stand_in_refusal(error: TypeError) -> AbstractValueError | None:
    """The `AbstractValueError` to raise for numpy's `error` when it refused a hollow stand-in dtype: an abstract
    value taken out of meshsim's hands (`np.asarray(x)`, `np.array(x)` give a plain numpy array, whose own
    arithmetic reads values); None when `error` names no such dtype."""
    text = str(error)
    if not any(words in text for words in _STAND_IN_WORDS):
        return None
    return AbstractValueError(
        f"numpy refused an abstract value's stand-in ({type(error).__name__}: {text}); an abstract value has a "
        f"shape and a dtype, no values, and np.asarray(x) or np.array(x) of one gives a plain numpy array that "
        f"meshsim no longer follows: compute on x itself (numpy's functions and methods on it give abstract "
        f"results of numpy's shapes and dtypes), or run with real operands to read values")


_NEEDS_VALUES = frozenset({"nonzero", "argwhere", "flatnonzero", "unique", "extract", "compress", "tolist", "item",
                           "array_equal", "allclose", "isclose", "count_nonzero", "searchsorted", "bincount"})


# numpy functions that on a hollow array would read its elements as bytes (sorting them) or walk them one by one
# before refusing (the products): worked out from shapes, never tried on the array as it is
_READ_ELEMENTS = frozenset({"sort", "argsort", "partition", "argpartition", "lexsort", "msort", "sort_complex", "dot",
                            "vdot", "inner", "outer", "tensordot", "einsum", "kron", "cross"})


def abstract_call(op: str, fn: Any, operands: list) -> Any:
    """`fn(*operands)` (a local operation named `op`) where some operands are abstract: numpy's own answer
    where it has one for hollow dtypes (views, reshapes, copies, concatenations: `restored`), else the result
    worked out from shapes (`_Shapes`: reductions, sorts, products...), else the shape and dtype of `fn` on
    real stand-ins of the abstract operands (zeros, one element in memory, broadcast to their shapes), as an
    abstract result.

    Raises:
        AbstractValueError: `op` answers from values (its result's shape or its Python value depends on them:
            `nonzero`, `unique`, `item`, ...).
    """
    if op in _NEEDS_VALUES:
        raise AbstractValueError(f"op={op!r} needs values (its result depends on them); abstract arrays have none: "
                                 f"run it on real operands")
    if op == "getitem" and any(is_abstract(x) for x in operands[1:]):
        raise AbstractValueError("indexing by an abstract array (a mask or indices) needs its values; abstract "
                                 "arrays have none: index with real arrays, slices or ints")
    if op not in _READ_ELEMENTS:
        try:
            return restored(fn(*operands), operands)
        except TypeError:  # numpy has no rule for hollow dtypes here (promotion with a number, a cast)
            pass
    worked_out = _through_shapes(fn, operands)
    if worked_out is not None:
        return worked_out
    with np.errstate(all="ignore"):  # the stand-ins' zeros are no one's values: what they raise is not real
        real = fn(*[_broadcast_stand_in(x) for x in operands])
    if isinstance(real, tuple):
        return tuple(hollow_empty(np.shape(r), np.asarray(r).dtype) for r in real)
    return hollow_empty(np.shape(real), np.asarray(real).dtype) if isinstance(real, (np.ndarray, np.generic)) else real


class _Shapes(np.ndarray):
    """A hollow array on which a numpy function works out its result's shape and dtype from shapes alone: the
    function's own Python implementation runs on it (`_implementation`), its ufuncs answer as `hollow_ufunc`
    does, touching no element, its arg-reductions and sorts answer from its shape, and its `dtype` reads as
    the real one, so the implementation takes the branch it takes on real values. A C routine that would
    read the stand-in's bytes raises TypeError (numpy has no loop for a hollow dtype)."""

    @property
    def dtype(self) -> np.dtype:
        return logical_dtype(buffer_dtype(self))

    @dtype.setter
    def dtype(self, dtype: Any) -> None:
        np.ndarray.dtype.__set__(self, dtype)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if "out" in kwargs:
            kwargs["out"] = tuple(np.asarray(o) for o in kwargs["out"])
        plain = tuple(np.asarray(x) if isinstance(x, np.ndarray) else x for x in inputs)
        return _shaped(hollow_ufunc(ufunc, method, plain, kwargs))

    def __array_function__(self, func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
        worked_out = {np.dot: _dot, np.einsum: _einsum}.get(func)  # C routines: from shapes here
        return _shaped(worked_out(*args, **kwargs)) if worked_out else func._implementation(*args, **kwargs)

    def argmax(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        return _shaped(hollow_empty(_result_shape("reduce", [self.shape], axis, keepdims), np.intp))

    argmin = argmax

    def argsort(self, axis: Any = -1, *args: Any, **kwargs: Any) -> Any:
        return _shaped(hollow_empty((self.size,) if axis is None else self.shape, np.intp))

    argpartition = argsort

    def sort(self, *args: Any, **kwargs: Any) -> None:  # in place: the same shape, and no values to order
        return None

    partition = sort


def _dot(a: Any, b: Any, out: Any = None) -> np.ndarray:
    """`np.dot(a, b)`'s result as an abstract array (numpy's dot is C, which would read the stand-in's bytes)."""
    if out is not None:
        raise TypeError("np.dot with out= is worked out on stand-ins")
    shape_a, shape_b = np.shape(a), np.shape(b)
    if not shape_a or not shape_b:  # a product by a scalar
        return hollow_empty(tuple(np.broadcast_shapes(shape_a, shape_b)),
                            np.asarray(np.multiply(_stand_in(a), _stand_in(b))).dtype)
    summed = shape_b[0] if len(shape_b) == 1 else shape_b[-2]
    if shape_a[-1] != summed:
        raise ValueError(f"shapes {shape_a} and {shape_b} not aligned")
    shape = shape_a[:-1] + shape_b[:-2] + shape_b[-1:] if len(shape_b) > 1 else shape_a[:-1]
    stand_ins = [np.zeros((1, 1), logical_dtype(np.asarray(x).dtype)) for x in (a, b)]
    return hollow_empty(shape, np.dot(*stand_ins).dtype)


def _einsum(subscripts: Any, *operands: Any, out: Any = None, **kwargs: Any) -> np.ndarray:
    """`np.einsum(subscripts, *operands)`'s result as an abstract array: its shape from the subscripts (explicit
    or implicit output, `...` broadcast), its dtype from einsum on stand-ins whose every dimension is 1."""
    if out is not None or not isinstance(subscripts, str):
        raise TypeError("np.einsum with out= or interleaved operands is worked out on stand-ins")
    inputs, arrow, output = subscripts.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"{len(terms)} subscripts for {len(operands)} operands")
    sizes: dict[str, int] = {}
    broadcast = []
    for term, operand in zip(terms, operands):
        shape = np.shape(operand)
        head, dots, tail = term.partition("...")
        middle = len(shape) - len(head) - len(tail)
        if middle < 0 or (middle and not dots):
            raise ValueError(f"subscripts {term!r} for an operand of shape {shape}")
        broadcast.append(shape[len(head):len(head) + middle])
        for label, n in zip(head + tail, shape[:len(head)] + shape[len(head) + middle:]):
            if sizes.get(label, n) not in (n, 1) and n != 1:
                raise ValueError(f"label {label!r} has sizes {sizes[label]} and {n}")
            sizes[label] = max(sizes.get(label, n), n)
    if not arrow:
        labels = "".join(t.replace("...", "") for t in terms)
        output = ("..." if "..." in inputs else "") + "".join(sorted(c for c in set(labels) if labels.count(c) == 1))
    head, _, tail = output.partition("...")
    shape = tuple(sizes[c] for c in head) + tuple(np.broadcast_shapes(*broadcast)) + tuple(sizes[c] for c in tail)
    stand_ins = [np.zeros((1,) * np.ndim(x), logical_dtype(np.asarray(x).dtype)) for x in operands]
    return hollow_empty(shape, np.asarray(np.einsum(subscripts, *stand_ins, **kwargs)).dtype)


def _shaped(value: Any) -> Any:
    """`value` (an array, or a tuple of them) as `_Shapes`."""
    if isinstance(value, tuple):
        return tuple(_shaped(v) for v in value)
    return value.view(_Shapes) if isinstance(value, np.ndarray) and is_hollow(value.dtype) else value


def _through_shapes(fn: Any, operands: list) -> Any:
    """`fn`'s result on the abstract `operands` worked out from shapes (`_Shapes`), as plain abstract arrays;
    None when it cannot be: the function read values or gave anything but abstract arrays."""
    try:
        with np.errstate(all="ignore"):
            result = fn(*[_shaped(x) for x in operands])
    except Exception:  # whatever it was, the stand-ins of the full shape give numpy's own answer or error
        return None
    results = result if isinstance(result, tuple) else (result,)
    if not all(isinstance(r, np.ndarray) and is_hollow(buffer_dtype(r)) for r in results):
        return None
    plain = tuple(r.view(np.ndarray) for r in results)
    return plain if isinstance(result, tuple) else plain[0]


def _broadcast_stand_in(value: Any) -> Any:
    """A read-only real array of an abstract operand's shape and real dtype, one element in memory."""
    if isinstance(value, np.ndarray) and is_hollow(value.dtype):
        return np.broadcast_to(np.zeros((), logical_dtype(value.dtype)), value.shape)
    return value


def restored(result: Any, operands: list) -> Any:
    """`result` of a numpy function of `operands`, its hollow dtype put back where numpy's promotion of
    structured dtypes dropped it (`concatenate`, `stack`, `where`... give a field-less dtype of itemsize 0):
    the real dtype of the first abstract operand, whose itemsize numpy's own promotion would keep."""
    if isinstance(result, tuple):
        return tuple(restored(r, operands) for r in result)
    if not isinstance(result, np.ndarray) or result.dtype.kind != "V" or is_hollow(result.dtype):
        return result
    first = next((x for x in operands if isinstance(x, np.ndarray) and is_hollow(x.dtype)), None)
    if first is None or result.dtype.itemsize or result.dtype.names:
        return result
    return hollow_empty(result.shape, logical_dtype(first.dtype))


def _core_shapes(ufunc: np.ufunc, shapes: list[tuple[int, ...]]) -> tuple[list[tuple[int, ...]], list[tuple]]:
    """For a generalized ufunc on operands of `shapes`: stand-in shapes for working out its dtypes (every core
    dimension 1, no loop dimensions) and the shapes of its results, read off its signature as numpy reads it
    (loop dimensions broadcast; a flexible dimension `n?` an operand lacks is left out of the results).

    >>> _core_shapes(np.matmul, [(5, 2, 3), (3, 4)])[1], _core_shapes(np.matmul, [(3,), (3, 4)])[1]
    ([(5, 2, 4)], [(4,)])
    """
    ins, outs = ufunc.signature.split("->")
    parse = lambda text: [[d.strip() for d in group.split(",") if d.strip()]
                          for group in re.findall(r"\(([^)]*)\)", text)]
    sizes: dict[str, int] = {}
    dropped: set[str] = set()
    loops, stand_ins = [], []
    for k, (dims, shape) in enumerate(zip(parse(ins), shapes)):
        missing = len(dims) - len(shape)
        flexible = [d for d in dims if d.endswith("?")]
        if missing > len(flexible):
            raise ValueError(f"operand {k} has {len(shape)} dimensions; its core signature needs {len(dims)}")
        gone = set(flexible[:max(missing, 0)])
        dropped |= gone
        kept = [d for d in dims if d not in gone]
        loops.append(shape[:len(shape) - len(kept)])
        stand_ins.append((1,) * len(kept))
        for name, n in zip(kept, shape[len(shape) - len(kept):]):
            name = name.rstrip("?")
            if (name.isdigit() and int(name) != n) or sizes.setdefault(name, n) != n:
                raise ValueError(f"operand {k} has a mismatch in its core dimension {name!r}: {n} and "
                                 f"{sizes.get(name, name)}")
    loop = tuple(np.broadcast_shapes(*loops))
    results = [loop + tuple(int(d) if d.isdigit() else sizes[d.rstrip("?")] for d in dims if d not in dropped)
               for dims in parse(outs)]
    return stand_ins, results


def _result_shape(method: str, shapes: list[tuple[int, ...]], axis: Any, keepdims: bool) -> tuple[int, ...]:
    """The shape a ufunc's `method` gives on operands of `shapes`."""
    if method == "__call__":
        return tuple(np.broadcast_shapes(*shapes))
    shape = shapes[0]
    if method == "accumulate":
        return shape
    axes = range(len(shape)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    axes = {int(a) % max(len(shape), 1) for a in axes}
    return tuple(1 if k in axes else n for k, n in enumerate(shape) if keepdims or k not in axes)


def _stand_in(value: Any) -> Any:
    """A 0-d real operand of the (real) dtype of `value`, for working out a result's dtype."""
    if isinstance(value, np.ndarray):
        return np.zeros((), logical_dtype(value.dtype))
    return value


__all__ = ["AbstractValueError", "ShapeDtypeStruct", "abstract_call", "abstract_like", "as_struct", "buffer_dtype",
           "global_struct", "hollow_dtype", "hollow_empty", "hollow_ufunc", "is_abstract", "is_hollow", "is_struct",
           "logical_dtype", "restored", "stand_in_refusal"]
