"""A run's file: what the faces (`explain`, `draw`) read of a run, written as JSON and read back.

The file holds the mesh's axes, the end time, every device's part of every call (`CallRecord`, labels
included) and the trace's columns (details one column per key, None where a record lacks the key: a
detail's None value reads back as absent). Routes are not saved (they follow
from the mesh and the network, which are not).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim._errors import InvalidArgumentError
from sim.record._trace import FIELDS, CallRecord, Trace

FORMAT, VERSION = "meshsim-run", 1
_TUPLE = "tuple"  # a detail's tuple is written {"tuple": [...]}, so it reads back a tuple, not a list


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


def write_run(faced: Faced, path: str | Path) -> None:
    """Write `faced` to `path` as JSON.

    Raises:
        OSError: `path` cannot be written.
    """
    columns = faced.trace.columns()
    messages = {name: columns[name].tolist() for name in FIELDS if name != "detail"}
    messages["detail"] = {key: _column(faced.trace.detail_column(key)) for key in sorted(faced.trace.detail_keys())}
    groups: dict[tuple[int, ...], int] = {}
    calls = [[c.device, c.collective, c.call, groups.setdefault(c.members, len(groups)), c.enter_s, c.met_s,
              c.exit_s, c.algorithm, c.label] for c in faced.calls]
    document = {"format": FORMAT, "version": VERSION, "title": faced.title, "mesh": dict(faced.mesh_shape),
                "end_time_s": faced.end_time_s, "groups": [list(g) for g in groups], "calls": calls,
                "messages": messages}
    Path(path).write_text(json.dumps(document, default=_plain), encoding="utf-8")


def read_run(path: str | Path) -> Faced:
    """The run written at `path` by `write_run` (`Run.save`).

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
    if document.get("version") != VERSION:
        raise InvalidArgumentError(f"{path}: saved run version={document.get('version')!r}; this meshsim reads "
                                   f"version {VERSION}")
    try:
        return _read(document, Path(path).name)
    except (KeyError, TypeError, ValueError) as error:
        raise InvalidArgumentError(f"{path}: not a saved run: {type(error).__name__}: {error}") from None


def _read(document: dict, title: str) -> Faced:
    """The run a parsed document holds (titled `title` when it has none).

    Raises:
        KeyError, TypeError, ValueError: the document is not a run's.
    """
    mesh = {str(name): int(size) for name, size in document["mesh"].items()}
    groups = [tuple(int(m) for m in members) for members in document["groups"]]
    calls = tuple(CallRecord(int(d), str(c), int(k), groups[g], float(a), float(b), float(e), algorithm, label)
                  for d, c, k, g, a, b, e, algorithm, label in document["calls"])
    messages, trace = document["messages"], Trace()
    count = len(messages["src"])
    keys = {key: _uncolumn(column) for key, column in messages["detail"].items()}
    if any(len(messages[name]) != count for name in FIELDS if name != "detail") or any(
            len(values) != count for values in keys.values()):
        raise ValueError("the message columns differ in length")
    if all(None not in values for values in keys.values()):  # every record has every key: one dict each
        details = [dict(zip(keys, row)) for row in zip(*keys.values())] if keys else [{} for _ in range(count)]
    else:
        details = [{} for _ in range(count)]
        for key, values in keys.items():
            for detail, value in zip(details, values):
                if value is not None:
                    detail[key] = value
    stored = [details if name == "detail" else messages[name] for name in FIELDS if name != "arrival_time_s"]
    trace.extend(list(zip(*stored)), np.asarray(messages["arrival_time_s"], np.float64))
    return Faced(mesh, trace, calls, float(document["end_time_s"]), str(document.get("title") or title))


def _column(values: list) -> dict:
    """One detail key's values (None where a record lacks it) as JSON: plain, or lists for a key whose
    values are all tuples (row spans), else each value encoded alone."""
    if values and None not in values:
        with contextlib.suppress(ValueError, TypeError):  # ragged or mixed: value by value below
            kinds = {type(v) for v in values}
            array = np.array(values)
            if kinds == {tuple} and array.ndim == 2 and array.dtype.kind == "i":
                return {"tuples": True, "values": array.tolist()}
            if kinds in ({int}, {float}) and array.ndim == 1 and array.dtype.kind in "if":
                return {"tuples": False, "values": array.tolist()}
    if all(v is None or type(v) is tuple for v in values):
        return {"tuples": True, "values": [None if v is None else _encode(list(v)) for v in values]}
    return {"tuples": False, "values": [_encode(v) for v in values]}


def _uncolumn(column: dict) -> list:
    """`_column` undone."""
    values = column["values"]
    if column["tuples"]:
        if None not in values and all(type(e) in (int, float) for v in values[:1] for e in v):
            return list(map(tuple, values))
        return [None if v is None else tuple(_decode(v)) for v in values]
    return [_decode(v) for v in column["values"]]


def _encode(value: Any) -> Any:
    """A detail's value as JSON keeps it: tuples marked, numpy values plain."""
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return _plain(value) if isinstance(value, (np.generic, np.ndarray)) else value


def _decode(value: Any) -> Any:
    """A detail's value as it was recorded (`_encode` undone)."""
    if isinstance(value, dict) and list(value) == [_TUPLE]:
        return tuple(_decode(v) for v in value[_TUPLE])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    """A numpy value as plain JSON."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot save a {type(value).__name__} in a run's file")
