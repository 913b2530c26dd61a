"""What `meshsim explain` says about each collective's protocol, and the messages of a trace grouped by step.

A collective without a text of its own here is explained from its `Definition`: the summary line of its
docstring, its parameters, and its device-variance rule; its messages from the trace, grouped by the
`phase` and `step` their detail carries (or by the time they were sent).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rich.table import Table
from rich.text import Text

import collectives
import sim
from collectives import Definition, Vma
from scenarios.cli._arrays import colour as _colour
from scenarios.cli._units import seconds as _seconds
from scenarios.cli._units import span as _span

_VMA = {
    Vma.REDUCE: "every member of a group ends with the same value: the result is invariant along the axis",
    Vma.KEEP: "each device ends with a value of its own: the result varies along the axis",
    Vma.INTRODUCE: "the operand is the same on every member (invariant); each device's result is its own "
                   "(varying)",
    Vma.INDEX: "the result depends only on the device's position along the axis",
}
_ELEMENT = {"psum": "adds", "psum_invariant": "adds", "pmean": "adds, then divides by the group size",
            "pmax": "takes the element-wise maximum of", "pmin": "takes the element-wise minimum of",
            "psum_scatter": "adds"}
_ALGORITHMS = {
    "direct": "direct: every member sends its whole operand to every member (itself included) in one step; "
              "each member folds the arrivals in group order, so every member computes the same bits.",
    "ring": "ring: the operand is cut into n chunks. Reduce-scatter: in each of n - 1 steps every member "
            "passes one partial chunk to the next member, which adds its own term, so member c ends with "
            "chunk c complete. All-gather: in n - 1 more steps the complete chunks travel around the ring. "
            "Each message is 1/n of the operand: 2(n - 1) small steps instead of one big one.",
    "recursive_doubling": "recursive doubling: in step s every member exchanges its partial result with the "
                          "member whose group index differs in bit s (index XOR 2^s) and combines the two, "
                          "lower index first; after log2(n) steps every member holds the whole reduction.",
    "bidirectional_ring": "bidirectional ring: the ring algorithm on each half of the operand at once, the first "
                          "half passed to the next member, the second half to the previous one, so both "
                          "directions of every link carry half: 2(n - 1) steps of two messages of 1/(2n).",
    "rabenseifner": "Rabenseifner: a reduce-scatter by recursive halving (at distance n/2, n/4, ..., 1 each member "
                    "keeps the half of its chunks that holds its own and sends the other half to index XOR "
                    "distance), then an all-gather by recursive doubling: 2 log2(n) steps.",
    "per_axis": "per axis: the ring algorithm along each named mesh axis in turn, the last named first (over one "
                "axis: the ring algorithm).",
    "recursive_halving": "recursive halving: at distance n/2, n/4, ..., 1 each member keeps the half of its chunks "
                         "that holds its own and sends the other half to index XOR distance, which adds it: "
                         "log2(n) steps of halving messages.",
    "auto": "auto: the fastest algorithm for the call's bytes, group and network by the cost model "
            "(collectives._cost); the run records its pick.",
}


def call_text(op: str, params: dict[str, Any]) -> str:
    """The call as it reads in Python, e.g. `psum(x, axis_name='i', algorithm='ring')`."""
    arrays = collectives.definition(op).arrays
    return f"{op}({', '.join([*arrays, *(f'{k}={v!r}' for k, v in params.items())])})"


def protocol(definition: Definition, params: dict[str, Any], group_size: int) -> list[str]:
    """Paragraphs on what the collective computes and which messages it sends, for one call."""
    summary = " ".join((definition.function.__doc__ or definition.name).split("\n\n")[0].split())
    told = [f"{definition.name}: {summary}", f"Result: {_VMA[definition.vma]}."]
    special = _SPECIAL.get(definition.name)
    if special is not None:
        told += special(params, group_size)
    elif "algorithm" in params or any(p.name == "algorithm" for p in definition.params):
        told.append(f"Algorithm {_ALGORITHMS.get(params.get('algorithm', 'direct'), '')}")
    unset = [f"{p.name}={p.default!r}" for p in definition.params if not p.required and p.name not in params]
    if unset:
        told.append(f"Defaults in effect: {', '.join(unset)}.")
    return told


_MOVES = {  # the message patterns of the collectives that move data unchanged, by algorithm
    "ring": "ring: in each of n - 1 steps every member passes one block to the next member.",
    "bidirectional_ring": "bidirectional ring: in each of n - 1 steps every member passes the first half of a "
                          "block to the next member and the second half of another to the previous one.",
    "recursive_doubling": "recursive doubling: in step s every member swaps all the blocks it holds with the "
                          "member whose group index differs in bit s; log2(n) steps.",
    "per_axis": "per axis: the exchange runs along each named mesh axis in turn, the last named first.",
    "pairwise": "pairwise: in step k member i sends its chunk for member i + k and receives member i - k's.",
    "bruck": "Bruck: the chunks are rotated, then in step k every slot whose index has bit k set travels, "
             "packed into one message, to member i + 2^k; a last rotation puts them in place: ceil(log2(n)) "
             "steps.",
    "auto": "auto: the fastest algorithm by the cost model (collectives._cost); the run records its pick.",
}


def _moves(params: dict[str, Any]) -> list[str]:
    """The algorithm's paragraph when it is not 'direct' (whose protocol the collective's text describes)."""
    algorithm = params.get("algorithm", "direct")
    return [] if algorithm == "direct" else [f"Algorithm {_MOVES.get(algorithm, algorithm)}"]


def _all_gather(params: dict[str, Any], n: int) -> list[str]:
    axis, tiled = params.get("axis", 0), params.get("tiled", False)
    where = (f"rows k*m:(k+1)*m of axis {axis} (tiled: the blocks are concatenated)" if tiled
             else f"index k of a new axis {axis} (untiled: the blocks are stacked)")
    return [f"Protocol: every device sends its whole operand to each of the {n} members of its group "
            f"(the copy to itself is local and takes no time). The block of group member k lands at {where}, "
            f"so every member ends with the same gathered array.", *_moves(params)]


def _all_to_all(params: dict[str, Any], n: int) -> list[str]:
    split, concat = params.get("split_axis"), params.get("concat_axis")
    how = "concatenated" if params.get("tiled") else "stacked (untiled: axis split_axis of size n disappears)"
    return [f"Protocol: each device cuts its operand along split_axis={split} into {n} chunks; chunk j goes to "
            f"group member j. The receiver puts the chunk from member k at block k along concat_axis={concat}, "
            f"{how}. Device j ends with chunk j of every member: the mapped axis and axis {split} trade places.",
            *_moves(params)]


def _reduction(params: dict[str, Any], n: int, op: str) -> list[str]:
    algorithm = params.get("algorithm", "direct")
    told = [f"Element-wise, it {_ELEMENT[op]} the operands of the {n} members of each group.",
            f"Algorithm {_ALGORITHMS[algorithm]}"]
    if op == "psum_scatter":
        told.append("psum_scatter keeps only chunk j of the sum on member j: direct sends chunk j of every "
                    "operand to member j, which folds them; ring runs only the reduce-scatter half.")
    return told


def _ppermute(params: dict[str, Any], n: int) -> list[str]:
    pairs = ", ".join(f"{s} -> {d}" for s, d in params.get("perm", ()))
    return [f"Protocol: each (source, destination) pair of perm ({pairs}) is one message along the axis: the "
            f"device at axis index source sends its whole operand to the device at axis index destination. "
            f"A device that is no pair's destination gets zeros. Every message goes at once: one step."]


_SPECIAL: dict[str, Callable[[dict[str, Any], int], list[str]]] = {
    "all_gather": _all_gather, "all_to_all": _all_to_all, "ppermute": _ppermute,
    **{op: (lambda params, n, op=op: _reduction(params, n, op)) for op in _ELEMENT},
}


def step_groups(trace: Sequence[sim.MessageRecord]) -> list[tuple[str, list[tuple[int, sim.MessageRecord]]]]:
    """The messages (not local copies) with their trace positions, grouped by step in order of first send.

    A message whose detail names a `phase` or `step` (ring, recursive doubling) belongs to that step; the
    others are grouped by the time they were sent.
    """
    groups: dict[str, list[tuple[int, sim.MessageRecord]]] = {}
    for k, message in enumerate(trace):
        if message.kind != "message":
            continue
        detail = message.detail
        if "phase" in detail or "step" in detail:
            label = ", ".join(str(x) for x in (detail.get("phase"), f"step {detail['step']}" if "step" in detail
                                               else None) if x is not None)
        else:
            label = f"sent at {_seconds(message.send_time_s)}"
        groups.setdefault(label, []).append((k, message))
    return list(groups.items())


_LOCATED = ("slice", "rows", "src_rows", "axis", "phase", "step")


def message_table(messages: Sequence[tuple[int, sim.MessageRecord]], sizes: dict[int, int] | None = None) -> Table:
    """One row per message, in its sender's colour: who to whom, bytes, when, and where it lands."""
    table = Table(show_edge=False, pad_edge=False)
    for column in ("#", "from", "to", "bytes", "sent", "arrived", "carries"):
        table.add_column(column, justify="right" if column in ("#", "from", "to", "bytes") else "left")
    for k, m in messages:
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


def array_text(array: np.ndarray, sources: Sequence[int | None] | None = None) -> Text:
    """The array as `[1, 3, 0, 0]` (summarised beyond 64 elements); a 1-D one coloured by who wrote each index."""
    if sources is None or array.ndim != 1 or array.size > 64:
        return Text(np.array2string(array, separator=", ", threshold=64, edgeitems=3, precision=4,
                                    max_line_width=100))
    text = Text("[")
    for i, value in enumerate(array.tolist()):
        source = sources[i]
        text.append(", " if i else "").append(str(value), style="dim" if source is None else _colour(source))
    return text.append("]")
