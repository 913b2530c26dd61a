"""What `meshsim explain` says about each collective's protocol, and the messages of a trace grouped by step.

A collective is explained from its `Definition`: the summary line of its docstring, its device-variance rule,
its own text about the protocol (`Definition.explain`: the collective's `teach`, or the paragraph of the
algorithm the call asks for), and its parameters; its messages from the trace, grouped by the `phase` and
`step` their detail carries (or by the time they were sent).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.table import Table
from rich.text import Text

import collectives
import sim
from collectives import Definition, Vma
from scenarios.cli.render._arrays import colour as _colour
from scenarios.cli.render._units import seconds as _seconds
from scenarios.cli.render._units import span as _span

_VMA = {
    Vma.REDUCE: "every member of a group ends with the same value: the result is invariant along the axis",
    Vma.KEEP: "each device ends with a value of its own: the result varies along the axis",
    Vma.INTRODUCE: "the operand is the same on every member (invariant); each device's result is its own "
                   "(varying)",
    Vma.INDEX: "the result depends only on the device's position along the axis",
    Vma.INVARIANT: "typed invariant, as JAX types it (no varying axes), whether or not the devices' values "
                   "agree",
}

def call_text(op: str, params: dict[str, Any]) -> str:
    """The call as it reads in Python, e.g. `psum(x, axis_name='i', algorithm='ring')`."""
    arrays = collectives.definition(op).arrays
    return f"{op}({', '.join([*arrays, *(f'{k}={v!r}' for k, v in params.items())])})"


def protocol(definition: Definition, params: dict[str, Any], group_size: int) -> list[str]:
    """Paragraphs on what the collective computes and which messages it sends, for one call."""
    summary = " ".join((definition.function.__doc__ or definition.name).split("\n\n")[0].split())
    told = [f"{definition.name}: {summary}", f"Result: {_VMA[definition.vma]}.",
            *definition.explain(params, group_size)]
    unset = [f"{p.name}={p.default!r}" for p in definition.params if not p.required and p.name not in params]
    if unset:
        told.append(f"Defaults in effect: {', '.join(unset)}.")
    return told


def step_groups(trace: sim.Trace, indices: Sequence[int] | None = None) -> list[tuple[str, np.ndarray]]:
    """The messages (not local copies) of `trace` (of `indices` only, when given) by trace position (an
    array of ints per step), grouped by step in order of first send.

    A message whose detail names a `phase` or `step` (ring, recursive doubling) belongs to that step; the
    others are grouped by the time they were sent. Read from the trace's columns: no record is made, and
    the grouping is a few numpy passes, so a million messages cost little more than their columns.
    """
    if indices is None:
        chosen = np.flatnonzero(trace.column("kind") == "message")
    else:
        chosen = np.asarray(indices, np.int64).reshape(-1)
        chosen = chosen[trace.column("kind")[chosen] == "message"]
    if not len(chosen):
        return []
    keys = trace.detail_keys("message")
    phase, phases = _codes(trace.detail_column("phase"), chosen) if "phase" in keys else _nones(chosen)
    step, steps = _codes(trace.detail_column("step"), chosen) if "step" in keys else _nones(chosen)
    named = _not_none(phase, phases) | _not_none(step, steps)
    sent = trace.column("send_time_s")
    sent = sent if indices is None and len(chosen) == len(sent) else sent[chosen]
    if named.all():
        key = phase * len(steps) + step
    elif not named.any():
        key = sent
    else:  # send times as codes past the (phase, step) codes; equal times share one
        at = np.unique(sent, return_inverse=True)[1].reshape(-1)
        key = np.where(named, phase * len(steps) + step, len(phases) * len(steps) + at)
    if key.min() == key.max():  # one step (a one-shot exchange): nothing to sort
        return [(_step_label((phases[phase[0]], steps[step[0]]) if named[0] else (float(sent[0]),)), chosen)]
    _, first, group = np.unique(key, return_index=True, return_inverse=True)
    labels = [_step_label((phases[phase[i]], steps[step[i]]) if named[i] else (float(sent[i]),))
              for i in first.tolist()]
    order = np.argsort(first)  # groups in order of their first message
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    group = rank[group.reshape(-1)]
    members = np.split(chosen[np.argsort(group, kind="stable")], np.cumsum(np.bincount(group))[:-1])
    return list(zip([labels[i] for i in order.tolist()], members))


def _codes(values: list, chosen: np.ndarray) -> tuple[np.ndarray, list]:
    """The values at `chosen` as codes (equal values, as a dict sees them, share one), and the value of each
    code, first seen first: `(['a', None, 'a'], [0, 1, 2])` gives `([0, 1, 0], ['a', None])`."""
    every = len(chosen) == len(values) and np.array_equal(chosen, np.arange(len(values)))
    picked = values if every else [values[k] for k in chosen.tolist()]
    distinct = list(dict.fromkeys(picked))
    code = {value: i for i, value in enumerate(distinct)}
    return np.fromiter(map(code.__getitem__, picked), np.int64, len(picked)), distinct


def _nones(chosen: np.ndarray) -> tuple[np.ndarray, list]:
    """The codes `_codes` gives when no message has the key: None for every one."""
    return np.zeros(len(chosen), np.int64), [None]


def _not_none(codes: np.ndarray, distinct: list) -> np.ndarray:
    """Where the coded values are not None."""
    none = next((i for i, value in enumerate(distinct) if value is None), -1)
    return codes != none


def _step_label(key: tuple) -> str:
    """`reduce-scatter, step 2`, `step 0`, or `sent at 1.2 us`."""
    if len(key) == 1:
        return f"sent at {_seconds(key[0])}"
    phase, step = key
    return ", ".join(str(x) for x in (phase, None if step is None else f"step {step}") if x is not None)


_LOCATED = ("slice", "rows", "src_rows", "axis", "phase", "step")


def message_table(trace: sim.Trace, indices: Sequence[int]) -> Table:
    """One row per message of `indices`, in its sender's colour: who to whom, bytes, when, and where it lands."""
    table = Table(show_edge=False, pad_edge=False)
    for column in ("#", "from", "to", "bytes", "sent", "arrived", "carries"):
        table.add_column(column, justify="right" if column in ("#", "from", "to", "bytes") else "left")
    for k in indices:
        m = trace[k]
        table.add_row(str(k), f"device {m.src}", f"device {m.dst}" + (" (itself)" if m.src == m.dst else ""),
                      str(m.size_bytes), _seconds(m.send_time_s), _seconds(m.arrival_time_s), _carries(m.detail),
                      style=_colour(m.src))
    return table


def _carries(detail: dict[str, Any]) -> str:
    """Where the message comes from and lands, e.g. `slice 1: its rows 1:3 -> rows 0:2 (axis 0)`."""
    parts = []
    if "slice" in detail:
        parts.append(f"slice {detail['slice']}")
    if "src_rows" in detail:
        parts.append(f"its rows {_span(detail['src_rows'])}")
    if "rows" in detail:
        parts.append(f"-> rows {_span(detail['rows'])}" + (f" of axis {detail['axis']}" if "axis" in detail else ""))
    parts += [f"{key} {value}" for key, value in detail.items() if key not in _LOCATED]
    return ", ".join(parts)


def array_text(array: np.ndarray, sources: Sequence[int | None] | None = None, threshold: int = 64) -> Text:
    """The array as `[1, 3, 0, 0]` (summarised beyond `threshold` elements); a 1-D one coloured by who wrote
    each index."""
    if sources is None or array.ndim != 1 or array.size > threshold:
        return Text(np.array2string(array, separator=", ", threshold=threshold, edgeitems=3, precision=4,
                                    max_line_width=100))
    text = Text("[")
    for i, value in enumerate(array.tolist()):
        source = sources[i]
        text.append(", " if i else "").append(str(value), style="dim" if source is None else _colour(source))
    return text.append("]")
