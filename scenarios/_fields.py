"""Every value read from a file, parsed by one function: its type, its range, and a message that states both.

Scenario files, sweep files, results files and campaign records hand each value to one of the parsers below
with a `Where`, the place it was read (file, line, table, key, index). A parser returns the value in the type
its caller needs or raises the `Where`'s error, which reads `path:line: [table] key=value must be RULE`:

    >>> where = InText("shape.toml", "inputs", "shape", "[inputs] ")
    >>> shape(where, [2, 3])
    (2, 3)
    >>> shape(where, [0, 2**62])
    Traceback (most recent call last):
    ...
    scenarios._errors.ScenarioError: shape.toml: [inputs] shape=[0, 4611686018427387904] must be a list of \
non-negative integers (at most 64 of them, the non-zero ones multiplying to at most 2**48), e.g. shape = [2, 3]

No parser evaluates text: a dtype is looked up by name among `DTYPE_NAMES`, never handed to numpy's parser.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

import layouts
from scenarios._errors import ScenarioError, Source

T = TypeVar("T")

MAX_RANK = 64  # numpy's most dimensions, and so a mesh's most axes
MAX_ELEMENTS = 1 << 48  # far beyond any memory: a shape whose non-zero sizes multiply past it is a typo
MAX_SHOWN = 60  # characters of a value echoed in a message
DTYPE_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
               "bfloat16", "float32", "float64", *(d.name for d in layouts.FLOAT8))  # float8: moved, not reduced
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,199}")


class Where(ABC):
    """Where a value was read, to build the error that points at it; `key` names the value in messages."""

    key: str

    @abstractmethod
    def error(self, message: str) -> ScenarioError:
        """A `ScenarioError` at the value's place, `message` after the place's label."""

    @abstractmethod
    def at(self, key: str) -> Where:
        """The same place's field `key`."""

    def refuse(self, value: Any, rule: str) -> ScenarioError:
        """The error for `value` breaking `rule`: `key=value must be rule`."""
        return self.error(f"{self.key}={shown(value)} must be {rule}")


@dataclass(frozen=True)
class InFile(Where):
    """A value of a TOML file (scenario or sweep): `key` of `table` (number `index` of an array of tables),
    the line found from the file's text; `label` goes before the message ('[inputs] ', '[[args]] number 0: ')."""

    source: Source
    table: str
    key: str
    label: str = ""
    index: int = 0

    def error(self, message: str) -> ScenarioError:
        return self.source.error(self.table, self.key, f"{self.label}{message}", self.index)

    def at(self, key: str) -> InFile:
        return InFile(self.source, self.table, key, self.label, self.index)


@dataclass(frozen=True)
class InText(Where):
    """A value at a known place of a file with no TOML source at hand: `path` and, when known, `line`."""

    path: str
    table: str
    key: str
    label: str = ""
    line: int | None = None

    def error(self, message: str) -> ScenarioError:
        place = self.path if self.line is None else f"{self.path}:{self.line}"
        return ScenarioError(f"{place}: {self.label}{message}")

    def at(self, key: str) -> InText:
        return InText(self.path, self.table, key, self.label, self.line)


def shown(value: Any) -> str:
    """`repr(value)`, cut to `MAX_SHOWN` characters (a deeply nested or huge value stays one short line)."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"<{type(value).__name__} nested too deeply>"
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


def integer(where: Where, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """`value`, an integer (not a bool) in [minimum, maximum] (either end open when None)."""
    if type(value) is not int or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise where.refuse(value, _range("an integer", minimum, maximum))
    return value


def number(where: Where, value: Any, minimum: float | None = None, maximum: float | None = None) -> float:
    """`value`, a finite int or float (not a bool) in [minimum, maximum], as a float."""
    ok = type(value) in (int, float) and math.isfinite(value)
    if not ok or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise where.refuse(value, _range("a finite number", minimum, maximum))
    return float(value)


def string(where: Where, value: Any, choices: tuple[str, ...] | None = None) -> str:
    """`value`, a string (one of `choices` when given)."""
    if not isinstance(value, str) or (choices is not None and value not in choices):
        raise where.refuse(value, "a string" if choices is None else f"one of {', '.join(map(repr, choices))}")
    return value


def boolean(where: Where, value: Any) -> bool:
    """`value`, true or false."""
    if not isinstance(value, bool):
        raise where.refuse(value, "true or false")
    return value


def optional(parse: Callable[..., T]) -> Callable[..., T | None]:
    """`parse`, letting None (JSON's null) through."""
    def parse_or_none(where: Where, value: Any, *args: Any) -> T | None:
        return None if value is None else parse(where, value, *args)
    return parse_or_none


def shape(where: Where, value: Any, example: str = "[2, 3]") -> tuple[int, ...]:
    """`value`, a list of at most `MAX_RANK` non-negative integers whose non-zero sizes multiply to at most
    `MAX_ELEMENTS` (numpy refuses a larger product even when another size is 0)."""
    if not is_shape(value):
        raise where.refuse(value, f"a list of non-negative integers (at most {MAX_RANK} of them, the non-zero ones "
                                  f"multiplying to at most 2**48), e.g. {where.key} = {example}")
    return tuple(value)


def is_shape(value: Any) -> bool:
    """Whether `shape` takes `value`."""
    ok = isinstance(value, list) and len(value) <= MAX_RANK and all(type(n) is int and n >= 0 for n in value)
    return ok and math.prod(n for n in value if n) <= MAX_ELEMENTS


def mesh_axes(where: Where, value: Any, example: str = "{x = 2, y = 2}") -> dict[str, int]:
    """`value`, a non-empty table of at most `MAX_RANK` axes, each name = a positive integer size."""
    ok = isinstance(value, dict) and 0 < len(value) <= MAX_RANK
    if not ok or not all(type(size) is int and size >= 1 for size in value.values()):
        raise where.refuse(value, f"a table of axis name = positive size (1 to {MAX_RANK} axes), "
                                  f"e.g. {where.key} = {example}")
    return dict(value)


def dtype(where: Where, value: Any, names: tuple[str, ...] = DTYPE_NAMES, example: str = "'float32' or 'int32'",
          ) -> np.dtype:
    """`value`, one of `names` (numpy's and ml_dtypes' names of numeric dtypes), as a numpy dtype.

    The name is looked up, never parsed: numpy's own parser of dtype strings reads field lists and
    comma-separated formats, and raises for text it cannot read.
    """
    if not isinstance(value, str) or value not in names:
        listed = [name for name in names if not name.startswith("float8_")]
        float8 = len(names) - len(listed)
        also = f", or one of the {float8} float8 types (float8_e4m3fn, float8_e5m2, ...)" if float8 else ""
        raise where.error(f"{where.key}={shown(value)} must name a numeric numpy dtype, e.g. {example}; one of: "
                          f"{', '.join(listed)}{also}")
    return layouts.BFLOAT16 if value == "bfloat16" else np.dtype(value)


def file_name(where: Where, value: Any) -> str:
    """`value`, a plain file name: letters, digits and `_.+-`, not starting with a dot or dash, no separator."""
    if not isinstance(value, str) or not _FILE_NAME.fullmatch(value):
        raise where.refuse(value, "a plain file name (letters, digits and _.+-, no directory, at most 200 "
                                  "characters)")
    return value


def table(where: Where, value: Any) -> dict[str, Any]:
    """`value`, a table (a TOML table or a JSON object) with string keys."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise where.refuse(value, "a table")
    return value


def list_of(where: Where, value: Any, item: Callable[[Where, Any], T], what: str) -> list[T]:
    """`value`, a list, each element parsed by `item` (its errors name the element `key[i]`); `what` says what
    the list holds in the message for a value that is not a list."""
    if not isinstance(value, list):
        raise where.refuse(value, f"a list of {what}")
    return [item(_indexed(where, i), element) for i, element in enumerate(value)]


def cast_exactly(values: np.ndarray, dtype: np.dtype, written: Any) -> tuple[np.ndarray, str | None]:
    """A literal array cast to `dtype`, and what the cast broke: None, or the first element it changed
    beyond rounding, e.g. `[1] holds 4.5, which int32 cannot represent exactly`.

    `values` is the array as read (int64 for integers, float64 when some literal is a float) and `written`
    what it was read from (the nested lists, a scalar, or a `{fill, shape}` table), which tells integer
    literals from float ones. The rules:

    - an integer or bool dtype holds every value exactly (4.5 or 300 as int8 is refused);
    - a float dtype keeps every finite value finite (1e40 as float32, 70000.0 as float16 would be inf) and
      holds every integer literal exactly (16777217 as float32 would be 16777216); a literal with a fraction
      or an exponent (0.1, 1e-3, 16777217.0) becomes the dtype's nearest value, as numpy and JAX read it;
      inf and nan stay what they are.
    """
    with np.errstate(all="ignore"):  # what the cast breaks is found below
        cast = values.astype(dtype)
    if values.dtype == dtype or values.dtype.kind == "b" or not values.size:
        return cast, None
    if not layouts.is_any_float(dtype):
        wrong = np.flatnonzero(cast != values)
        if not len(wrong):
            return cast, None
        k = int(wrong[0])
        return cast, f"{_at(values.shape, k)} holds {values.flat[k].item()!r}, which {dtype} cannot represent exactly"
    with np.errstate(all="ignore"):
        wide = cast.astype(np.float64)
    lost = np.flatnonzero(np.isfinite(values) & ~np.isfinite(wide))
    first = int(lost[0]) if len(lost) else values.size
    for k in np.flatnonzero(_maybe_changed_integers(values, wide)).tolist():
        if k >= first:
            break
        literal = values.flat[k].item() if values.dtype.kind in "iu" else _written_at(written, values.shape, k)
        if type(literal) is int and int(wide.flat[k]) != literal:
            return cast, (f"{_at(values.shape, k)} holds the integer {literal}, which {dtype} cannot represent "
                          f"exactly: it would become {wide.flat[k].item()!r}; an integer literal must be held "
                          f"exactly (a literal with a fraction or an exponent rounds to the nearest {dtype})")
    if first == values.size:
        return cast, None
    return cast, (f"{_at(values.shape, first)} holds {values.flat[first].item()!r}, which {dtype} cannot hold: "
                  f"it would become {wide.flat[first].item()!r}; a finite value must stay finite")


_FLOAT64_INTEGERS = 2**53  # every integer of at most this magnitude is a float64


def _maybe_changed_integers(values: np.ndarray, wide: np.ndarray) -> np.ndarray:
    """Where `values` holds a whole number that the cast (`wide`, as float64) may have changed: it differs,
    or it is too large for float64 to tell (the exact comparison is then made on Python ints)."""
    if values.dtype.kind in "iu":
        large = (values > _FLOAT64_INTEGERS) | (values < -_FLOAT64_INTEGERS)
        return np.isfinite(wide) & (large | (wide != values.astype(np.float64)))
    with np.errstate(all="ignore"):
        whole = np.isfinite(values) & (np.floor(values) == values)
        return whole & np.isfinite(wide) & ((wide != values) | (np.abs(values) > _FLOAT64_INTEGERS))


def _written_at(written: Any, shape: tuple[int, ...], flat: int) -> Any:
    """The literal of element `flat` (row-major) as the file wrote it."""
    if isinstance(written, dict):  # {fill = v, shape = [...]}
        return written.get("fill")
    for i in np.unravel_index(flat, shape):
        written = written[int(i)]
    return written


def _at(shape: tuple[int, ...], flat: int) -> str:
    """Element `flat` (row-major) of an array of `shape` as an index: '[4]', '[1, 2]', '' for a scalar."""
    return f"[{', '.join(str(int(i)) for i in np.unravel_index(flat, shape))}]" if shape else ""


def _indexed(where: Where, index: int) -> Where:
    """`where`, its key followed by `[index]`."""
    return where.at(f"{where.key}[{index}]")


def _range(kind: str, minimum: float | None, maximum: float | None) -> str:
    """The rule of a number: 'a non-negative integer', 'a finite number from 1 to 8', 'an integer <= 9'."""
    if minimum is not None and maximum is not None:
        return f"{kind} from {_figure(minimum)} to {_figure(maximum)}"
    if kind == "an integer" and minimum in (0, 1):
        return "a non-negative integer" if minimum == 0 else "a positive integer"
    if minimum is not None:
        return f"{kind} >= {_figure(minimum)}"
    return kind if maximum is None else f"{kind} <= {_figure(maximum)}"


def _figure(value: float) -> str:
    """An integer in full, a float in %g."""
    return str(value) if isinstance(value, int) else f"{value:g}"
