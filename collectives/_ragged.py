"""`ragged_all_to_all`: slices of the operand's leading axis travel to where their senders say."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

import sim
from collectives import _batch_rules as batch_rules
from collectives._algorithms import check_algorithm, resolve
from collectives._common import group_of, operand, out_layout_of, pack_slice, received, same_across_group, unpack_into
from collectives._definition import (
    AXIS_INDEX_GROUPS,
    AXIS_NAME,
    Definition,
    JaxBinding,
    Transposition,
    Vma,
)
from collectives._facts import MOVES, Drawing, Sweep
from collectives._ragged_facts import ALGORITHMS, DIRECT, PAIRWISE, sweep_inputs, teach
from collectives._ragged_rows import by_rows, exchange_rows, valid_at_once
from collectives._ragged_strategy import INDEX_ARGS, strategy
from collectives._vma import typed

_OP = "ragged_all_to_all"


@dataclass(frozen=True)
class _Args:
    device: int
    operand: sim.Buffer
    output: sim.Buffer
    input_offsets: np.ndarray
    send_sizes: np.ndarray
    output_offsets: np.ndarray
    recv_sizes: np.ndarray
    out_layout: Any = None
    algorithm: str = "direct"


def ragged_all_to_all(operand: Any, output: Any, input_offsets: Any, send_sizes: Any, output_offsets: Any,
                      recv_sizes: Any, *, axis_name: Any, axis_index_groups: Any = None, algorithm: str = "direct",
                      out_layout: Any = None) -> np.ndarray:
    """Send rows `input_offsets[i]:+send_sizes[i]` of `operand` to member `i // (K / group size)`.

    There they are written at the sender's `output_offsets[i]` into a copy of the receiver's `output`;
    every row no slice writes keeps `output`'s value. `send_sizes` must equal the tiled all_to_all of
    `recv_sizes`.

    `operand` and `output` may sit in memory in any layout: a slice whose bytes are one contiguous run
    is sent straight from memory, any other is packed first by a timed step. The result is laid out in
    `out_layout` (default: `output`'s layout, as the result takes `output`'s place), slices landing in
    strided regions unpacked by a timed step.

    `algorithm` chooses when the slices travel, never where they land: 'direct' (every slice at once),
    'pairwise' (n steps: at step k member i sends its slices for member i + k and receives those of
    member i - k before going on; step 0 is its own), or 'auto' (the faster by `collectives._cost`,
    recorded in `sim.CallRecord.algorithm`). Exploring arrival orders runs 'direct'.

    Example on a 2-device mesh {'x': 2} (the docs' example): device 0 has operand [1, 2, 2],
    input_offsets [0, 1], send_sizes [1, 2], output_offsets [0, 0], recv_sizes [1, 1]; device 1 has
    operand [3, 4, 0], input_offsets [0, 1], send_sizes [1, 1], output_offsets [1, 2], recv_sizes [2, 1];
    both outputs are [0, 0, 0, 0]. The results are [1, 3, 0, 0] and [2, 2, 4, 0].

    Raises:
        InvalidTypeError: offsets or sizes not 1-D integer arrays; operand and output of different dtypes.
        InvalidArgumentError: every slice out of its array, negative size, size disagreement, or overlap of
            two slices in one output, all listed at once with device, argument, slice index and rows; an
            unknown algorithm.
    """
    context, group = group_of(_OP, axis_name, axis_index_groups)
    device = context.device
    data, out = _data(device, operand, output)
    raw = [np.asarray(v) for v in (input_offsets, send_sizes, output_offsets, recv_sizes)]
    indices = [_index_array(device, name, value) for name, value in zip(INDEX_ARGS, raw)]
    if len({a.dtype for a in raw}) != 1:
        # XLA's verifier needs one index type for the four arrays
        raise sim.InvalidTypeError(
            f"device {device}: {_OP}: " + ", ".join(f"{n} is {a.dtype}" for n, a in zip(INDEX_ARGS, raw))
            + "; the four offset and size arrays must share one integer dtype"
        )
    lengths = {len(a) for a in indices}
    if len(lengths) != 1:
        raise sim.InvalidArgumentError(
            f"device {device}: {_OP}: " + ", ".join(f"len({n})={len(a)}" for n, a in zip(INDEX_ARGS, indices))
            + " must all be equal"
        )
    if len(indices[0]) % group.size:
        raise sim.InvalidArgumentError(
            f"device {device}: {_OP}: len(input_offsets)={len(indices[0])} must be divisible by the group size "
            f"{group.size} of axis_name={axis_name!r}"
        )
    memory = context.memory
    out_layout = out_layout_of(_OP, device, out_layout, out.ndim)
    check_algorithm(_OP, device, algorithm, group.size, ALGORITHMS)
    args = _Args(device, memory.resident(data), memory.resident(out), *indices, out_layout=out_layout,
                 algorithm=algorithm)
    params = (("axis_name", axis_name), ("slices", len(indices[0])), ("algorithm", algorithm))
    check = _validate(group, overlaps=context.last_arrival_wins)
    compute = lambda: context.collective(sim.Collective(_OP, group, params, args, _protocol, check))
    originals = [operand, output, input_offsets, send_sizes, output_offsets, recv_sizes]
    return typed(RAGGED_ALL_TO_ALL, axis_name, originals, compute,
                 {"axis_name": axis_name, "axis_index_groups": axis_index_groups})


def _data(device: int, operand_value: Any, output_value: Any) -> tuple[np.ndarray, np.ndarray]:
    data = operand(_OP, device, "operand", operand_value)
    out = operand(_OP, device, "output", output_value)
    if data.ndim == 0 or out.ndim == 0:
        raise sim.InvalidArgumentError(f"device {device}: {_OP}: operand and output must have rank >= 1")
    if data.dtype != out.dtype or data.shape[1:] != out.shape[1:]:
        abstract = sim.memory.is_abstract(data), sim.memory.is_abstract(out)
        rule = "; they must share the dtype and every dimension after the first"
        if abstract[0] != abstract[1]:
            rule += ", and be both abstract (a sim.ShapeDtypeStruct each) or both concrete (arrays with values)"
        raise sim.InvalidTypeError(
            f"device {device}: {_OP}: operand is {_described(data)} and output is {_described(out)}{rule}")
    return data, out


def _described(array: np.ndarray) -> str:
    """`array`'s dtype (an abstract one's logical dtype, marked abstract) and shape, for an error."""
    text = f"{sim.memory.logical_dtype(array.dtype)}{list(array.shape)}"
    return f"abstract {text}" if sim.memory.is_abstract(array) else text


def _index_array(device: int, name: str, value: Any) -> np.ndarray:
    array = np.asarray(value)
    if sim.memory.is_abstract(array):
        raise sim.memory.AbstractValueError(
            f"device {device}: {_OP}: {name} is abstract (a shape and dtype, no values); the offsets and sizes "
            f"that steer the exchange must be concrete integers, only operand and output may be abstract")
    if array.dtype.kind not in "iu":
        raise sim.InvalidTypeError(
            f"device {device}: {_OP}: {name} has dtype {array.dtype}; it must be an integer type"
        )
    if array.ndim != 1 or array.shape[0] < 1:
        raise sim.InvalidArgumentError(
            f"device {device}: {_OP}: {name} has shape {array.shape}; it must be rank 1 with at least one entry"
        )
    return array.astype(np.int64)


def _validate(group: sim.Group, overlaps: bool = False):
    """Every rule the docs leave undefined, checked over the whole group at once; with `overlaps`, slices
    landing on the same output rows are allowed (the simulation writes them in arrival order).

    A broken slice names itself as (sender's group index, sender's slice) in its violation's `skip`: a
    sanitized run leaves it out (not sent, not received), so the receiver keeps `output`'s rows there.
    """
    def check(args: list[_Args]) -> list[sim.Violation]:
        kinds = [f"{a.operand.dtype}{list(a.operand.shape[1:])}" for a in args]
        violations = same_across_group(_OP, group.members, kinds, "operand's dtype and trailing shape")
        violations += same_across_group(_OP, group.members, [a.output.shape for a in args], "output's shape")
        violations += same_across_group(_OP, group.members, [len(a.send_sizes) for a in args], "len(send_sizes)")
        if violations or valid_at_once(args, overlaps):
            return violations
        for s, a in enumerate(args):
            violations += _check_sends(s, a)
        for r, _ in enumerate(args):
            violations += _check_receives(r, args, group.members, overlaps)
        return violations
    return check


def _check_sends(s: int, a: _Args) -> list[sim.Violation]:
    """The send slices of group member `s` that are negative or leave the operand."""
    rows = a.operand.shape[0]
    found = []
    for i, (offset, size) in enumerate(zip(a.input_offsets, a.send_sizes)):
        where, skip = f"device {a.device}, slice {i}", frozenset({(s, i)})
        if size < 0:
            found.append(sim.Violation(a.device, "negative size", f"{where}: send_sizes[{i}]={size} must be >= 0",
                                       skip=skip))
        elif offset < 0 or offset + size > rows:
            found.append(sim.Violation(a.device, "out of bounds", f"{where}: input_offsets[{i}]={offset} plus "
                                       f"send_sizes[{i}]={size} runs outside operand rows [0, {rows})",
                                       (int(offset), int(offset + size)), skip))
    return found


def _incoming(r: int, args: list[_Args]) -> list[tuple[int, int, int, int]]:
    """(slice j on receiver r, sender's group index s, sender's slice i, offset) for every incoming slice."""
    per = len(args[r].recv_sizes) // len(args)
    return [(s * per + k, s, r * per + k, int(args[s].output_offsets[r * per + k]))
            for s in range(len(args)) for k in range(per)]


def _check_receives(r: int, args: list[_Args], members: tuple[int, ...],
                    overlaps: bool = False) -> list[sim.Violation]:
    """The receive slices of group member `r` that are negative, disagree with their sender, leave the
    output or (unless `overlaps` are allowed) overlap another."""
    a = args[r]
    rows = a.output.shape[0]
    found, written = [], []
    for j, s, i, offset in _incoming(r, args):
        size, sent = int(a.recv_sizes[j]), int(args[s].send_sizes[i])
        where, skip = f"device {a.device}, slice {j}", frozenset({(s, i)})
        if size < 0:
            found.append(sim.Violation(a.device, "negative size", f"{where}: recv_sizes[{j}]={size} must be >= 0",
                                       skip=skip))
            continue
        if size != sent:
            found.append(sim.Violation(
                a.device, "size mismatch", f"{where}: recv_sizes[{j}]={size} but device {members[s]} sends "
                f"send_sizes[{i}]={sent}; send_sizes must equal the all_to_all of recv_sizes",
                (offset, offset + size), skip))
        if offset < 0 or offset + size > rows:
            found.append(sim.Violation(
                a.device, "out of bounds", f"{where}: output_offsets[{i}]={offset} of device {members[s]} plus "
                f"recv_sizes[{j}]={size} runs outside output rows [0, {rows})", (offset, offset + size), skip))
        elif size:
            written.append((offset, offset + size, j, members[s], (s, i)))
    if overlaps:
        return found
    written.sort()
    for (start1, stop1, j1, src1, skip1), (start2, stop2, j2, src2, skip2) in pairwise(written):
        if start2 < stop1:
            found.append(sim.Violation(
                a.device, "overlap", f"device {a.device}: slice {j1} (from device {src1}, output rows [{start1}, "
                f"{stop1})) and slice {j2} (from device {src2}, output rows [{start2}, {stop2})) overlap in rows "
                f"[{start2}, {min(stop1, stop2)})", (start2, min(stop1, stop2)), frozenset({skip1, skip2})))
    return found


def _protocol(port: sim.Port, args: _Args):
    """Each non-empty slice is one message carrying its rows and the sender's output offset: all at once
    ('direct'), or to member i + k and from member i - k at step k ('pairwise')."""
    source = port.memory.view(args.operand)
    members, n = port.group.members, port.group.size
    per = len(args.send_sizes) // n
    algorithm = resolve(port, ALGORITHMS, args.algorithm, source.nbytes, (n,))
    if algorithm is PAIRWISE and not port.last_arrival_wins:
        view = port.memory.view(port.memory.store(port.memory.view(args.output), args.out_layout or args.output.layout))
        for k in range(n):
            yield from _send_slices(port, args, source, per, (port.group.index + k) % n, step=k)
            yield from _receive_slices(port, args, view, per, (port.group.index - k) % n)
        return view
    if algorithm is DIRECT and by_rows(port):  # no slice needs work of its own (`collectives._ragged_rows`)
        return (yield from exchange_rows(port, args, source, per))
    for peer in range(n):
        yield from _send_slices(port, args, source, per, peer)
    result = port.memory.store(port.memory.view(args.output), args.out_layout or args.output.layout)
    view = port.memory.view(result)
    if port.last_arrival_wins:
        yield from _write_by_arrival(port, args, view, members, per)
        return view
    for peer in range(n):
        yield from _receive_slices(port, args, view, per, peer)
    return view


def _send_slices(port: sim.Port, args: _Args, source: np.ndarray, per: int, peer: int, **detail):
    """Send the caller's non-empty slices for group member `peer` (those a sanitized run keeps); an empty slice
    to another member costs the time of issuing a send where the network's costs say this XLA pays for empty
    slices (`sim.Costs(empty_slices='pay')`)."""
    members, me, skipped = port.group.members, port.group.index, port.skipped
    for i in range(peer * per, (peer + 1) * per):
        offset, size = args.input_offsets[i], args.send_sizes[i]
        if size and (me, i) not in skipped:
            at = int(args.output_offsets[i])
            payload, header = yield from pack_slice(port, source[offset:offset + size], args.operand.layout, slice=i)
            port.send(members[peer], payload, tag=i % per, header={"offset": at, **header},
                      slice=i, rows=(at, at + int(size)), src_rows=(int(offset), int(offset + size)), **detail)
        elif not size and peer != me and port.pays_empty_slices:  # a send issued for an empty slice
            port.issue(1)


def _receive_slices(port: sim.Port, args: _Args, view: np.ndarray, per: int, peer: int):
    """Write the slices from group member `peer` at the offsets their sender gave."""
    members, me, skipped = port.group.members, port.group.index, port.skipped
    for j in range(peer * per, (peer + 1) * per):
        if args.recv_sizes[j] and (peer, me * per + j % per) not in skipped:  # slice j is peer's me*per + j%per
            message = yield port.recv(members[peer], tag=j % per)
            at = message.header["offset"]
            yield from unpack_into(port, message, view[at:at + len(received(message))], slice=j)


def _write_by_arrival(port: sim.Port, args: _Args, view: np.ndarray, members: tuple[int, ...], per: int):
    """Receive every slice, then write them in the order they arrived, so that where two slices land on
    the same rows (allowed only when the simulation says so) the last arrival wins."""
    arrived = []
    for j, size in enumerate(args.recv_sizes):
        if size:
            message = yield port.recv(members[j // per], tag=j % per)
            arrived.append((message.arrival_s, message.rank, j, message))
    for _, _, j, message in sorted(arrived, key=lambda entry: entry[:3]):
        at = message.header["offset"]
        yield from unpack_into(port, message, view[at:at + len(received(message))], slice=j)


# ---------------------------------------------------------------------------------------------- definition


def _transpose(t: Transposition) -> list:
    """Send the received rows back to the rows they were read from, adding where two slices read one row;
    the rows received are not in `output`, so their cotangent does not flow to it.

    JAX's rule (`_ragged_all_to_all_transpose`) writes the returned rows into the operand's rows, which
    keeps one cotangent where send slices overlap (FINDINGS.md); the sum here is the adjoint."""
    p, ops = t.params, t.ops
    _, _, input_offsets, send_sizes, output_offsets, recv_sizes = t.primal
    names = {"axis_name": p["axis_name"], "axis_index_groups": p["axis_index_groups"]}
    exchange = lambda a: ops.all_to_all(a, p["axis_name"], 0, 0, tiled=True,
                                        axis_index_groups=p["axis_index_groups"])
    received_at = exchange(output_offsets)
    operand_ct = output_ct = None
    if t.linear[0]:
        # Send slices may read the same operand rows (the docs constrain only the writes into `output`), so
        # the rows come back into a staging buffer, slice i in its own block of operand-many rows (shapes must
        # agree over the group), and are then added where they were read: writing them straight into the
        # operand's rows would keep one of two reads.
        operand = t.equation.inputs[0]
        n, index = operand.shape[0], np.asarray(send_sizes)
        staging = np.zeros((len(index) * n, *operand.shape[1:]), operand.dtype)
        staged = ops.ragged_all_to_all(t.ct, staging, received_at, recv_sizes,
                                       exchange((np.arange(len(index)) * n).astype(index.dtype)), send_sizes, **names)
        spans = [(i * n, int(o), int(k)) for i, (o, k) in enumerate(zip(np.asarray(input_offsets), index)) if k > 0]
        picked = np.concatenate([np.arange(at, at + k) for at, _, k in spans] or [np.zeros(0, int)]).astype(np.intp)
        rows = np.concatenate([np.arange(o, o + k) for _, o, k in spans] or [np.zeros(0, int)]).astype(np.intp)
        operand_ct = sim.apply("scatter_add", _scatter_add(rows), [np.zeros(operand.shape, operand.dtype),
                                                                   staged[picked]], {"index": rows})
    if t.linear[1]:
        keep = np.ones(t.ct.shape[0], bool)
        for start, size in zip(np.asarray(received_at), np.asarray(recv_sizes)):
            keep[start:start + size] = False
        output_ct = t.ct * keep.reshape((-1,) + (1,) * (t.ct.ndim - 1)).astype(t.ct.dtype)
    return [operand_ct, output_ct, None, None, None, None]


def _scatter_add(rows: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """`base` with `update`'s rows added at `rows` (repeats add up): the transposer's 'scatter_add'."""
    def run(base: np.ndarray, update: np.ndarray) -> np.ndarray:
        out = np.array(base, copy=True)
        np.add.at(out, rows, update)
        return out
    return run


RAGGED_ALL_TO_ALL = Definition(
    name="ragged_all_to_all", function=ragged_all_to_all, arrays=("operand", "output", *INDEX_ARGS),
    index_arrays=INDEX_ARGS, params=(AXIS_NAME, AXIS_INDEX_GROUPS), vma=Vma.KEEP, keeps="output",
    transpose=_transpose,
    jax=JaxBinding("ragged_all_to_all", ("ragged_all_to_all",),
                   lambda jax, p: lambda *arrays: jax.lax.ragged_all_to_all(*arrays, **p),
                   on_cpu="cpu lowering", cpu_note="dense all_to_alls"),
    strategy=strategy,
    batch=batch_rules.ragged, algorithms=ALGORITHMS, reduction=None, sizes=MOVES,
    sweep=Sweep("AlltoAll", "split", "(n-1)/n", lambda axis_name, n, algorithm: lambda *arrays: ragged_all_to_all(
        *arrays, axis_name=axis_name, algorithm=algorithm), inputs=sweep_inputs),
    drawing=Drawing(slices=True), teach=teach,
)
