"""`ppermute`: each (source, destination) pair moves the source's array to the destination; others get zeros."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from functools import partial
from itertools import chain
from typing import Any

import numpy as np

import layouts
import sim
from collectives import _batch_rules as batch_rules
from collectives._algorithm import direct_only
from collectives._algorithms import check_algorithm, resolve
from collectives._common import (
    group_of,
    header_of,
    map_tree,
    operand,
    out_layout_of,
    pack_slice,
    row_major_everywhere,
    same_operands,
    unpack_into,
)
from collectives._definition import AXIS_NAME, PERM, Definition, JaxBinding, Transposition, Vma
from collectives._facts import WHOLE, Peers, Sizes, Sweep
from collectives._strategy import Axes, Sample, any_shape
from collectives._vma import typed
from sim._frozen import quick_init

_OP = "ppermute"

Perm = tuple[tuple[int, int], ...]


@quick_init
@dataclass(frozen=True, slots=True)
class _Args:
    buffer: sim.Buffer
    perm: Perm
    out_layout: Any = None


def ppermute(x: Any, axis_name: Any, perm: Any, *, algorithm: str = "direct", out_layout: Any = None) -> Any:
    """Send `x` from axis index `source` to axis index `destination` for every pair in `perm`.

    Indices are positions along `axis_name` as `axis_index` numbers them (for a tuple of names, row-major
    in the tuple's order); negative ones count from the end. No index may be a source twice or a
    destination twice. A device that is no pair's destination gets zeros. `x` may be a pytree.

    `x` may sit in memory in any layout and is sent straight from memory; the result is written in
    `out_layout` (a `layouts.Layout`, default row-major), an arrival in another order unpacked by a
    timed step. Values never change. `algorithm` is 'direct' (every pair one message, all at once) or
    'auto' (which picks 'direct').

    JAX 0.10.2 numbers a tuple `axis_name` whose names are not in mesh order differently here (by sorted
    device id, unlike its own `axis_index` and `all_gather`: FINDINGS.md 29); the simulator keeps
    `axis_index`'s numbering, as JAX's main branch does (which raises there by default).

    Example on a 4-device mesh {'x': 4}: device d holds [d + 1]; `ppermute(x, 'x', [(0, 1), (1, 2),
    (2, 3), (3, 0)])` gives [4], [1], [2], [3]; with `perm=[(0, 2)]` it gives [0], [0], [1], [0].

    Raises:
        InvalidTypeError: `perm` not a sequence of pairs of ints; a non-numeric x.
        InvalidArgumentError: unknown axis name, an index out of range, a repeated source or destination
            (naming the pair), shapes or dtypes that differ between devices, an `out_layout` of another
            rank than x, an unknown algorithm.
    """
    if isinstance(x, np.ndarray):  # an array is a tree of one leaf
        context = sim.current()
        found = context.shared.get(("ppermute params", id(perm), axis_name)) if type(axis_name) is str else None
        params = found[1] if found is not None and found[0] is perm else _params(context, axis_name, perm)
        return typed(PPERMUTE, axis_name, [x], partial(_leaf, x, axis_name, perm, out_layout, algorithm, context),
                     params, context=context)
    return _ppermute(x, axis_name, perm, out_layout, algorithm)


def _params(context: sim.DeviceContext, axis_name: Any, perm: Any) -> tuple:
    """`(("axis_name", axis_name), ("perm", perm))`, the call's parameters as the program records them: one
    tuple per run for an axis name and a permutation every call passes as the same object (the entry keeps
    `perm` alive, so its id is not reused), rather than three new tuples per device and call."""
    if type(axis_name) is not str:
        return (("axis_name", axis_name), ("perm", perm))
    key = ("ppermute params", id(perm), axis_name)
    found = context.shared.get(key)
    if found is not None and found[0] is perm:
        return found[1]
    params = (("axis_name", axis_name), ("perm", perm))
    context.shared[key] = (perm, params)
    return params


def _ppermute(x: Any, axis_name: Any, perm: Any, out_layout: Any = None, algorithm: str = "direct") -> Any:
    params = (("axis_name", axis_name), ("perm", perm))  # as the program records them: sorted by name
    if isinstance(x, np.ndarray):  # an array is a tree of one leaf
        return typed(PPERMUTE, axis_name, [x], lambda: _leaf(x, axis_name, perm, out_layout, algorithm), params)
    call = lambda leaf: typed(PPERMUTE, axis_name, [leaf], lambda: _leaf(leaf, axis_name, perm, out_layout,
                                                                          algorithm), params)
    return map_tree(call, x)


def _leaf(x: Any, axis_name: Any, perm: Any, out_layout: Any, algorithm: str = "direct",
          context: sim.DeviceContext | None = None) -> np.ndarray:
    if context is None:
        context = sim.current()
    group = context.groups.get(axis_name) if type(axis_name) is str else None  # `group_of`'s look-up, here
    if group is None:
        context, group = group_of(_OP, axis_name, None)
    # a numeric array is its own operand; an array made from a memory view (a program's value) is found by
    # that view, unlike its plain copy
    plain = isinstance(x, np.ndarray)
    array = x if plain and x.dtype in layouts.NUMPY_NUMBERS else operand(_OP, context.device, "x", x)
    members = group.members
    found = context.shared.get(("ppermute", id(perm), len(members), algorithm, axis_name)) \
        if type(algorithm) is str and type(axis_name) is str else None  # `_checked_perm`'s entry, looked up here
    if found is not None and found[0] is perm and found[3] is members:
        pairs, params, same = found[1], found[2], found[4]
    else:
        pairs, params, same = _checked_perm(context, group, perm, axis_name, algorithm)
    memory = context.memory
    buffer = (memory.find(x) if plain else None) or memory.resident(x if plain else array)
    args = _Args(buffer, pairs, None if out_layout is None else out_layout_of(_OP, context.device, out_layout,
                                                                               array.ndim))
    return context.collective(sim.Collective(_OP, group, params, args, _protocol, same, _together))


def _checked_perm(context: sim.DeviceContext, group: sim.Group, perm: Any, axis_name: Any, algorithm: Any
                  ) -> tuple[Perm, tuple, Any]:
    """`check_algorithm`, then `check_perm`; the call's parameters; and the group check (`same_operands`).
    Once per run for an axis name, an algorithm name and a permutation (one object that every device passes,
    or equal ones each device builds for itself), their parameters then one object, which the rendezvous
    compares by identity; and the group check once more for each group of other members."""
    size, members = len(group.members), group.members
    key = ("ppermute", id(perm), size, algorithm, axis_name) if isinstance(algorithm, str) and \
        isinstance(axis_name, (str, tuple)) else None
    found = context.shared.get(key) if key is not None else None
    if found is not None and found[0] is perm:  # the entry keeps `perm` alive, so its id is not reused
        return found[1], found[2], found[4] if found[3] is members else _same(context, group)
    check_algorithm(_OP, context.device, algorithm, size, ALGORITHMS)
    given = _pairs(context.device, perm)  # Python ints: equal permutations, equal tuples
    equal = context.shared.get(("ppermute pairs", given, size, algorithm, axis_name)) if key is not None else None
    if equal is not None:
        pairs, params = equal
    else:
        pairs = check_perm(context.device, given, size, axis_name)
        params = (("axis_name", axis_name), ("perm", pairs), ("algorithm", algorithm))
        if key is not None:
            context.shared[("ppermute pairs", given, size, algorithm, axis_name)] = (pairs, params)
    same = _same(context, group)
    if key is not None:
        context.shared[key] = (perm, pairs, params, members, same)
    return pairs, params, same


def _same(context: sim.DeviceContext, group: sim.Group) -> Any:
    """The group check `same_operands` of the group, made once per run for the members of a group."""
    key = ("ppermute same", id(group.members))
    found = context.shared.get(key)
    if found is not None and found[0] is group.members:
        return found[1]
    check = same_operands(_OP, group)
    context.shared[key] = (group.members, check)
    return check


def check_perm(device: int, perm: Any, size: int, axis_name: Any, op: str = _OP) -> Perm:
    """`perm` with indices in [0, size), or an error naming `op` and the offending pair. Pairs of plain ints
    in range, each index a source and a destination at most once, are checked as one array (a device that
    builds its own permutation of a thousand pairs checks it in well under a millisecond); any other `perm`
    is checked pair by pair, which finds the first offending one."""
    pairs = _pairs(device, perm, op)
    if pairs and len(pairs) <= size and max(map(max, pairs)) < size and min(map(min, pairs)) >= -size:
        ends = np.array(pairs, np.int64) % size
        if all(np.unique(ends[:, role]).size == len(pairs) for role in (0, 1)):
            return tuple(map(tuple, ends.tolist()))
    seen: dict[str, dict[int, int]] = {"source": {}, "destination": {}}
    for k, pair in enumerate(pairs):
        for role, index in zip(("source", "destination"), pair):
            if not -size <= index < size:
                raise sim.InvalidArgumentError(
                    f"device {device}: {op}: perm[{k}]={pair}: {role} {index} must be in [{-size}, {size}) for "
                    f"axis_name={axis_name!r} of size {size}")
            first = seen[role].setdefault(index % size, k)
            if first != k:
                raise sim.InvalidArgumentError(
                    f"device {device}: {op}: perm[{k}]={pair}: {role} {index % size} is already the {role} of "
                    f"perm[{first}]={pairs[first]}; each index may be a {role} at most once")
    return tuple((s % size, d % size) for s, d in pairs)


def _pairs(device: int, perm: Any, op: str = _OP) -> tuple[tuple[int, int], ...]:
    """`perm` as pairs of Python ints; an error unless it is a sequence of (source, destination) pairs of
    integers (numpy's included, bools not)."""
    try:
        pairs = tuple(map(tuple, perm))
    except TypeError:
        pairs = ((),)
    if set(map(len, pairs)) <= {2} and set(map(type, chain.from_iterable(pairs))) <= {int}:
        return pairs  # plain ints, as a permutation written in Python is: nothing to convert
    if not all(len(p) == 2 and all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in p)
               for p in pairs):
        raise sim.InvalidTypeError(f"device {device}: {op}: perm={perm!r} must be a sequence of "
                                   "(source, destination) pairs of ints")
    return tuple((int(s), int(d)) for s, d in pairs)


def _protocol(port: sim.Port, args: _Args) -> Generator:
    """Sources send; the destination unpacks the arrival into zeroed memory; everyone else keeps the zeros.

    What the call's members know alike (the algorithm, the pairs by endpoint, whether every operand and
    result is row-major) is worked out once per call; a row-major call sends straight from memory and
    writes each arrival with one copy, as `pack_slice` and `unpack_into` would, without their steps."""
    source = port.memory.view(args.buffer)
    sends, receives, plain = port.once("ppermute", lambda: _facts(port, args, source.nbytes))
    group = port.collective.group
    me, members = group.index, group.members
    if plain and port.once("ppermute pairs", lambda: port.pairs_apply()):
        return (yield from _paired(port, source, sends.get(me, ()), receives.get(me, ()), len(args.perm),
                                   args.out_layout))
    for src, dst in sends.get(me, ()):
        if plain:
            payload, header = source, _ROW_MAJOR_HEADERS[source.ndim]
        else:
            payload, header = yield from pack_slice(port, source, args.buffer.layout, pair=(src, dst))
        port.send(members[dst], payload, header=header, pair=(src, dst))
    out = port.memory.view(port.memory.alloc(source.dtype, source.shape, args.out_layout))
    arrivals = receives.get(me, ())
    if not (plain and arrivals):  # (a row-major arrival overwrites every element)
        out[...] = 0
    for src, dst in arrivals:
        message = yield port.recv(members[src])
        if plain:
            out[...] = message.payload
        else:
            yield from unpack_into(port, message, out, pair=(src, dst))
    return out


def _paired(port: sim.Port, source: np.ndarray, sends: list, arrivals: list, senders: int, out_layout: Any
            ) -> Generator:
    """`_protocol` of a row-major call whose messages go as one batch (`sim.engine._pairs`): the same
    messages, trace and times."""
    members = port.collective.group.members
    for src, dst in sends:
        port.send_pair(members[dst], source, senders, pair=(src, dst))
    out = port.memory.view(port.memory.alloc(source.dtype, source.shape, out_layout))
    if not arrivals:
        out[...] = 0
        return out
    out[...] = yield from port.recv_pair(senders)
    return out


def _together(gathering: sim.Gathering) -> sim.Joint | None:
    """The call run for its whole group at once (`sim.Pairs`) when every member sends one message and
    receives one (a permutation of the whole group, as a ring shift), every operand and result is row-major
    and the messages may go as one table; None otherwise (each member runs `_protocol`)."""
    group_args, order = gathering.args, gathering.order
    perm = group_args[0].perm
    if len(perm) != gathering.group.size or not gathering.one_table():
        return None
    row_major = layouts.Layout.row_major(len(group_args[0].buffer.shape))  # one instance per rank
    for args in group_args:
        if args.buffer.layout is not row_major or args.out_layout is not None:
            if not row_major_everywhere(group_args):
                return None
            break
    by_source = {pair[0]: pair for pair in perm}  # each member's pair: one tuple, shared by every call's trace
    details = [by_source[index] for index in order]
    targets = [pair[1] for pair in details]

    def fill() -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Each member's operand (a view of its memory) and its zeroed result, in the order the members'
        protocols would make them."""
        first = group_args[order[0]]
        resolve(gathering.port(), ALGORITHMS, dict(gathering.collective.params)["algorithm"], first.buffer.nbytes,
                ())
        payloads, outs = [], [None] * len(order)
        memories, members = gathering.calls.memories, gathering.group.members
        for index in order:
            args, memory = group_args[index], memories[members[index]]
            buffer = args.buffer
            payloads.append(memory.view(buffer))
            outs[index] = memory.alloc_view(buffer.dtype, buffer.shape) if args.out_layout is None else \
                memory.view(memory.alloc(buffer.dtype, buffer.shape, args.out_layout))
        return payloads, outs  # type: ignore[return-value]

    return sim.Pairs(gathering, targets, fill, {"pair": details})


def _facts(port: sim.Port, args: _Args, size_bytes: int) -> tuple[dict[int, list], dict[int, list], bool]:
    """The call's algorithm (resolved for the engine's record), the pairs of `perm` by source and by
    destination in perm order, and whether every member's operand and result are row-major."""
    resolve(port, ALGORITHMS, dict(port.collective.params)["algorithm"], size_bytes, ())
    sends: dict[int, list] = {}
    receives: dict[int, list] = {}
    for pair in args.perm:
        sends.setdefault(pair[0], []).append(pair)
        receives.setdefault(pair[1], []).append(pair)
    return sends, receives, row_major_everywhere(port.group_args)


_ROW_MAJOR_HEADERS = [header_of(tuple(range(rank))) for rank in range(33)]


def _transpose(t: Transposition) -> list:
    """The inverse permutation sends every cotangent back to its source; devices no pair reaches get zeros
    either way."""
    return [t.ops.ppermute(t.ct, t.params["axis_name"], [(dst, src) for src, dst in t.params["perm"]])]


def _strategy(st: Any, axes: Axes, **options: Any) -> Any:
    """A partial permutation of the axis indices, some written negatively, of an `x` of rank 0 to 3.

    A tuple axis_name is put in mesh order: JAX 0.10.2 numbers a tuple in another order differently (see
    `ppermute`), where the simulator follows `axis_index`."""
    names = axes.axis_name
    if isinstance(names, tuple):
        names = tuple(a for a in axes.mesh_shape if a in names)
    size = axes.group_size

    @st.composite
    def sample(draw: Any) -> Sample:
        sources = draw(st.lists(st.integers(0, size - 1), unique=True, max_size=size))
        targets = draw(st.permutations(range(size)))[: len(sources)]
        spell = lambda i: i - size if draw(st.booleans()) else i
        perm = [(spell(s), spell(t)) for s, t in zip(sources, targets)]
        return Sample({"axis_name": names, "perm": perm}, draw(any_shape(st, axes)).shapes)
    return sample()


def _teach(params: dict[str, Any], n: int) -> list[str]:
    pairs = ", ".join(f"{s} -> {d}" for s, d in params.get("perm", ()))
    return [f"Protocol: each (source, destination) pair of perm ({pairs}) is one message along the axis: the "
            f"device at axis index source sends its whole operand to the device at axis index destination. "
            f"A device that is no pair's destination gets zeros. Every message goes at once: one step."]


def _shift_by_one(axis_name: Any, n: int, algorithm: str) -> Any:
    """nccl-tests' SendRecv: every device sends to the next along the axis, round the ring."""
    perm = [(i, (i + 1) % n) for i in range(n)]
    return lambda x: ppermute(x, axis_name, perm, algorithm=algorithm)


ALGORITHMS = direct_only("direct: every (source, destination) pair is one message, all sent at once: one step.")

PPERMUTE = Definition(
    name="ppermute", function=ppermute, arrays=("x",), params=(AXIS_NAME, PERM), vma=Vma.KEEP,
    transpose=_transpose,
    jax=JaxBinding("ppermute", ("ppermute",), lambda jax, p: lambda x: jax.lax.ppermute(x, **p)),
    strategy=_strategy,
    batch=batch_rules.elementwise, algorithms=ALGORITHMS, reduction=None,
    sizes=Sizes(gathered=False, peers=Peers.ONE), sweep=Sweep("SendRecv", "whole", "1", _shift_by_one),
    drawing=WHOLE, teach=_teach,
)
