"""A run's collective calls as the program made them: one `ProgramCall` per call of the program.

The engine records each device's part of each call (`CallRecord`) and numbers calls per group of devices
(`call`), so a psum over axis 'c' and then one over axis 'a' are both call 0 of their groups. The faces show
a program's calls instead: a call of the program is the k-th collective call each device made, whatever
its group, with every group that met for it (each device's parts are put in the order it entered them;
parts of one meeting of a group, and the k-th parts of the same collective and label, are one call). Every
face (`repr`, `explain`, `draw`, the notebook's summary, the command line) counts and numbers calls so.
Calls are numbered from 1 in the order they were first entered.
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
    `enter_s` the first part entered, `met_s` the last group met, `exit_s` the last part ended;
    `met_by_group[g]` is when `groups[g]` met. `call` is the number its first part has in its group."""

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
    met_by_group: tuple[float, ...]

    @property
    def title(self) -> str:
        """'call 2: ragged_all_to_all at moe.py:57:8 (layer)', or without 'at ...' when the label is unknown."""
        return f"call {self.number}: {self.collective}" + (f" at {self.label}" if self.label else "")


def program_calls(trace: Trace, calls: Sequence[CallRecord]) -> list[ProgramCall]:
    """The calls of a run (`trace` and its `calls`), in the order they were first entered."""
    ordered = call_parts(calls)
    owner = _owners(trace, [part for parts in ordered for part in parts],
                    np.repeat(np.arange(len(ordered)), [len(parts) for parts in ordered]))
    found = []
    for number, parts in enumerate(ordered):
        met: dict[tuple[int, ...], float] = {}
        for p in parts:
            met[p.members] = max(met.get(p.members, p.met_s), p.met_s)
        algorithms = [p.algorithm for p in parts if p.algorithm is not None]
        found.append(ProgramCall(number + 1, parts[0].collective, parts[0].call, parts[0].label, tuple(met),
                                 algorithms[0] if algorithms else None, tuple(parts),
                                 np.flatnonzero(owner == number), min(p.enter_s for p in parts),
                                 max(met.values()), max(p.exit_s for p in parts), tuple(met.values())))
    return found


def call_parts(calls: Sequence[CallRecord]) -> list[list[CallRecord]]:
    """The parts of each call of the program, calls in the order they were first entered: parts of one
    meeting (collective, call number, group) go together, and so do the parts each device made k-th (in the
    order it entered them) of the same collective under the same label."""
    parent = list(range(len(calls)))

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = k = parent[parent[k]]
        return k

    first: dict[tuple, int] = {}
    for k, (record, step) in enumerate(zip(calls, _steps(calls))):
        for key in (("meeting", record.collective, record.call, record.members),
                    ("step", step, record.collective, record.label)):
            a, b = root(k), root(first.setdefault(key, k))
            parent[max(a, b)] = min(a, b)
    parts: dict[int, list[CallRecord]] = {}
    for k, record in enumerate(calls):
        parts.setdefault(root(k), []).append(record)
    return sorted(parts.values(), key=lambda found: min(p.enter_s for p in found))  # stable: ties keep order


def _steps(calls: Sequence[CallRecord]) -> list[int]:
    """For each part, how many calls its device entered before it (parts of a device taken by the time it
    entered them; the engine records parts as they end, so a tie keeps that order)."""
    steps = [0] * len(calls)
    made: dict[int, int] = {}
    for k in sorted(range(len(calls)), key=lambda k: (calls[k].device, calls[k].enter_s)):
        steps[k] = made.get(calls[k].device, 0)
        made[calls[k].device] = steps[k] + 1
    return steps


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
