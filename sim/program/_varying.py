"""`Varying`: a device-local array that carries its device-variance set and records what made it.

Inside `shard_map`, every input is a `Varying` whose `vma` holds the mesh axes its in_spec splits it
over. Numpy operations on it go through `__array_ufunc__` / `__array_function__`, which apply the design
note's rule for n-ary operations (the result varies along the union of the operands' axes; with
`check_vma=True` each operand that varies along fewer axes is first promoted by a recorded `pvary`,
which moves no data) and record an equation in the device's `Program`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from sim.engine._driver import current_or_none
from sim.memory._abstract import (
    AbstractValueError,
    abstract_call,
    buffer_dtype,
    hollow_dtype,
    hollow_empty,
    hollow_ufunc,
    is_abstract,
    logical_dtype,
)
from sim.record._equations import Const, Var

_INVARIANT: frozenset = frozenset()


class Varying(np.ndarray):
    """A numpy array on one simulated device, with `vma` (the axes it may vary along) and its `variable`
    (the program's record of it; not `var`, which is numpy's variance)."""

    vma: frozenset
    variable: Var | None = None  # (a new view's: numpy gives it no attribute of the array it views)
    made: tuple = ()  # `(variable,)`, the outputs of the equation that made `variable` (`wrap`), when recorded so

    def __array_finalize__(self, obj: Any) -> None:
        self.vma = getattr(obj, "vma", _INVARIANT)

    @property
    def dtype(self) -> np.dtype:
        """The dtype a program reads: an abstract value's logical one (float32, not the hollow stand-in its
        buffer holds), so that code branching on it runs as on the values. numpy's own code, and meshsim's
        through `sim.memory.buffer_dtype`, reads the stand-in."""
        dtype = buffer_dtype(self)
        return dtype if dtype.metadata is None else logical_dtype(dtype)

    @dtype.setter
    def dtype(self, dtype: Any) -> None:
        np.ndarray.dtype.__set__(self, dtype)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, out=None, **kwargs: Any):
        name = ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}"
        if out is not None:
            kwargs["out"] = tuple(np.asarray(o) for o in out)
        call = getattr(ufunc, method)
        if any(is_abstract(x) for x in inputs):  # abstract payloads: the result's shape and dtype, no values
            call = lambda *plain, **kw: hollow_ufunc(ufunc, method, plain, kw)
        result = apply(name, lambda *plain: call(*plain, **kwargs), list(inputs),
                       {k: v for k, v in kwargs.items() if k != "out"})
        if out is None:
            return result
        for target, fresh in zip(out, result if isinstance(result, tuple) else (result,)):
            if isinstance(target, Varying):
                target.vma, target.variable = fresh.vma, fresh.variable
        return out[0] if len(out) == 1 else out

    def __array_function__(self, func: Callable, types: tuple, args: tuple, kwargs: dict):
        leaves, rebuild = _flatten(args)
        params = dict(kwargs)
        params.update({f"arg{i}": a for i, a in enumerate(args) if not _is_array_tree(a)})
        return apply(func.__name__, lambda *plain: func(*rebuild(plain), **kwargs), leaves, params)

    def __getitem__(self, index: Any):
        indices = [i for i in (index if isinstance(index, tuple) else (index,)) if isinstance(i, Varying)]
        fn = lambda x, *_: np.ndarray.__getitem__(x, _plain_index(index))
        return apply("getitem", fn, [self, *indices], {"index": _plain_index(index)})

    def reshape(self, *shape: Any, **kwargs: Any):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return apply("reshape", lambda x: np.reshape(x, shape, **kwargs), [self], {"shape": tuple(shape)})

    def transpose(self, *axes: Any):
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        axes = tuple(axes) if axes else tuple(reversed(range(self.ndim)))
        return apply("transpose", lambda x: np.transpose(x, axes), [self], {"axes": axes})

    @property
    def T(self):
        return self.transpose()

    def astype(self, dtype: Any, *args: Any, **kwargs: Any):
        cast = (lambda x: hollow_empty(x.shape, dtype)) if is_abstract(self) else (lambda x: x.astype(dtype))
        return apply("astype", cast, [self], {"dtype": np.dtype(dtype).name})

    def view(self, *args: Any, **kwargs: Any):
        """numpy's `view`; an abstract value viewed as another dtype stays abstract (its buffer holds no values
        to reinterpret), as `dtype` shows it the logical dtype."""
        if is_abstract(self):
            args = tuple(_hollow_view(a) for a in args)
            kwargs = {k: _hollow_view(v) if k == "dtype" else v for k, v in kwargs.items()}
        return np.ndarray.view(self, *args, **kwargs)

    def ravel(self, *args: Any):
        return self.reshape(-1)

    flatten = ravel

    def compress(self, condition: Any, axis: Any = None, out: Any = None):
        return np.compress(condition, self, axis, out)

    def copy(self, order: str = "C"):
        return np.copy(self, order=order, subok=True)

    def sort(self, axis: int = -1, kind: Any = None, order: Any = None) -> None:
        self._became(np.sort(self, axis, kind, order))

    def partition(self, kth: Any, axis: int = -1, kind: str = "introselect", order: Any = None) -> None:
        self._became(np.partition(self, kth, axis, kind, order))

    def fill(self, value: Any) -> None:
        self._became(np.full_like(self, value))

    def _became(self, result: Varying) -> None:
        """This array changed in place into `result` (`sort`, `partition`, `fill`): its values and its record."""
        if not is_abstract(self):
            np.copyto(np.asarray(self), np.asarray(result))
        self.vma, self.variable, self.made = result.vma, result.variable, result.made

    def __repr__(self) -> str:
        text = _abstract_text(self) or repr(np.asarray(self))
        return f"{text}{{V:{','.join(sorted(self.vma))}}}" if self.vma else text

    def __str__(self) -> str:
        return _abstract_text(self) or str(np.asarray(self))

    # Python values read an array's values: an abstract one has none (it would give the empty tuple of its
    # field-less dtype, or fail in numpy's words)
    def __float__(self) -> float:
        return float(np.asarray(_valued(self, "float()")))

    def __int__(self) -> int:
        return int(np.asarray(_valued(self, "int()")))

    def __complex__(self) -> complex:
        return complex(np.asarray(_valued(self, "complex()")))

    def __index__(self) -> int:
        return np.asarray(_valued(self, "an index")).__index__()

    def __bool__(self) -> bool:
        return bool(np.asarray(_valued(self, "bool()")))

    def item(self, *args: Any) -> Any:
        return np.asarray(_valued(self, "item()")).item(*args)

    def tolist(self) -> Any:
        return np.asarray(_valued(self, "tolist()")).tolist()


def _routed(name: str) -> Callable:
    """The ndarray method `name` as the numpy function of the same name, which dispatches to `Varying`."""
    function = getattr(np, name)

    def method(self: Varying, *args: Any, **kwargs: Any) -> Any:
        return function(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"`np.{name}` of the array."
    return method


# ndarray methods numpy runs in C, past `__array_function__`: routed through their numpy functions, so that each
# is recorded in the program and an abstract value gets its result's shape and dtype, or a refusal by name,
# never an answer read from its stand-in's bytes (`sort`, `partition`, `fill`, `compress` and `copy` are above)
for _name in ("argmax", "argmin", "argsort", "argpartition", "choose", "conj", "conjugate", "diagonal", "dot",
              "nonzero", "repeat", "round", "searchsorted", "squeeze", "swapaxes", "take", "trace"):
    setattr(Varying, _name, _routed(_name))


def _hollow_view(dtype: Any) -> Any:
    """A `view` argument for an abstract value: a dtype as its hollow stand-in, an array type as it is."""
    if dtype is None or (isinstance(dtype, type) and issubclass(dtype, np.ndarray)):
        return dtype
    return hollow_dtype(dtype)


def _abstract_text(value: Varying) -> str:
    """How an abstract value prints (as `meshsim run` shows one); '' for a value with values."""
    return f"abstract {value.dtype}{list(value.shape)} (no values)" if is_abstract(value) else ""


def _valued(value: Varying, what: str) -> Varying:
    """`value`, which `what` reads the values of; an abstract one has none."""
    if is_abstract(value):
        raise AbstractValueError(f"{what} needs values; an abstract {value.dtype}{list(value.shape)} "
                                 f"has none: read values on real operands")
    return value


def vma_of(value: Any) -> frozenset:
    """The axes `value` may vary along (empty for anything that is not a `Varying`)."""
    return value.vma if isinstance(value, Varying) else frozenset()


def wrap(value: Any, vma: frozenset, op: str = "", params: dict | tuple | None = None, inputs: list | None = None,
         context: Any = None) -> Varying:
    """`value` as a `Varying` with `vma`, recorded as the output of `op` when `op` is given (in the program of
    `context`, by default the running device's)."""
    array = (value if type(value) is np.ndarray else np.asarray(value)).view(Varying)
    array.vma = vma if type(vma) is frozenset else frozenset(vma)
    if op:
        if context is None:
            context = current_or_none()
        if context is not None:
            items = params if type(params) is tuple else \
                tuple(sorted(params.items())) if isinstance(params, dict) else tuple(params or ())
            first = inputs[0] if inputs and len(inputs) == 1 else None  # a collective's one operand, mostly
            shape = array.shape
            if type(first) is Varying and first.variable is not None:
                var = first.variable
                refs = first.made  # the outputs of the equation that made the operand, when that is `var`'s
                if not refs or refs[0] is not var:
                    refs = (var,)
                if var.shape == shape:  # the operand's tuple: one object fewer that the record keeps
                    shape = var.shape
            else:
                refs = tuple([_ref(i) for i in inputs]) if inputs else ()
            array.made = made = context.program.record_one(op, items, refs, array.dtype, shape, array.vma)
            array.variable = made[0]
    return array


# The dtype JAX gives a weakly typed Python scalar in its default configuration (x64 off).
_WEAK_DTYPES = ((bool, np.bool_), (int, np.int32), (float, np.float32), (complex, np.complex64))


def as_array(value: Any) -> Any:
    """A program's value as an array: arrays unchanged; a Python scalar, a constant (as `axis_size` gives),
    as the 0-d array JAX's shard_map returns for it, of the weak type's default dtype (int -> int32).

    >>> as_array(4).dtype, as_array(np.arange(2)).tolist()
    (dtype('int32'), [0, 1])
    """
    for kind, dtype in _WEAK_DTYPES:
        if type(value) is kind:
            return np.asarray(value, dtype)
    return value


def promote(value: Any, vma: frozenset) -> Any:
    """`value` raised to vary along `vma` by a recorded `pvary` (no data moves); constants stay."""
    if not isinstance(value, Varying) or value.vma >= vma:
        return value
    extra = tuple(sorted(vma - value.vma))
    return wrap(np.asarray(value), value.vma | vma, "pvary", {"axes": extra}, [value])


def apply(op: str, fn: Callable, operands: list, params: dict) -> Any:
    """Run the local operation `fn` on `operands` and type and record its result(s)."""
    context = current_or_none()
    if context is None:
        plain = [np.asarray(x) if isinstance(x, Varying) else x for x in operands]
        return abstract_call(op, fn, plain) if any(is_abstract(x) for x in plain) else fn(*plain)
    vma = frozenset().union(*(vma_of(x) for x in operands))
    if context.check_vma:
        operands = [promote(x, vma) for x in operands]
    else:
        vma = frozenset()
    plain = [np.asarray(x) if isinstance(x, Varying) else x for x in operands]
    # abstract payloads: shapes and dtypes without values (`sim.memory.abstract_call`)
    result = abstract_call(op, fn, plain) if any(is_abstract(x) for x in plain) else fn(*plain)
    if isinstance(result, tuple) and all(isinstance(r, np.ndarray) for r in result):
        outs = [wrap(r, vma) for r in result]
        for out in outs:
            out.variable = context.program.new_var(out.dtype, out.shape, vma)
        context.program.record(op, params, [_ref(x) for x in operands], [o.variable for o in outs])
        return tuple(outs)
    if not isinstance(result, (np.ndarray, np.generic)):
        return result
    return wrap(result, vma, op, params, operands)


def _ref(value: Any) -> Var | Const:
    if isinstance(value, Varying):
        return value.variable if value.variable is not None else Const(np.asarray(value))
    return Const(value)  # Python scalars stay weakly typed, as numpy treats them


def _plain_index(index: Any) -> Any:
    if isinstance(index, tuple):
        return tuple(_plain_index(i) for i in index)
    return np.asarray(index) if isinstance(index, Varying) else index


def _is_array_tree(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_is_array_tree(v) for v in value)
    return isinstance(value, np.ndarray)


def _flatten(args: tuple) -> tuple[list, Callable[[list], tuple]]:
    """The array leaves of `args` (through lists and tuples) and a function putting new leaves back. (The
    walks are module functions: a nested function calling itself would hold itself in a cycle, left to the
    garbage collector every call.)"""
    leaves: list = []
    skeleton = _strip(args, leaves)
    return leaves, lambda plain: _fill(skeleton, plain)


def _strip(node: Any, leaves: list) -> Any:
    """`node` with each array leaf appended to `leaves` and replaced by its index there."""
    if isinstance(node, (list, tuple)) and _is_array_tree(node):
        return type(node)(_strip(n, leaves) for n in node)
    if isinstance(node, np.ndarray):
        leaves.append(node)
        return _Slot(len(leaves) - 1)
    return node


def _fill(node: Any, plain: list) -> Any:
    """`node` (a skeleton `_strip` made) with each leaf's index replaced by its new leaf in `plain`."""
    if isinstance(node, _Slot):
        return plain[node.index]
    if isinstance(node, (list, tuple)):
        return type(node)(_fill(n, plain) for n in node)
    return node


class _Slot:
    def __init__(self, index: int) -> None:
        self.index = index
