"""`quick_init`: frozen dataclasses that a run makes once per device and call, built at the speed of a tuple.

A frozen dataclass's generated `__init__` sets each field by a call of `object.__setattr__`; for the records a
run makes by the hundred thousand (a collective call per device, its call record, a buffer, a program's
variable and equation) that is a large part of a call's cost. `quick_init` gives such a class an `__init__`
with the same signature and defaults that writes the fields into the instance's `__dict__` at once, or, for a
class with slots (`dataclass(slots=True)`: one object per instance, no `__dict__`, so fewer for the cyclic
garbage collector to scan after a run), through each slot's own descriptor. The instances are the same:
frozen (assigning a field still raises), equal, hashed and printed as before.

>>> from dataclasses import FrozenInstanceError, dataclass
>>> @quick_init
... @dataclass(frozen=True)
... class Point:
...     x: int
...     y: int = 0
>>> p = Point(1)
>>> p, p == Point(1, 0)
(Point(x=1, y=0), True)
>>> try:
...     p.x = 2
... except FrozenInstanceError:
...     print("frozen")
frozen
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

__all__ = ["quick_init"]

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """`cls` (a frozen dataclass without `__post_init__`, default factories or init-only fields) with an
    `__init__` that sets its fields at once (see the module's docstring)."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    slotted = "__slots__" in cls.__dict__
    if (not params.frozen or (hasattr(cls, "__slots__") and not slotted) or hasattr(cls, "__post_init__")
            or any(f.default_factory is not dataclasses.MISSING or not f.init for f in fields)):
        raise TypeError(f"quick_init: {cls.__name__} must be a frozen dataclass without inherited slots, "
                        "__post_init__, default factories or fields left out of __init__")
    defaults = {f"_default_{f.name}": f.default for f in fields if f.default is not dataclasses.MISSING}
    signature = ", ".join(f.name if f.default is dataclasses.MISSING else f"{f.name}=_default_{f.name}"
                          for f in fields)
    if slotted:  # a slot's descriptor sets it as fast as a dict store, where `object.__setattr__` is slower
        defaults.update({f"_set_{f.name}": cls.__dict__[f.name].__set__ for f in fields})
        body = "".join(f"\n    _set_{f.name}(self, {f.name})" for f in fields)
        source = f"def __init__(self, {signature}):{body or chr(10) + '    pass'}"
    else:
        body = "".join(f"\n    fields[{f.name!r}] = {f.name}" for f in fields)
        source = f"def __init__(self, {signature}):\n    fields = self.__dict__{body}"
    namespace: dict = {}
    exec(source, defaults, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init  # type: ignore[misc]
    return cls
