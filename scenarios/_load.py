"""`load`: a scenario file (TOML) read and validated into a `Scenario`."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import collectives
import sim
from collectives import Definition
from scenarios import _fields as fields
from scenarios._args import check_args
from scenarios._budget import Budget
from scenarios._errors import Source, parse_toml
from scenarios._fields import InFile
from scenarios._inputs import device_inputs
from scenarios._program import ProgramScenario, load_program

_TOP_KEYS = ("title", "description", "mesh", "network", "collective", "inputs", "device", "program", "args",
             "payload")
PAYLOADS = ("bytes", "abstract")  # `payload`: real arrays, or shapes and dtypes alone (`sim.ShapeDtypeStruct`)


@dataclass(frozen=True, eq=False)
class Scenario:
    """A validated scenario: a mesh with its network, one collective call, and every device's inputs.

    `op` is any registered collective (`collectives.REGISTRY`); `inputs[d]` maps each array argument of
    `op`, in call order, to device d's (read-only) array; `params` holds the parameters the file gives
    (omitted ones take the collective's defaults).
    """

    path: str
    title: str
    description: str
    mesh: sim.Mesh
    op: str
    params: dict[str, Any]
    inputs: tuple[dict[str, np.ndarray], ...]
    payload: str = "bytes"

    @property
    def definition(self) -> Definition:
        """The definition of the scenario's collective."""
        return collectives.definition(self.op)


def load(path: str | os.PathLike, *, allow_code: bool = True, max_memory_bytes: int | None = None,
         max_messages: int | None = None) -> Scenario | ProgramScenario:
    """Read and validate the scenario file at `path`, refusing it before allocating when it needs too much memory.

    Args:
        path: a TOML file with `[mesh]`, optional `[network]`, `[collective]`, and `[[device]]` tables
            or `[inputs] seed`/`shape` (see docs/reference/scenario-files.md).
        allow_code: whether a `[program]`'s source may run. Calling `load` from Python is consent; the
            command line passes False unless given `--allow-code`.
        max_memory_bytes: the most memory the scenario's estimate may reach (see `scenarios._budget`);
            None for the default, half the machine's memory (`sim.default_max_memory_bytes()`). The mesh
            carries it, so every run of the scenario holds its device memories to it, and a program's code
            runs under an address-space limit of that size (`scenarios._address_space`).
        max_messages: the most messages a `[collective]` run may be estimated to send (its work); None for
            `sim.DEFAULT_MAX_MESSAGES`.

    Returns:
        The scenario, ready for `run`.

    Raises:
        CodeNotAllowedError: the file is a valid `[program]` scenario and `allow_code` is False (nothing ran;
            the message shows the source).
        ScenarioError: the file is unreadable, is not TOML, or breaks a rule of the format. The message
            reads `path:line: [table] field=value must ...` (the line when it can be found). A file
            whose estimate exceeds `max_memory_bytes` or `max_messages` gets the estimate and how to raise
            the limit.
        InvalidArgumentError: `max_memory_bytes` or `max_messages` is not a positive int or None.
    """
    source, data = _parse(str(path))
    budget = Budget(source, max_memory_bytes, max_messages)
    source.check_keys("", data, (), _TOP_KEYS)
    for key in ("title", "description"):
        fields.string(InFile(source, "", key), data.get(key, ""))
    mesh = _mesh(source, data, budget)
    payload = _payload(source, data)
    if "program" in data:
        check_args(source, data, mesh, budget, payload == "abstract")
        return load_program(source, data, mesh, data.get("title", Path(path).stem), data.get("description", ""),
                            allow_code, payload)
    definition, params = _collective(source, source.table(data, "collective"), mesh)
    budget.check_collective(data, mesh, definition, params)
    inputs = device_inputs(source, data, mesh, definition, params, payload == "abstract")
    return Scenario(str(path), data.get("title", Path(path).stem), data.get("description", ""), mesh,
                    definition.name, params, inputs, payload)


def _payload(source: Source, data: dict) -> str:
    """The top-level `payload`: "bytes" (the default) or "abstract"."""
    payload = data.get("payload", "bytes")
    if payload not in PAYLOADS:
        raise source.error("", "payload", f"payload={payload!r} must be one of {', '.join(map(repr, PAYLOADS))}: "
                                          f"\"abstract\" runs shapes and dtypes without the bytes")
    return payload


def _parse(path: str) -> tuple[Source, dict]:
    """The file's text and its TOML tables; unreadable files and syntax errors become ScenarioError."""
    return parse_toml(path, "scenario", deep=" (more than a few hundred levels); a scenario's arrays have at "
                                              "most 64 dimensions")


def _mesh(source: Source, data: dict, budget: Budget) -> sim.Mesh:
    """The `[mesh]` axes with the `[network]`, as a `sim.Mesh`, refused when its devices alone are too many."""
    table = source.table(data, "mesh")
    source.check_keys("mesh", table, ("axes",), ())
    axes = fields.mesh_axes(InFile(source, "mesh", "axes", "[mesh] "), table["axes"])
    budget.check_mesh(axes)
    network, key = _network(source, data, tuple(axes.values()))
    try:
        return sim.Mesh(dict(axes), network=network, max_memory_bytes=budget.max_memory_bytes)
    except sim.InvalidArgumentError as error:
        if key is None or "does not fit" not in str(error):
            raise
        raise source.error("network", key, f"[network] {error}") from None


def _network(source: Source, data: dict, axes: tuple[int, ...]) -> tuple[sim.Network, str | None]:
    """The `[network]` table as a `sim.Network` (the defaults when it is absent), and the key that fixed its
    size (for errors about a mesh it cannot hold)."""
    table = source.table(data, "network", required=False) or {}
    source.check_keys("network", table, (), tuple(_NETWORK_KEYS))
    for key, value in table.items():
        if not _NETWORK_KEYS[key](value):
            raise source.error("network", key, f"[network] {key}={value!r} must be {_NETWORK_RULES[key]}")
    try:
        network = _build_network(source, table, axes)
    except sim.MeshError as error:
        # The network states the broken rule as `name=value ...`; point at that field's line.
        key = next((k for k in table if str(error).startswith(k)), None)
        key = key or next((k for k in ("shape", "preset", "topology") if k in table), None)
        raise source.error("network", key, f"[network] {error}") from None
    return network, next((k for k in ("shape", "preset", "topology") if k in table), None)


def _build_network(source: Source, table: dict, axes: tuple[int, ...]) -> sim.Network:
    """A `sim.Network` from a checked `[network]` table; `shape` defaults to the mesh's axis sizes."""
    store_and_forward = table.get("store_and_forward", False)
    if "preset" in table:
        extra = next((k for k in table if k not in ("preset", "shape", "calibration")), None)
        if extra is not None:
            raise source.error("network", extra, f"[network] {extra} cannot go with preset={table['preset']!r}: a "
                                                 f"preset fixes its topology, latency and bandwidth; only shape and "
                                                 f"calibration may be given")
        name = table["preset"]
        rank = sim.PRESETS[name][2] if name in sim.PRESETS else 0
        shape = table.get("shape") or (axes if len(axes) == rank else None)
        return sim.Network.preset(name, None if shape is None else tuple(shape), table.get("calibration", "measured"))
    if "calibration" in table:
        raise source.error("network", "calibration", f"[network] calibration={table['calibration']!r} goes with a "
                                                     f"preset (preset = \"tpu-v5e\"); a topology's links are as given")
    topology = table.get("topology", "fully_connected")
    if topology not in sim.TOPOLOGIES:
        raise source.error("network", "topology", f"[network] topology={topology!r} must be one of "
                                                  f"{', '.join(sim.TOPOLOGIES)}")
    allowed = _TOPOLOGY_KEYS.get(topology, ())
    extra = next((k for k in table if k not in _COMMON_KEYS + allowed), None)
    if extra is not None:
        raise source.error("network", extra, f"[network] {extra} does not apply to topology={topology!r}; it "
                                             f"applies to: " + ", ".join(t for t, keys in _TOPOLOGY_KEYS.items()
                                                                         if extra in keys))
    link = {k: table[k] for k in ("latency_s", "bandwidth_bytes_per_s") if k in table}
    if topology == "torus":
        wraparound = table.get("wraparound", True)
        network = sim.Network.torus(tuple(table.get("shape", axes)),
                                    tuple(wraparound) if isinstance(wraparound, list) else wraparound, **link)
    elif topology == "ring":
        network = sim.Network.ring(**link, wraparound=table.get("wraparound", True))
    elif topology == "hierarchical":
        inter = {k: table[k] for k in ("inter_latency_s", "inter_bandwidth_bytes_per_s") if k in table}
        network = sim.Network.hierarchical(table.get("node_size", 0), **link, **inter)
    else:
        network = sim.Network(**link, topology=topology)
    fields = {k: table[k] for k in _FIELD_KEYS if k in table}
    rates = {k: table[k] for k in _ROOFLINE_KEYS if k in table}
    if rates:  # a device's peak rates, for the work a program charges (`sim.compute`)
        if not {"peak_flops_per_s", "memory_bytes_per_s"} <= set(rates):
            key = next(iter(rates))
            raise source.error("network", key, f"[network] {key} needs both peak_flops_per_s and memory_bytes_per_s "
                                               f"(a device's roofline); transcendentals_per_s is optional")
        fields["roofline"] = sim.Roofline(**rates)
    if fields:
        network = replace(network, **fields)
    return replace(network, store_and_forward=store_and_forward) if store_and_forward else network


def _number(value: Any) -> bool:
    return type(value) in (int, float)


_NETWORK_KEYS: dict[str, Callable[[Any], bool]] = {
    "topology": lambda v: isinstance(v, str), "preset": lambda v: isinstance(v, str),
    "calibration": lambda v: v in sim.CALIBRATIONS,
    "shape": lambda v: isinstance(v, list) and bool(v) and all(type(s) is int for s in v),
    "wraparound": lambda v: isinstance(v, bool) or (isinstance(v, list) and all(isinstance(w, bool) for w in v)),
    "latency_s": _number, "bandwidth_bytes_per_s": _number, "node_size": lambda v: type(v) is int,
    "inter_latency_s": _number, "inter_bandwidth_bytes_per_s": _number,
    "store_and_forward": lambda v: isinstance(v, bool), "switch_reduces": lambda v: isinstance(v, bool),
    "switch_reduction_bytes_per_s": _number, "multipath": lambda v: isinstance(v, bool),
    "leaf_size": lambda v: type(v) is int, "rails": lambda v: isinstance(v, bool), "oversubscription": _number,
    "spine_latency_s": _number, "peak_flops_per_s": _number, "memory_bytes_per_s": _number,
    "transcendentals_per_s": _number,
}
_ROOFLINE_KEYS = ("peak_flops_per_s", "memory_bytes_per_s", "transcendentals_per_s")
# `Network` fields a table may set beside its topology's own arguments (each checked by `Network` itself)
_FIELD_KEYS = ("switch_reduces", "switch_reduction_bytes_per_s", "multipath", "leaf_size", "rails",
               "oversubscription", "spine_latency_s")
_NETWORK_RULES = {
    "topology": f"a string, one of {', '.join(sim.TOPOLOGIES)}", "preset": "a string naming a preset",
    "calibration": "'measured' (fitted to published measurements) or 'ideal' (the links alone)",
    "shape": "a list of integers, e.g. shape = [4, 4]", "wraparound": "true, false or a list of them, one per "
    "dimension", "node_size": "an integer", "store_and_forward": "true or false", "switch_reduces": "true or false",
    "multipath": "true or false", "leaf_size": "an integer", "rails": "true or false",
}
_NETWORK_RULES.update({k: "a number" for k in _NETWORK_KEYS if k not in _NETWORK_RULES})
_COMMON_KEYS = ("topology", "latency_s", "bandwidth_bytes_per_s", "store_and_forward", *_ROOFLINE_KEYS)
_TOPOLOGY_KEYS: dict[str, tuple[str, ...]] = {
    "fully_connected": (), "switch": ("switch_reduces", "switch_reduction_bytes_per_s"),
    "ring": ("wraparound", "multipath"), "torus": ("shape", "wraparound", "multipath"),
    "hierarchical": ("node_size", "inter_latency_s", "inter_bandwidth_bytes_per_s", "switch_reduces",
                     "switch_reduction_bytes_per_s", "leaf_size", "rails", "oversubscription", "spine_latency_s"),
}


def _collective(source: Source, table: dict, mesh: sim.Mesh) -> tuple[Definition, dict[str, Any]]:
    """The op's definition and its parameters, each checked by the definition's rule and converted from
    TOML (`axis_name` lists become tuples)."""
    if "op" not in table:
        raise source.error("collective", None, f"[collective] op is missing; it must be one of {_names()}")
    op = table["op"]
    definition = collectives.REGISTRY.get(op) if isinstance(op, str) else None
    if definition is None:
        raise source.error("collective", "op", f"[collective] op={op!r} must be one of {_names()}")
    source.check_keys("collective", table, ("op",) + definition.required + _missing(source, table, definition),
                      definition.optional)
    params = {}
    for key, value in table.items():
        if key == "op":
            continue
        param = definition.param(key)
        if not param.accepts(value):
            raise source.error("collective", key, f"[collective] {key}={value!r} must be {param.rule}")
        params[key] = param.from_toml(value)
    _check_axes(source, params, mesh)
    return definition, params


def _missing(source: Source, table: dict, definition: Definition) -> tuple[str, ...]:
    """Raise for the first required key `table` lacks, with the key's rule (which may say what the file more
    likely meant), once every key it has is known; () otherwise."""
    known = ("op",) + definition.required + definition.optional
    for param in definition.params:
        if param.required and param.name not in table and all(key in known for key in table):
            raise source.error("collective", None, f"[collective] {param.name} is missing; it is required: "
                                                   f"{param.name} must be {param.rule}")
    return ()


def _check_axes(source: Source, params: dict[str, Any], mesh: sim.Mesh) -> None:
    """`axis_name` names mesh axes and `axis_index_groups` partitions them, by the simulator's own rules."""
    key = "axis_name"
    try:
        size = mesh.axis_size(params[key])
        key = "axis_index_groups"
        if params.get(key) is not None:
            sim.check_axis_index_groups(params[key], size, params["axis_name"])
    except sim.MeshError as error:
        raise source.error("collective", key, f"[collective] {error}") from None


def _names() -> str:
    """The known ops, quoted, for error messages."""
    return ", ".join(repr(name) for name in collectives.REGISTRY)
