"""A run's file: what the faces (`explain`, `draw`) read of a run, written as JSON and read back.

The file holds the mesh's axes, the end time, every device's part of every call (`CallRecord`, labels
included) and the trace's columns (details as given, tuples marked). Routes are not saved (they follow
from the mesh and the network, which are not).
"""

from __future__ import annotations

import json
from dataclasses import astuple, dataclass
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
    messages["detail"] = [{k: _encode(v) for k, v in d.items()} for d in columns["detail"].tolist()]
    document = {"format": FORMAT, "version": VERSION, "title": faced.title, "mesh": dict(faced.mesh_shape),
                "end_time_s": faced.end_time_s, "calls": [list(astuple(c)) for c in faced.calls],
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
    mesh = {str(name): int(size) for name, size in document["mesh"].items()}
    calls = tuple(CallRecord(int(d), str(c), int(k), tuple(int(m) for m in members), float(a), float(b),
                             float(e), algorithm, label)
                  for d, c, k, members, a, b, e, algorithm, label in document["calls"])
    messages, trace = document["messages"], Trace()
    count = len(messages["src"])
    if any(len(messages[name]) != count for name in FIELDS):
        raise ValueError("the message columns differ in length")
    for row in zip(*(messages[name] for name in FIELDS)):
        record = dict(zip(FIELDS, row))
        record["detail"] = {k: _decode(v) for k, v in record["detail"].items()}
        trace.append(**record)
    return Faced(mesh, trace, calls, float(document["end_time_s"]), str(document.get("title") or title))


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
