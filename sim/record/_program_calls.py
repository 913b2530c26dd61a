"""A run's collective calls as the program made them: one `ProgramCall` per call site and occurrence.

The engine records each device's part of each call (`CallRecord`) and numbers calls per group of devices
(`call`). The faces show a program's calls instead: the parts of every group made by the same line of the
program at the same occurrence (same collective, call number, label and group size) are one call, with
the messages and local copies of its parts. Calls are numbered from 1 in the order they were first entered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.record._trace import CallRecord, Trace


@dataclass(frozen=True)
class ProgramCall:
    """One call of a program: the collective, where it was made (`label`), its groups and every device's part
    (`records`), the trace indices of its messages and copies (`messages`), and when it began and ended:
    `enter_s` the first part entered, `met_s` the last group met, `exit_s` the last part ended."""

    number: int
    collective: str
    call: int
    label: str | None
    groups: tuple[tuple[int, ...], ...]
    algorithm: str | None
    records: tuple[CallRecord, ...]
    messages: np.ndarray
    enter_s: float
    met_s: float
    exit_s: float

    @property
    def title(self) -> str:
        """'call 2: ragged_all_to_all at moe.py:57:8 (layer)', or without 'at ...' when the label is unknown."""
        return f"call {self.number}: {self.collective}" + (f" at {self.label}" if self.label else "")


def program_calls(trace: Trace, calls: Sequence[CallRecord]) -> list[ProgramCall]:
    """The calls of a run (`trace` and its `calls`), in the order they were first entered."""
    keys: dict[tuple, list[CallRecord]] = {}
    for record in calls:
        keys.setdefault((record.collective, record.call, record.label, len(record.members)), []).append(record)
    ordered = sorted(keys.values(), key=lambda parts: min(p.enter_s for p in parts))
    owner = _owners(trace, [part for parts in ordered for part in parts],
                    np.repeat(np.arange(len(ordered)), [len(parts) for parts in ordered]))
    found = []
    for number, parts in enumerate(ordered):
        groups = tuple(dict.fromkeys(p.members for p in parts))
        algorithms = [p.algorithm for p in parts if p.algorithm is not None]
        found.append(ProgramCall(number + 1, parts[0].collective, parts[0].call, parts[0].label, groups,
                                 algorithms[0] if algorithms else None, tuple(parts),
                                 np.flatnonzero(owner == number), min(p.enter_s for p in parts),
                                 max(p.met_s for p in parts), max(p.exit_s for p in parts)))
    return found


def _owners(trace: Trace, parts: list[CallRecord], of: np.ndarray) -> np.ndarray:
    """For each trace record, the index (in `of`) of the call whose part sent it, -1 for none: a record is
    its sender's part of the same collective and call number; where a device has several such parts (calls
    over different groups that share a number), the one that met last before the record was sent (a part
    sends nothing before its group meets, and the next part meets no earlier than the one before ended)."""
    owner = np.full(len(trace), -1, np.int64)
    if not len(trace) or not parts:
        return owner
    src, call, send = trace.column("src"), trace.column("call"), trace.column("send_time_s")
    names, coded = np.unique(trace.column("collective").astype(str), return_inverse=True)
    index = {name: k for k, name in enumerate(names.tolist())}
    width = int(max(call.max(initial=0), max(p.call for p in parts))) + 1
    message_keys = (src * len(names) + coded) * width + call
    part_keys = np.array([(p.device * len(names) + index[p.collective]) * width + p.call
                          if p.collective in index else -1 for p in parts], np.int64)
    unique, first, counts = np.unique(part_keys, return_index=True, return_counts=True)
    at = np.clip(np.searchsorted(unique, message_keys), 0, len(unique) - 1)
    hit = unique[at] == message_keys
    owner[hit] = of[first[at[hit]]]
    for key in unique[counts > 1]:  # a device with parts over several groups under one number
        rows = np.flatnonzero(message_keys == key)
        candidates = np.flatnonzero(part_keys == key).tolist()
        for row in rows:
            met = [k for k in candidates if parts[k].met_s <= send[row]] or candidates
            owner[row] = of[max(met, key=lambda k: parts[k].met_s)]
    return owner
