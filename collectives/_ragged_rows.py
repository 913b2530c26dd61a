"""ragged_all_to_all's direct exchange by rows, and its group check at once.

Where no slice needs work of its own (every operand and result row-major, so a slice is one contiguous run
at both ends; no sanitized skips; no arrival-order exploration; sending costs nothing but the links), each
member posts its non-empty slices as one row of messages (`sim.Port.send_slices`): slice i travels to
member i // per carrying the sender's `output_offsets[i]`, and each receiver writes what it takes at the
offsets its messages carry. The trace records, the times and the bytes are those of the message-by-message
protocol in `_ragged` (members that finish in the same instant may resume in another order: see
`sim.engine._slices`), which every other call keeps:

- a sanitized run, which leaves out the slices its violations name;
- arrival-order exploration (`last_arrival_wins`), where overlapping slices are written in arrival order,
  and perturbed runs, whose arrivals are stretched at random;
- `Costs.launch_s` or `Costs.per_message_s`, where each message is issued at a time of its own;
- any strided operand or result, whose slices are packed and unpacked by timed steps.

`valid_at_once` checks every rule of `_ragged._validate` with array operations over the whole group; only
a group that breaks one goes through the per-slice checks that name each violation.
"""

from __future__ import annotations

from collections.abc import Generator
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

import sim
from collectives._common import is_row_major

if TYPE_CHECKING:
    from collectives._ragged import _Args

_ONE_BY_ONE = 8  # a receiver writes fewer messages than this one by one, more in runs
_STAGED_BYTES = 1 << 16  # runs of messages this small on average are joined first, then copied into place


def by_rows(port: sim.Port) -> bool:
    """Whether this call's slices travel as rows (decided once per call, from what every member knows
    statically and the run's options)."""
    return port.once("ragged rows", lambda: _plain(port))


def _plain(port: sim.Port) -> bool:
    """No skips, no exploration or perturbation, no issue costs, every slice one contiguous run at both ends."""
    costs, transport = port.transport.costs, port.transport
    if port.last_arrival_wins or port.skipped or transport.order is not None:
        return False
    if costs.launch_s or costs.per_message_s:
        return False
    return all(is_row_major(a.operand.layout.major_to_minor)
               and is_row_major((a.out_layout or a.output.layout).major_to_minor) for a in port.group_args)


def exchange_rows(port: sim.Port, args: _Args, source: np.ndarray, per: int) -> Generator:
    """The direct exchange by rows: post the caller's non-empty slices, copy `output` into the result, then
    write every slice received at the offset it carries."""
    _send(port, args, source, per)
    memory = port.memory
    view = memory.view(memory.store(memory.view(args.output), args.out_layout or args.output.layout))
    payloads, headers = yield from port.recv_slices(int(np.count_nonzero(args.recv_sizes)))
    if payloads:
        write_rows(view, payloads, headers[:, 0], headers[:, 1])
    return view


def _send(port: sim.Port, args: _Args, source: np.ndarray, per: int) -> None:
    """One row: slice i (non-empty) to member i // per, its header the rows' landing offset and count."""
    keep = np.flatnonzero(args.send_sizes)
    counts = args.send_sizes[keep]
    starts, at = args.input_offsets[keep], args.output_offsets[keep]
    stops = starts + counts
    first, last, lands, ends = np.stack([starts, stops, at, at + counts]).tolist()
    port.send_slices(keep // per, source, starts, stops, np.stack([at, counts], 1), slice=keep.tolist(),
                     rows=list(zip(lands, ends)), src_rows=list(zip(first, last)))


def write_rows(view: np.ndarray, payloads: list[np.ndarray], at: np.ndarray, lengths: np.ndarray) -> None:
    """Write `payloads[k]` (`lengths[k]` rows) at row `at[k]` of `view` (the slices do not overlap): few
    one by one, many as runs of slices that follow each other in the output, each run with one copy."""
    if len(payloads) < _ONE_BY_ONE:
        for payload, start in zip(payloads, at.tolist()):
            view[start:start + len(payload)] = payload
        return
    order = np.argsort(at, kind="stable")
    if np.any(order[1:] < order[:-1]):
        at, lengths, payloads = at[order], lengths[order], list(map(payloads.__getitem__, order.tolist()))
    ends = at + lengths
    cuts = (np.flatnonzero(at[1:] != ends[:-1]) + 1).tolist()
    starts, stops = at.tolist(), ends.tolist()
    small = view.nbytes // max(len(view), 1) * int(lengths.sum()) < _STAGED_BYTES * len(payloads)
    for lo, hi in pairwise([0, *cuts, len(payloads)]):
        target = view[starts[lo]:stops[hi - 1]]
        if small and hi - lo > 1:  # many small slices: their bytes joined (each is one contiguous run), then copied
            target[...] = np.frombuffer(b"".join(payloads[lo:hi]), view.dtype).reshape(target.shape)
        else:
            np.concatenate(payloads[lo:hi], out=target)


def valid_at_once(args: list[Any], overlaps: bool) -> bool:
    """Whether the group's slices break none of the rules `_ragged._validate` checks (the members agree
    on dtypes, shapes and slice counts): sizes >= 0, send slices inside their operands, `send_sizes` the
    all_to_all of `recv_sizes`, receive slices inside the output and (unless `overlaps`) apart."""
    send = np.stack([a.send_sizes for a in args])
    start = np.stack([a.input_offsets for a in args])
    rows = np.array([a.operand.shape[0] for a in args], np.int64)[:, None]
    if (send < 0).any() or (start < 0).any() or (start + send > rows).any():
        return False
    n, k = send.shape
    per = k // n
    # receiver r's slice s * per + j is sender s's slice r * per + j
    mine = lambda table: table.reshape(n, n, per).transpose(1, 0, 2).reshape(n, k)
    recv = np.stack([a.recv_sizes for a in args])
    lands = mine(np.stack([a.output_offsets for a in args]))
    if (recv != mine(send)).any() or (lands < 0).any() or (lands + recv > args[0].output.shape[0]).any():
        return False
    if overlaps:
        return True
    live = recv > 0
    order = np.argsort(np.where(live, lands, np.iinfo(np.int64).max), axis=1, kind="stable")
    begin = np.take_along_axis(lands, order, 1)
    end = begin + np.take_along_axis(recv, order, 1)
    live = np.take_along_axis(live, order, 1)
    return not np.any((begin[:, 1:] < end[:, :-1]) & live[:, 1:] & live[:, :-1])
