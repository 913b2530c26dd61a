"""A run's file: what the faces (`explain`, `draw`) read of runs, written as JSON and read back.

The file holds one or more runs (a gradient's forward and backward runs, say), each with the mesh's axes,
the end time, every device's part of every call (`CallRecord`, labels included; each group's members
once), the trace's columns: numbers as base64 of their little-endian bytes, names as a table and codes,
details one column per key (an array where its values are ints or tuples of ints, else JSON values with
null where a record lacks the key, so a detail's None value reads back as absent; keys in the order records
first have them, so a detail reads back in its own order), the local work charged
with `sim.compute` (`Trace.computes`), and the route of each pair of devices a message crossed between
(the links Perfetto's link tracks show; the mesh and the network are not saved). So every face of a run
read back (explain, draw, its Perfetto events) is the run's own. A million messages save and load in
seconds. Version 1 files, written before computes and routes were saved, read back without them.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim._errors import InvalidArgumentError
from sim.record._compute import ComputeRecord
from sim.record._trace import FIELDS, CallRecord, Trace

FORMAT, VERSION = "meshsim-run", 2
_READS = (1, 2)  # the versions this meshsim reads
_COMPUTE = ("device", "start_s", "end_s", "name", "flops", "bytes_accessed", "transcendentals")
_NAMES = ("collective", "kind")  # string columns, written as a table and codes
_PLAIN = {str, int, float, bool, type(None)}  # detail values JSON keeps as they are
_TUPLE = "tuple"  # a detail's tuple inside a JSON value is written {"tuple": [...]}, so it reads back a tuple


@dataclass(frozen=True)
class Faced:
    """What the faces read of a run: the mesh's axes, the trace, every device's part of every call, the end
    time and a title."""

    mesh_shape: dict[str, int]
    trace: Trace
    calls: tuple[CallRecord, ...]
    end_time_s: float
    title: str = "run"

    @property
    def devices(self) -> range:
        """The devices, numbered row-major over the mesh's axes."""
        return range(int(np.prod(list(self.mesh_shape.values()), dtype=np.int64)))


def write_runs(faceds: Sequence[Faced], path: str | Path) -> None:
    """Write the runs `faceds` to `path` as JSON, in order.

    Raises:
        OSError: `path` cannot be written.
    """
    document = {"format": FORMAT, "version": VERSION, "runs": [_document(faced) for faced in faceds]}
    Path(path).write_text(json.dumps(document), encoding="utf-8")


def _document(faced: Faced) -> dict:
    """One run as JSON."""
    trace = faced.trace
    messages: dict[str, Any] = {}
    for name in FIELDS:
        if name in _NAMES:
            table: dict[str, int] = {}
            codes = np.array([table.setdefault(v, len(table)) for v in trace.column(name).tolist()], np.int32)
            messages[name] = {"names": list(table), "codes": _packed(codes)}
        elif name != "detail":
            messages[name] = _packed(trace.column(name))
    messages["detail"] = {key: _column(trace.detail_column(key)) for key in trace.detail_keys()}
    groups: dict[tuple[int, ...], int] = {}
    calls = [[c.device, c.collective, c.call, groups.setdefault(c.members, len(groups)), c.enter_s, c.met_s,
              c.exit_s, c.algorithm, c.label] for c in faced.calls]
    return {"title": faced.title, "mesh": dict(faced.mesh_shape), "end_time_s": faced.end_time_s,
            "count": len(trace), "groups": [list(g) for g in groups], "calls": calls, "messages": messages,
            "computes": [[getattr(c, name) for name in _COMPUTE] for c in trace.computes],
            "routes": [[a, b, _encode(trace.route(a, b))] for a, b in _pairs(trace)]}


def _pairs(trace: Trace) -> list[tuple[int, int]]:
    """Each (sender, receiver) pair of devices a message went between, once."""
    kinds, src, dst = (trace.column(name) for name in ("kind", "src", "dst"))
    apart = (kinds == "message") & (src != dst)
    return [(a, b) for a, b in np.unique(np.stack([src[apart], dst[apart]], axis=1), axis=0).tolist()]


def read_runs(path: str | Path) -> list[Faced]:
    """The runs written at `path` by `write_runs` (`Run.save`, `sim.save_runs`), in order.

    Raises:
        InvalidArgumentError: the file is not a saved run (names the file and what is wrong).
        OSError: the file cannot be read.
    """
    text = Path(path).read_text(encoding="utf-8")
    try:
        document = json.loads(text)
    except ValueError as error:
        raise InvalidArgumentError(f"{path}: not a saved run: not JSON ({error})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InvalidArgumentError(f"{path}: not a saved run: format must be {FORMAT!r} (written by Run.save)")
    if document.get("version") not in _READS:
        raise InvalidArgumentError(f"{path}: saved run version={document.get('version')!r}; this meshsim reads "
                                   f"versions {' and '.join(map(str, _READS))}")
    name = Path(path).name
    try:
        runs = document["runs"]
        return [_read(run, name if len(runs) == 1 else f"{name} run {k + 1}") for k, run in enumerate(runs)]
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise InvalidArgumentError(f"{path}: not a saved run: {type(error).__name__}: {error}") from None


def _read(document: dict, title: str) -> Faced:
    """The run a parsed document holds (titled `title` when it has none of its own).

    Raises:
        KeyError, TypeError, ValueError, AttributeError, IndexError: the document is not a run's.
    """
    mesh = {str(name): int(size) for name, size in document["mesh"].items()}
    groups = [tuple(int(m) for m in members) for members in document["groups"]]
    calls = tuple(CallRecord(int(d), str(c), int(k), groups[g], float(a), float(b), float(e),
                             _text(algorithm, "algorithm"), _text(label, "label"))
                  for d, c, k, g, a, b, e, algorithm, label in document["calls"])
    messages, count = document["messages"], int(document["count"])
    columns: dict[str, Any] = {}
    for name in FIELDS:
        if name in _NAMES:
            names = [str(n) for n in messages[name]["names"]]
            columns[name] = [names[c] for c in _unpacked(messages[name]["codes"]).tolist()]
        elif name != "detail":
            columns[name] = _unpacked(messages[name])
    keys = {key: _uncolumn(column) for key, column in messages["detail"].items()}
    if any(len(values) != count for values in (*columns.values(), *keys.values())):
        raise ValueError(f"the message columns must each hold count={count} values")
    routes = {(int(a), int(b)): _decode(links) for a, b, links in document.get("routes", [])}
    trace = Trace(route=(lambda src, dst: routes.get((src, dst), ())) if routes else None)
    trace.computes = [ComputeRecord(int(d), float(a), float(e), _text(name, "compute name") or "", float(f),
                                    float(m), float(t)) for d, a, e, name, f, m, t in document.get("computes", [])]
    if all(isinstance(values, np.ndarray) or None not in values for values in keys.values()):
        trace.extend_columns(columns, keys)  # every record has every key: kept as columns
    else:
        trace.extend_columns(columns, _dicts(keys, count))
    named = str(document.get("title") or Faced.title)
    return Faced(mesh, trace, calls, float(document["end_time_s"]), title if named == Faced.title else named)


def _text(value: Any, what: str) -> str | None:
    """A call's label or algorithm (or a compute's name) as read: a string, or None.

    Raises:
        TypeError: `value` is neither.
    """
    if value is not None and not isinstance(value, str):
        raise TypeError(f"a {what} must be a string or null, not {value!r}")
    return value


def _dicts(keys: dict[str, Any], count: int) -> list[dict]:
    """One detail dict per record from columns with None where a record lacks the key."""
    details: list[dict] = [{} for _ in range(count)]
    for key, values in keys.items():
        listed = values.tolist() if isinstance(values, np.ndarray) else values
        for detail, value in zip(details, listed):
            if value is not None:
                detail[key] = tuple(value) if isinstance(values, np.ndarray) and values.ndim == 2 else value
    return details


def _packed(array: np.ndarray) -> dict:
    """A numeric array as JSON: its dtype, shape and little-endian bytes in base64."""
    array = np.ascontiguousarray(array)
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return {"dtype": array.dtype.str.lstrip("<>|="), "shape": list(array.shape),
            "base64": base64.b64encode(little.tobytes()).decode("ascii")}


def _unpacked(packed: dict) -> np.ndarray:
    """`_packed` undone."""
    dtype = np.dtype("<" + packed["dtype"]) if packed["dtype"][0] not in "bBO" else np.dtype(packed["dtype"])
    raw = base64.b64decode(packed["base64"].encode("ascii"), validate=True)
    return np.frombuffer(raw, dtype).reshape([int(n) for n in packed["shape"]])


def _column(values: list) -> dict:
    """One detail key's values (None where a record lacks it) as JSON: an array where every record has an int
    or a tuple of as many ints, else each value encoded alone."""
    kinds = {type(v) for v in values}
    if values and kinds in ({tuple}, {int}):
        with contextlib.suppress(ValueError, TypeError, OverflowError):  # ragged or mixed: value by value
            array = np.array(values)
            if array.dtype.kind == "i" and array.ndim == (2 if kinds == {tuple} else 1):
                return {"array": _packed(array.astype(np.int64))}
    if kinds <= _PLAIN:  # JSON keeps these as they are
        return {"values": values}
    return {"values": [_encode(v) for v in values]}


def _uncolumn(column: dict) -> np.ndarray | list:
    """`_column` undone: an int64 array (2-D for tuples), or a list of values."""
    if "array" in column:
        return _unpacked(column["array"]).astype(np.int64)
    return [_decode(v) for v in column["values"]]


def _encode(value: Any) -> Any:
    """A detail's value as JSON keeps it: tuples marked, numpy values plain."""
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def _decode(value: Any) -> Any:
    """A detail's value as it was recorded (`_encode` undone)."""
    if isinstance(value, dict) and list(value) == [_TUPLE]:
        return tuple(_decode(v) for v in value[_TUPLE])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value
