"""`load_sweep`: a sweep file (TOML) read and validated into the `Point`s of a timing sweep.

A sweep file names parameters at its top level, each one value or a list of values; the points are the
cartesian product of the lists (a grid). `[[point]]` tables list points explicitly: each takes the top-level
values as defaults for the keys it leaves out, and a list inside it is a grid of its own; once there is a
`[[point]]`, only the point tables make points (an empty one stands for the top-level grid). Every value is
checked here, on its own, with the file, the line and the key in the message; what only a combination can
break (an algorithm another collective lacks, a network that does not fit a mesh, a power-of-two algorithm
on 6 devices) is the simulator's to reject, point by point, when the point runs (see `scenarios.sweep._measure`).

    collective = ["psum", "all_gather"]       # any of SWEPT (the collectives whose definition has sweep facts)
    mesh = {x = 8}                            # axis name = size; a list of such tables for several meshes
    size = {from = "1KiB", to = "64MiB", factor = 2}   # or one size, or a list: 4096, "1KiB", "1.5 MiB"
    network = ["ring", "switch", {preset = "tpu-v5e"}] # a topology, a preset, or a [network] table
    algorithm = ["ring", "auto"]
    dtype = ["float32", "bfloat16"]
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass
from typing import Any

import collectives
import sim
from scenarios import _fields as fields
from scenarios._errors import Source, parse_toml
from scenarios._fields import InFile
from scenarios.sweep._sweep_values import NETWORK_RULE, check_network, network_label, parse_size

# The collectives a sweep times: those whose definition says how (`Definition.sweep`, the nccl-tests operation
# its columns follow; see _measure).
SWEPT = tuple(name for name, definition in collectives.REGISTRY.items() if definition.sweep is not None)
PARAMETERS = ("collective", "mesh", "axis_name", "size", "network", "algorithm", "dtype", "seed", "payload")
_DEFAULTS: dict[str, Any] = {"axis_name": None, "network": {"topology": "fully_connected"}, "algorithm": "direct",
                             "dtype": "float32", "seed": 0, "payload": "bytes"}
PAYLOADS = ("bytes", "abstract")  # real arrays, or shapes and dtypes alone (`sim.ShapeDtypeStruct`)
_TOP_KEYS = PARAMETERS + ("sizes", "title", "description", "point")
DTYPES = tuple(name for name in fields.DTYPE_NAMES if name != "bool")  # a sweep moves numbers
MAX_POINTS = 1_000_000
MAX_SIZE_BYTES = 1 << 50  # beyond any machine's memory, so a typo such as 1e300 is caught here


@dataclass(frozen=True)
class Point:
    """One simulation of a sweep: every parameter with one checked value, JSON-ready.

    `mesh` maps axis names to sizes in mesh order; `axis_name` is None for every axis of the mesh; `network`
    is a `[network]` table (the scenario files' vocabulary); `size_bytes` is the size asked for (nccl-tests'
    meaning, per collective: see `scenarios.sweep._measure`); `payload` "abstract" runs the operands as shapes
    and dtypes without bytes (the same trace and times).
    """

    collective: str
    mesh: dict[str, int]
    axis_name: str | list[str] | None
    size_bytes: int
    network: dict[str, Any]
    algorithm: str
    dtype: str
    seed: int
    payload: str = "bytes"

    @property
    def params(self) -> dict[str, Any]:
        """The parameters as a dict in `PARAMETERS` order (with `size_bytes` for `size`); `payload` only when it
        is not the default, so a point of real bytes keeps the key it always had."""
        params = {"collective": self.collective, "mesh": self.mesh, "axis_name": self.axis_name,
                  "size_bytes": self.size_bytes, "network": self.network, "algorithm": self.algorithm,
                  "dtype": self.dtype, "seed": self.seed}
        return params if self.payload == "bytes" else {**params, "payload": self.payload}

    @property
    def key(self) -> str:
        """A stable name of the point: 16 hex digits of the SHA-256 of its parameters as canonical JSON
        (the same parameters give the same key in every run, on every machine)."""
        text = json.dumps(self.params, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def network_label(self) -> str:
        """The network as rows and tables name it: 'ring', 'tpu-v5e', 'ring bandwidth_bytes_per_s=1e9'."""
        return network_label(self.network)


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file: its title, description and distinct points in file order."""

    path: str
    title: str
    description: str
    points: tuple[Point, ...]


def load_sweep(path: str | os.PathLike) -> Sweep:
    """Read and validate the sweep file at `path` (see the module docstring and docs/reference/sweep-files.md).

    Raises:
        ScenarioError: the file is unreadable or not TOML; an unknown key (the known ones are listed); a value
            that breaks its rule (the message gives the line, `key=value` and the rule); an empty list or
            range, or no points at all; more than `MAX_POINTS` points.
    """
    source, data = _parse(str(path))
    source.check_keys("", data, (), _TOP_KEYS)
    for key in ("title", "description"):
        fields.string(InFile(source, "", key), data.get(key, ""))
    top = _values(source, "", {k: v for k, v in data.items() if k not in ("title", "description", "point")}, 0)
    tables = _point_tables(source, data)
    points: dict[str, Point] = {}
    for index, table in enumerate(tables):
        where = ("point", index) if "point" in data else ("", 0)
        merged = {**top, **_values(source, where[0], table, where[1])} if table is not None else top
        for point in _expand(source, where, merged):
            points.setdefault(point.key, point)
    if not points:
        raise source.error("", None, "the sweep has no points: give collective, mesh and size at the top level "
                                     "(a grid) or in [[point]] tables")
    stem = os.path.splitext(os.path.basename(str(path)))[0]
    return Sweep(str(path), data.get("title", stem), data.get("description", ""), tuple(points.values()))


class _SweepSource(Source):
    """A sweep file's text: messages name a `[[point]]` table by its number."""

    def label(self, table: str, index: int = 0) -> str:
        """How messages name `table`: '[[point]] number 2: ' for the second point table."""
        return f"[[point]] number {index + 1}: " if table == "point" else super().label(table, index)


def _parse(path: str) -> tuple[Source, dict]:
    """The sweep file's text and its TOML tables; unreadable files and syntax errors become ScenarioError."""
    return parse_toml(path, "sweep", _SweepSource)


def _point_tables(source: Source, data: dict) -> list[dict | None]:
    """The `[[point]]` tables, or one None standing for the top-level grid when there are none."""
    if "point" not in data:
        return [None]
    tables = data["point"]
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise source.error("", "point", "point must be an array of tables: write [[point]] above each point's keys")
    for index, table in enumerate(tables):
        source.check_keys("point", table, (), PARAMETERS + ("sizes",), index)
    return tables


def _values(source: Source, table: str, given: dict, index: int) -> dict[str, tuple[list, Any]]:
    """Each key of `given` as (its checked values, its line locator); `sizes` is read as `size`."""
    if "size" in given and "sizes" in given:
        raise source.error(table, "sizes", f"{source.label(table, index)}give size or sizes, not both (they "
                                           "are one key)", index)
    found = {}
    for key, value in given.items():
        name = "size" if key == "sizes" else key
        where = _where(source, table, key, index)
        found[name] = (_checked(where, name, value), where)
    return found


def _where(source: Source, table: str, key: str, index: int) -> InFile:
    """Where `key` of `table` (number `index`) was written, for its error messages."""
    return InFile(source, table, key, source.label(table, index), index)


def _checked(where: InFile, name: str, value: Any) -> list:
    """The values `value` stands for (a list is several choices), each checked by `name`'s rule."""
    if name == "size" and isinstance(value, dict):
        return parse_size_range(where, value)
    if name == "axis_name" and isinstance(value, str):
        value = [value]
    choices = value if isinstance(value, list) else [value]
    if not choices:
        raise where.error(f"{where.key}=[] is empty, so the grid has no points; give at least one value")
    return [_CHECKS[name](where, choice) for choice in choices]


def parse_size_range(where: InFile, table: dict) -> list[int]:
    """`{from, to, factor}` or `{from, to, step}`: from, then times factor (or plus step), up to to."""
    unknown = [k for k in table if k not in ("from", "to", "factor", "step")]
    if unknown or "from" not in table or "to" not in table or ("factor" in table) == ("step" in table):
        raise where.error(f"{where.key}={table!r} must be a size, a list of sizes or a range "
                          "{from = SIZE, to = SIZE, factor = NUMBER > 1} (or step = SIZE instead of factor)")
    low, high = (_size(where, table[k]) for k in ("from", "to"))
    factor, step = table.get("factor"), table.get("step")
    if factor is not None and not (type(factor) in (int, float) and factor > 1):
        raise where.error(f"{where.key} factor={factor!r} must be a number greater than 1")
    add = _size(where, step) if step is not None else 0
    if high < low:
        raise where.error(f"{where.key} from={table['from']!r} is more than to={table['to']!r}, so the range "
                          "is empty and the grid has no points")
    sizes, size = [], float(low)
    while size <= high and len(sizes) <= MAX_POINTS:
        sizes.append(int(size))
        size = size * factor if factor is not None else size + add
    return sizes


# Each check below returns one value as a `Point` holds it, or raises `where.error` with `key=value` and the rule.


def _size(where: InFile, value: Any) -> int:
    try:
        size = parse_size(value)
    except sim.InvalidArgumentError:
        size = 0
    if not 1 <= size <= MAX_SIZE_BYTES:
        raise where.error(f"{where.key}={value!r} must be a positive number of bytes up to 1 PiB or a size with a "
                          "unit (B, KiB, MiB, GiB, or KB, MB, GB), e.g. 4096 or \"64MiB\"")
    return size


def _collective(where: InFile, value: Any) -> str:
    if value not in SWEPT:
        raise where.error(f"collective={value!r} must be one of {', '.join(SWEPT)}")
    return value


def _mesh(where: InFile, value: Any) -> dict[str, int]:
    value = fields.mesh_axes(where, value, example="{x = 8} or {x = 4, y = 2} (a list of them for "
                                                              "several meshes)")
    if math.prod(value.values()) > sim.MAX_DEVICES:
        raise where.error(f"mesh={value!r} has {math.prod(value.values())} devices, more than the simulator's "
                          f"limit of {sim.MAX_DEVICES}")
    return dict(value)


def _axis_name(where: InFile, value: Any) -> str | list[str]:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return list(value)
    raise where.error(f"axis_name={value!r} must be an axis name or a list of choices, each a name or a list of "
                      "names: axis_name = \"x\", [\"x\", \"y\"] (two choices) or [[\"x\", \"y\"]] (both axes)")


def _network(where: InFile, value: Any) -> dict[str, Any]:
    try:
        return check_network(value)
    except sim.MeshError as error:
        raise where.error(f"network={value!r}: {error}; {NETWORK_RULE}") from None


def _algorithm(where: InFile, value: Any) -> str:
    known = sorted({a for op in SWEPT for a in collectives.definition(op).param("algorithm").choices})
    if value not in known:
        raise where.error(f"algorithm={value!r} must be one of {', '.join(known)} (each collective takes some of "
                          "them; the others give rows with the simulator's error)")
    return value


def _dtype(where: InFile, value: Any) -> str:
    return str(fields.dtype(where, value, DTYPES, "'float32', 'bfloat16' or 'int32'"))


def _seed(where: InFile, value: Any) -> int:
    return fields.integer(where, value, minimum=0)


def _payload(where: InFile, value: Any) -> str:
    if value not in PAYLOADS:
        raise where.error(f"payload={value!r} must be \"bytes\" or \"abstract\" (shapes and dtypes without the "
                          "bytes: the same times), or a list of them")
    return value


_CHECKS = {"collective": _collective, "mesh": _mesh, "axis_name": _axis_name, "size": _size,
           "network": _network, "algorithm": _algorithm, "dtype": _dtype, "seed": _seed, "payload": _payload}


def _expand(source: Source, where: tuple[str, int], values: dict[str, tuple[list, Any]]) -> list[Point]:
    """The cartesian product of `values` (defaults filled in) as points, in file order (the last key fastest)."""
    for key in ("collective", "mesh", "size"):
        if key not in values:
            raise source.error(where[0], None, f"{source.label(*where)}{key} is missing; give it at the top level "
                                               f"or in every [[point]]", where[1])
    choices = [values[k][0] if k in values else [_DEFAULTS[k]] for k in PARAMETERS]
    count = math.prod(len(c) for c in choices)
    if count > MAX_POINTS:
        raise source.error(where[0], None, f"{source.label(*where)}the grid has {count} points, more than "
                                           f"{MAX_POINTS}; split it into several sweep files", where[1])
    return [Point(*values) for values in itertools.product(*choices)]
