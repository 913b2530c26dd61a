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


def step_groups(trace: sim.Trace, indices: Sequence[int] | None = None) -> list[tuple[str, list[int]]]:
    """The messages (not local copies) of `trace` (of `indices` only, when given) by trace position, grouped
    by step in order of first send.

    A message whose detail names a `phase` or `step` (ring, recursive doubling) belongs to that step; the
    others are grouped by the time they were sent. Read from the trace's columns: no record is made.
    """
    kind, sent = trace.column("kind"), trace.column("send_time_s").tolist()
    phase, step = trace.detail_column("phase"), trace.detail_column("step")
    chosen = range(len(trace)) if indices is None else indices
    groups: dict[tuple, list[int]] = {}
    for k in chosen:
        if kind[k] == "message":
            key = (phase[k], step[k]) if phase[k] is not None or step[k] is not None else (sent[k],)
            groups.setdefault(key, []).append(k)
    return [(_step_label(key), ks) for key, ks in groups.items()]


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
