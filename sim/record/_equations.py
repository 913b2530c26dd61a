"""`Program`: what one device executed inside `shard_map`, as typed equations (a jaxpr-like record).

Every value is a `Var` with dtype, shape and its device-variance set (`vma`): the mesh axes along which it
may differ between devices. `str(program)` prints it like a jaxpr, e.g. `b:f32[2]{V:x} = mul a 2.0`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import layouts
from sim._frozen import quick_init


@quick_init
@dataclass(frozen=True, eq=False, slots=True)
class Var:
    """A value a program computed: a name, its dtype and shape, and the axes it may vary along."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    vma: frozenset

    def type_str(self) -> str:
        return f"{self.name}:{_dtype_str(self.dtype)}{list(self.shape)}{vma_str(self.vma)}".replace(" ", "")


@dataclass(frozen=True, eq=False)
class Const:
    """A value that entered the program from outside its inputs (a literal, a local numpy array)."""

    value: Any

    def __str__(self) -> str:
        if isinstance(self.value, (bool, int, float, complex)):
            return repr(self.value)
        array = np.asarray(self.value)
        if array.size <= 4:
            return f"{array.tolist()}:{_dtype_str(array.dtype)}"
        return f"const:{_dtype_str(array.dtype)}{list(array.shape)}".replace(" ", "")


@quick_init
@dataclass(frozen=True, eq=False, slots=True)
class Equation:
    """`outputs = op[params](*inputs)`; inputs are `Var` or `Const` objects."""

    op: str
    params: tuple
    inputs: tuple
    outputs: tuple

    def __str__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.params)
        head = " ".join(o.type_str() for o in self.outputs)
        args = " ".join(i.name if isinstance(i, Var) else str(i) for i in self.inputs)
        return f"{head} = {self.op}{'[' + params + ']' if params else ''} {args}".rstrip()


@dataclass(eq=False)
class Program:
    """One device's recorded program: inputs, equations in execution order, outputs.

    `label` names the source of what the device runs now (a source line, a name stack: see
    `sim.labelled`); each collective call the device enters is recorded with it (`CallRecord.label`).
    A run of equations may be recorded late (`defer`): its variables' numbers are taken when it runs, its
    equations made the first time `equations` is read, so the program reads as if they had been recorded then.
    """

    inputs: list = field(default_factory=list)
    recorded: list = field(default_factory=list, repr=False)  # equations, and `Deferred` runs not yet made
    outputs: list = field(default_factory=list)
    _count: int = 0
    label: str | None = None
    _deferred: int = 0

    @property
    def equations(self) -> list:
        """The equations in execution order (deferred runs made now, in their places)."""
        if self._deferred:
            made: list = []
            for entry in self.recorded:
                if entry.__class__ is Deferred:
                    made += entry.make(entry.first)
                else:
                    made.append(entry)
            self.recorded[:] = made
            self._deferred = 0
        return self.recorded

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Program):
            return NotImplemented
        return (self.inputs, self.equations, self.outputs, self._count, self.label) == \
            (other.inputs, other.equations, other.outputs, other._count, other.label)

    __hash__ = None  # type: ignore[assignment]

    def new_var(self, dtype, shape: tuple[int, ...], vma: frozenset) -> Var:
        """A fresh variable named a, b, ..., z, ba, bb, ... in creation order."""
        n = self._count
        self._count = n + 1
        return self.numbered(n, dtype, shape, vma)

    def record(self, op: str, params: dict | tuple, inputs: list, outputs: list) -> None:
        items = tuple(sorted(params.items())) if isinstance(params, dict) else tuple(params)
        self.recorded.append(Equation(op, items, tuple(inputs), tuple(outputs)))

    def record_one(self, op: str, params: tuple, inputs: tuple, dtype: np.dtype, shape: tuple[int, ...],
                   vma: frozenset) -> tuple[Var]:
        """`record` of an equation with one output, a fresh variable of an array's `dtype` and `shape` and of
        the frozenset `vma` (as `new_var` makes it), given `params` and `inputs` as tuples; the equation's
        `outputs`, `(variable,)`, which a next equation reading only that variable may take as its `inputs`
        (one tuple the program keeps, not two)."""
        n = self._count
        self._count = n + 1
        outputs = (Var(_NAMES[n] if n < len(_NAMES) else _name(n), dtype, shape, vma),)
        self.recorded.append(Equation(op, params, inputs, outputs))
        return outputs

    def take(self, count: int) -> int:
        """Take the next `count` variable numbers (for variables made with `numbered`): the first of them."""
        first = self._count
        self._count = first + count
        return first

    def defer(self, make: Callable[[int], list], count: int) -> int:
        """Take the next `count` variable numbers for a run of equations `make(first)` returns when the program
        is read (its variables numbered from `first` on, made with `numbered`); `first`."""
        first = self.take(count)
        self.recorded.append(Deferred(make, first))
        self._deferred += 1
        return first

    @staticmethod
    def numbered(n: int, dtype, shape: tuple[int, ...], vma: frozenset) -> Var:
        """Variable number `n` of a program, named as `new_var` names it, of this type."""
        name = _NAMES[n] if n < len(_NAMES) else _name(n)
        # a dtype, a tuple and a frozenset (what an array and a typing rule give) are taken as they are
        return Var(name, dtype if isinstance(dtype, np.dtype) else np.dtype(dtype),
                   shape if type(shape) is tuple else tuple(shape), vma if type(vma) is frozenset else frozenset(vma))

    def __getstate__(self) -> dict:
        made = self.equations  # deferred runs are made before the program is copied or pickled
        return dict(self.__dict__, recorded=made)

    def ops(self) -> list[str]:
        """The equations' op names, in order (handy to compare program shapes)."""
        return [e.op for e in self.equations]

    def __str__(self) -> str:
        ins = " ".join(v.type_str() for v in self.inputs)
        body = "".join(f"\n    {e}" for e in self.equations)
        outs = ", ".join(o.name if isinstance(o, Var) else str(o) for o in self.outputs)
        return f"{{ lambda ; {ins}. let{body}\n  in ({outs},) }}"


@dataclass(frozen=True, eq=False)
class Deferred:
    """A run of equations recorded late (`Program.defer`): `make(first)` gives them, their variables numbered
    from `first` on."""

    make: Callable[[int], list]
    first: int


_NAMES: list[str] = []  # the names of the first variables, spelled once for every program


def _name(n: int) -> str:
    """Variable number n's name (`Program.new_var`), the names up to it kept for later programs."""
    while len(_NAMES) <= n:
        k, name = len(_NAMES), ""
        while True:
            name = "abcdefghijklmnopqrstuvwxyz"[k % 26] + name
            k //= 26
            if not k:
                break
        _NAMES.append(name)
    return _NAMES[n]


def vma_str(vma: frozenset) -> str:
    """`{V:x}`, `{V:x,y}` or '' for an invariant value, as JAX prints types."""
    return "{V:" + ",".join(sorted(vma)) + "}" if vma else ""


def _dtype_str(dtype: np.dtype) -> str:
    return layouts.short_name(dtype)
