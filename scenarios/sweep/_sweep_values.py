"""The values of a sweep file that need more than a type check: sizes with units, and networks in the scenario
files' `[network]` vocabulary (checked here without a mesh; built for one by `build_network`)."""

from __future__ import annotations

from typing import Any

import sim
from scenarios._errors import Source
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
        if value >= 1 and value == int(value):
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
        extra = next((k for k in table if k not in ("preset", "shape")), None)
        if extra is not None:
            raise sim.InvalidArgumentError(f"{extra} cannot go with preset={table['preset']!r}: a preset fixes its "
                                           "topology, latency and bandwidth; only shape may be given")
        return
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
