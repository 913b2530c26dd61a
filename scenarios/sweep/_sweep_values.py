"""The values of a sweep file that need more than a type check: sizes with units, and networks in the scenario
files' `[network]` vocabulary (checked here without a mesh; built for one by `build_network`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import collectives
import sim
from scenarios import _fields as fields
from scenarios._errors import Source
from scenarios._fields import Where
from scenarios._load import _COMMON_KEYS, _NETWORK_KEYS, _NETWORK_RULES, _TOPOLOGY_KEYS, _build_network

NETWORK_RULE = (f"a network is a topology ({', '.join(sim.TOPOLOGIES)}), a preset ({', '.join(sim.PRESETS)}) or "
                "a [network] table as in scenario files, e.g. {topology = \"ring\", bandwidth_bytes_per_s = 1e9}")


def parse_size(value: Any) -> int:
    """A size in bytes: a positive integer (or integral float), or a string such as '64MiB', '1.5 KiB', '4096'.

    Raises:
        InvalidArgumentError: anything else (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB).
    """
    if isinstance(value, bool):
        raise sim.InvalidArgumentError(f"size={value!r} is not a size")
    if isinstance(value, (int, float)):
        if value >= 1 and math.isfinite(value) and value == int(value):
            return int(value)
        raise sim.InvalidArgumentError(f"size={value!r} is not a positive whole number of bytes")
    if isinstance(value, str):
        return sim.parse_bytes(value)
    raise sim.InvalidArgumentError(f"size={value!r} is not a size")


def check_network(value: Any) -> dict[str, Any]:
    """`value` (a topology name, a preset name or a `[network]` table) as a checked `[network]` table.

    Every rule that needs no mesh is checked: known keys, their types, a known topology or preset, keys that
    apply to the topology. Whether the network holds a given mesh is `build_network`'s to say.

    Raises:
        InvalidArgumentError: the first rule `value` breaks, with `key=value` and the rule.
    """
    if isinstance(value, str):
        if value in sim.TOPOLOGIES:
            return {"topology": value}
        if value in sim.PRESETS:
            return {"preset": value}
        raise sim.InvalidArgumentError(f"{value!r} is neither a topology nor a preset")
    if not isinstance(value, dict) or not value:
        raise sim.InvalidArgumentError("it is not a name or a table")
    for key, item in value.items():
        if key not in _NETWORK_KEYS:
            raise sim.InvalidArgumentError(f"unknown key {key!r}; allowed keys: {', '.join(_NETWORK_KEYS)}")
        if not _NETWORK_KEYS[key](item):
            raise sim.InvalidArgumentError(f"{key}={item!r} must be {_NETWORK_RULES[key]}")
    _check_names(value)
    return dict(value)


def _check_names(table: dict[str, Any]) -> None:
    """The preset or topology is known, and every other key goes with it."""
    if "preset" in table:
        if table["preset"] not in sim.PRESETS:
            raise sim.InvalidArgumentError(f"preset={table['preset']!r} is not a known preset; known presets: "
                                           f"{', '.join(sim.PRESETS)}")
        extra = next((k for k in table if k not in ("preset", "shape", "calibration")), None)
        if extra is not None:
            raise sim.InvalidArgumentError(f"{extra} cannot go with preset={table['preset']!r}: a preset fixes its "
                                           "topology, latency and bandwidth; only shape and calibration may be given")
        return
    if "calibration" in table:
        raise sim.InvalidArgumentError(f"calibration={table['calibration']!r} goes with a preset; a topology's "
                                       f"links are as given")
    topology = table.get("topology", "fully_connected")
    if topology not in sim.TOPOLOGIES:
        raise sim.InvalidArgumentError(f"topology={topology!r} must be one of {', '.join(sim.TOPOLOGIES)}")
    extra = next((k for k in table if k not in _COMMON_KEYS + _TOPOLOGY_KEYS[topology]), None)
    if extra is not None:
        raise sim.InvalidArgumentError(f"{extra} does not apply to topology={topology!r}")


def build_network(table: dict[str, Any], axes: tuple[int, ...]) -> sim.Network:
    """The `sim.Network` of a checked `[network]` table for a mesh of axis sizes `axes`, as a scenario file's
    `[network]` would give it (a torus's or preset's shape defaults to the mesh's).

    Raises:
        MeshError: the network cannot be built for these axes (the simulator's message).
    """
    return _build_network(Source("network", ""), table, axes)


def network_label(table: dict[str, Any]) -> str:
    """A short name: the preset or topology, then any other key as `key=value` ('ring wraparound=false')."""
    name = table.get("preset") or table.get("topology", "fully_connected")
    extras = [f"{key}={_compact(value)}" for key, value in sorted(table.items()) if key not in ("preset", "topology")]
    return " ".join([name, *extras])


def _compact(value: Any) -> str:
    """A TOML value written briefly: booleans lowercase, lists without spaces, floats in %g."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ",".join(_compact(v) for v in value) + "]"
    return str(value)


def _at_least(parse: Callable[..., Any], minimum: int) -> Callable[[Where, Any], Any]:
    """`parse` (optional) with a lower bound."""
    return lambda where, value: fields.optional(parse)(where, value, minimum)


# The columns of a sweep's results row (`scenarios.sweep._measure.COLUMNS`), each with its parser; a row of a
# rejected point has figures None and its message in `error`, any other row has every figure.
ROW_FIELDS: dict[str, Callable[[Where, Any], Any]] = {
    "key": fields.string, "collective": lambda where, value: fields.string(where, value, _swept()),
    "mesh": fields.string, "axis_name": fields.optional(fields.string), "devices": _at_least(fields.integer, 1),
    "network": fields.string, "algorithm": fields.string, "algorithm_run": fields.optional(fields.string),
    "dtype": fields.string, "seed": lambda where, value: fields.integer(where, value, 0),
    "size_bytes": lambda where, value: fields.integer(where, value, 1), "count": _at_least(fields.integer, 0),
    "time_s": _at_least(fields.number, 0), "algbw_GB_per_s": _at_least(fields.number, 0),
    "busbw_GB_per_s": _at_least(fields.number, 0), "messages": _at_least(fields.integer, 0),
    "between_devices": _at_least(fields.integer, 0), "bytes_sent": _at_least(fields.integer, 0),
    "wall_s": _at_least(fields.number, 0), "error": fields.optional(fields.string),
    "payload": lambda where, value: fields.optional(fields.string)(where, value, ("bytes", "abstract")),
}
_FIGURES = ("count", "time_s", "algbw_GB_per_s", "busbw_GB_per_s", "algorithm_run")


def check_row(where: Where, row: dict[str, Any]) -> dict[str, Any]:
    """A sweep's results row read back: every column of `ROW_FIELDS` by its parser (a missing one is None),
    and the figures present unless the row holds the simulator's error (the bandwidths also where the call
    took no simulated time: they are undefined there).

    Raises:
        ScenarioError: the first column that breaks its rule, as `column=value must be ...` at `where`.
    """
    checked = {key: parse(where.at(key), row.get(key)) if key != "error" or row.get(key) else None
               for key, parse in ROW_FIELDS.items()}
    if not checked["error"]:  # a call that took no time (one device: nothing crosses the network) has no bandwidth
        needed = _FIGURES if checked["time_s"] != 0 else tuple(k for k in _FIGURES if not k.endswith("_GB_per_s"))
        missing = next((key for key in needed if checked[key] is None), None)
        if missing is not None:
            raise where.error(f"{missing}=None must be given in a row without an error")
    return {**row, **checked}


def _swept() -> tuple[str, ...]:
    """The collectives a sweep times."""
    return tuple(name for name, definition in collectives.REGISTRY.items() if definition.sweep is not None)
