"""What a scenario may call: each collective's array arguments and keyword parameters, with their rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class OpSpec:
    """One collective as a scenario sees it.

    `arrays` are the positional array arguments in call order (one per `[[device]]` key); `index_arrays`
    are those holding offsets or sizes, always int32 as in JAX; `required` and `optional` are the keyword
    parameters of the `[collective]` table. Omitted optional parameters take the collective's defaults.
    """

    name: str
    arrays: tuple[str, ...]
    index_arrays: tuple[str, ...]
    required: tuple[str, ...]
    optional: tuple[str, ...]

    @property
    def data_arrays(self) -> tuple[str, ...]:
        """The array arguments that hold data (and share the scenario's `dtype`)."""
        return tuple(name for name in self.arrays if name not in self.index_arrays)


_RAGGED_INDEX = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")

OPS: dict[str, OpSpec] = {
    spec.name: spec for spec in (
        OpSpec("all_gather", ("x",), (), ("axis_name",), ("axis_index_groups", "axis", "tiled")),
        OpSpec("all_to_all", ("x",), (), ("axis_name", "split_axis", "concat_axis"), ("axis_index_groups", "tiled")),
        OpSpec("ragged_all_to_all", ("operand", "output") + _RAGGED_INDEX, _RAGGED_INDEX, ("axis_name",),
               ("axis_index_groups",)),
    )
}


def _is_int(value: Any) -> bool:
    """An int that is not a bool (TOML's true is not an axis)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_axis_name(value: Any) -> bool:
    """A name or a non-empty list of names."""
    names = value if isinstance(value, list) else [value]
    return bool(names) and all(isinstance(name, str) for name in names)


def _is_groups(value: Any) -> bool:
    """A list of lists of ints."""
    return isinstance(value, list) and all(isinstance(g, list) and all(_is_int(i) for i in g) for g in value)


# Each keyword parameter: (accepts the TOML value?, the rule as an error states it).
PARAMS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "axis_name": (_is_axis_name, "a mesh axis name or a list of names"),
    "axis_index_groups": (_is_groups, "a list of lists of axis indices"),
    "axis": (_is_int, "an integer"),
    "split_axis": (_is_int, "an integer"),
    "concat_axis": (_is_int, "an integer"),
    "tiled": (lambda value: isinstance(value, bool), "true or false"),
}
