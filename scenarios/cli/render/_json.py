"""`meshsim run --json`: the result as one JSON document, big arrays streamed in chunks.

The document is laid out with an indent for reading; each array is written on one line by the C encoder,
a chunk of rows at a time, so a run with millions of elements costs time linear in them and little memory.
Past `MESSAGES` messages (unless `full`) `messages` lists the first `MESSAGES` in trace order and
`messages_summary` says how many there are, their bytes and how many were left out, counted from the
trace's columns: a 1,000-device all_gather's million messages would otherwise be most of the document.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import TextIO

import numpy as np

import sim
from scenarios import ProgramResult, ScenarioResult

_CHUNK_ELEMENTS = 1 << 16  # elements turned into Python values at a time
MESSAGES = 4096  # past this many messages, the document lists the first ones and a summary, unless full


def write_json(result: ScenarioResult | ProgramResult, stream: TextIO, full: bool = False) -> None:
    """Write `result.to_dict()` to `stream` as JSON (every element of every array), then a newline; past
    `MESSAGES` messages, unless `full`, the first `MESSAGES` and a `messages_summary`."""
    if not isinstance(result, ScenarioResult):
        stream.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return
    arrays: list[np.ndarray | Sequence] = []
    token = f"meshsim-array-{uuid.uuid4().hex}"

    def hold(array: np.ndarray | Sequence) -> str:
        arrays.append(array)
        return f"{token}:{len(arrays) - 1}"

    cut = not full and len(result.trace) > MESSAGES
    document = result.to_dict(hold, MESSAGES if cut else None)
    if cut:
        document["messages_summary"] = _summary(result)
    pieces = re.split(rf'"{token}:(\d+)"', json.dumps(document, indent=2))
    for i, piece in enumerate(pieces):  # the layout's text, then an array's index, alternately
        if i % 2:
            _write_array(arrays[int(piece)], stream)
        else:
            stream.write(piece)
    stream.write("\n")


def _summary(result: ScenarioResult) -> dict:
    """How many messages and copies the run recorded (`sim.record.Traffic`), the bytes over the network, and
    how many `messages` lists."""
    traffic = sim.record.Traffic.of(result.trace)
    return {"messages": traffic.messages, "between_devices": traffic.between, "copies": traffic.copies,
            "bytes_between_devices": traffic.network_bytes, "listed": MESSAGES,
            "left_out": len(result.trace) - MESSAGES,
            "rule": f"the first {MESSAGES} records in trace order are listed; --full lists every one"}


def _write_array(array: np.ndarray | Sequence, stream: TextIO) -> None:
    """`array` (or a sequence such as a provenance's sources) as a JSON nested list on one line, written a
    block of leading-axis rows at a time; an abstract array (payload = "abstract") as its shape and dtype."""
    if sim.memory.is_abstract(array):
        dtype = sim.memory.logical_dtype(array.dtype)
        stream.write(json.dumps({"abstract": True, "shape": list(array.shape), "dtype": str(dtype)}))
        return
    if (isinstance(array, np.ndarray) and array.ndim == 0) or len(array) == 0:
        stream.write(json.dumps(_listed(array)))
        return
    row = array[0].size if isinstance(array, np.ndarray) else 1
    step = max(1, _CHUNK_ELEMENTS // max(1, row))
    stream.write("[")
    for start in range(0, len(array), step):
        stream.write(", " if start else "")
        stream.write(json.dumps(_listed(array[start:start + step]))[1:-1])
    stream.write("]")


def _listed(values: np.ndarray | Sequence) -> list:
    """An array as nested lists, any other sequence as a list."""
    return values.tolist() if isinstance(values, np.ndarray) else list(values)
