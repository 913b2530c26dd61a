"""`pbroadcast`: JAX's `lax.pbroadcast(x, axis_name, source)`, a broadcast of one member's array to its group.

Not the design note's "pbroadcast" (invariant -> varying, no data moves): that is `pvary` (see `_invariant.py`).
Here the member at axis index `source` sends its array and every member ends with it, by one of three
message patterns: 'direct' (the source sends to every member), 'tree' (a binomial tree: ceil(log2 n)
steps, every member that holds the array sends it on), 'ring' (a chain round the group from the source: each
member passes the array to the next, n - 1 steps, each link used once), or 'auto' (the fastest for the bytes
and network). The tree and the chain visit the members round the topology's ring where that crosses fewer
links than group order (`collectives._hop_order`): on a 4x4x4 torus the chain crosses 63 links, not 81.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

import sim
from collectives import _batch_rules as batch_rules
from collectives._algorithm import Algorithm, Pattern, auto_of, lg
from collectives._algorithms import candidates, check_algorithm
from collectives._common import group_of, map_tree, operand, out_layout_of, pack_slice, same_operands, unpack_values
from collectives._cost import fastest
from collectives._definition import AXIS_NAME, Definition, JaxBinding, Param, Transposition, Vma
from collectives._facts import MOVES, WHOLE
from collectives._hop_order import rooted_order
from collectives._strategy import Axes, Sample, any_shape
from collectives._vma import typed

_OP = "pbroadcast"

DIRECT = Algorithm(
    "direct", "direct: the source sends its whole array to every other member of its group, all at once: one step "
              "of n - 1 messages, all leaving the source.",
    lambda shape, b: [(Pattern("fan"), b, 1)] if math.prod(shape) > 1 else [], None, 1, reorders=False,
    closed_form=lambda p, n, alpha_s, beta_s: alpha_s + n * beta_s if p > 1 else 0.0)
TREE = Algorithm(
    "tree", "tree: a binomial tree rooted at the source: in step k every member that already holds the array "
            "(broadcast order below 2^k) sends it 2^k positions on, so ceil(log2 n) steps of n - 1 messages in all.",
    lambda shape, b: [(Pattern("tree", 1 << k), b, 1) for k in range(lg(math.prod(shape)))], None, 1,
    reorders=False, closed_form=lambda p, n, alpha_s, beta_s: lg(p) * (alpha_s + n * beta_s))
RING = Algorithm(
    "ring", "ring: a chain round the group from the source: each member passes the whole array on to the next "
            "once it has it, so n - 1 steps of one message each, every link of the ring used once.",
    lambda shape, b: [(Pattern("chain"), b, max(0, math.prod(shape) - 1))], None, 1, reorders=False,
    closed_form=lambda p, n, alpha_s, beta_s: (p - 1) * (alpha_s + n * beta_s))
ALGORITHMS = (DIRECT, TREE, RING, auto_of((DIRECT, TREE, RING)))


@dataclass(frozen=True)
class _Args:
    buffer: sim.Buffer
    source: int
    out_layout: Any = None


def pbroadcast(x: Any, axis_name: Any, source: int, *, algorithm: str = "direct", out_layout: Any = None) -> Any:
    """Every member of the group along `axis_name` gets the array of the member at axis index `source`.

    JAX's docs give its meaning as `psum(where(axis_index(axis_name) == source, x, zeros_like(x)),
    axis_name)`; the simulator copies the bytes (so -0.0 and NaN payloads arrive as sent, and bool stays
    bool). `x` may be a pytree (one broadcast per leaf) and may sit in memory in any layout; the result is
    written in `out_layout` (a `layouts.Layout`, default row-major). `algorithm` chooses the messages:
    'direct' (the source sends to each other member, one step), 'tree' (a binomial tree rooted at the
    source: in step k every member that holds the array sends it 2^k positions on, ceil(log2 n) steps),
    'ring' (a chain from the source round the group, each member passing the array on: n - 1 steps), 'auto'
    (the fastest for the bytes and the network; the pick is recorded in the call's record).

    The result is typed as JAX types it: varying along `axis_name`, like ppermute's (the values are equal
    on every member, but JAX's abstract evaluation keeps the operand's type; see FINDINGS.md).

    Example on a 4-device mesh {'i': 4}: device d holds [d, 10 * d]; `pbroadcast(x, 'i', 2)` gives [2, 20]
    on every device.

    Raises:
        InvalidArgumentError: an unknown axis name, `source` outside [0, n), shapes or dtypes that differ
            between members, an unknown algorithm, an `out_layout` of another rank than x.
        InvalidTypeError: a non-numeric x, a `source` that is not an int.
    """
    return map_tree(lambda leaf: typed(PBROADCAST, axis_name, [leaf], lambda: _leaf(leaf, axis_name, source,
                                                                                    out_layout, algorithm),
                                       {"axis_name": axis_name, "source": source}), x)


def _leaf(x: Any, axis_name: Any, source: Any, out_layout: Any, algorithm: str) -> np.ndarray:
    context, group = group_of(_OP, axis_name, None)
    device = context.device
    x = operand(_OP, device, "x", x)
    check_algorithm(_OP, device, algorithm, group.size, ALGORITHMS)
    source = check_source(_OP, device, source, group.size, axis_name)
    args = _Args(context.memory.resident(x), source, out_layout_of(_OP, device, out_layout, x.ndim))
    params = (("axis_name", axis_name), ("source", source), ("algorithm", algorithm))
    return context.collective(sim.Collective(_OP, group, params, args, _protocol, same_operands(_OP, group)))


def check_source(op: str, device: int, source: Any, size: int, axis_name: Any) -> int:
    """`source` as an axis index in [0, size), or an error naming the rule."""
    if not isinstance(source, (int, np.integer)) or isinstance(source, (bool, np.bool_)):
        raise sim.InvalidTypeError(f"device {device}: {op}: source={source!r} must be an int (an axis index)")
    if not 0 <= source < size:
        raise sim.InvalidArgumentError(
            f"device {device}: {op}: source={source} must be in [0, {size}) for axis_name={axis_name!r} of size "
            f"{size}")
    return int(source)


# ---------------------------------------------------------------------------------------------- protocol


def _protocol(port: sim.Port, args: _Args) -> Generator:
    """The source packs its array; members receive it, pass it on as the algorithm says,
    and write it into their result."""
    n, me = port.group.size, port.group.index
    view = port.memory.view(args.buffer)
    out = port.memory.view(port.memory.alloc(view.dtype, view.shape, args.out_layout))
    chosen = _resolve(port, dict(port.collective.params)["algorithm"], view.nbytes, args.source)
    order = _order(port, chosen, args.source)
    rank = order.index((me - args.source) % n)  # position in the broadcast order, the source first
    if rank == 0:
        payload, header = yield from pack_slice(port, view, args.buffer.layout, source=args.source)
    else:
        payload, header = None, None
    member = lambda r: port.group.members[(order[r] + args.source) % n]
    if chosen is RING:
        payload, header = yield from _ring(port, rank, n, payload, header, member)
    elif chosen is TREE:
        for step, gap in enumerate(_tree_gaps(n)):
            if rank < gap and rank + gap < n:  # ranks below 2^k hold the array after k steps
                port.send(member(rank + gap), payload, header=header, step=step)
            elif gap <= rank < 2 * gap:
                message = yield port.recv(member(rank - gap))
                payload, header = message.payload, message.header
    elif rank == 0:
        for target in range(1, n):
            port.send(member(target), payload, header=header)
    else:
        message = yield port.recv(member(0))
        payload, header = message.payload, message.header
    order = header.get("major_to_minor", tuple(range(view.ndim)))
    physical = payload.reshape([view.shape[k] for k in order])
    yield from unpack_values(port, physical.transpose(np.argsort(order)), order, out)
    return out


def _order(port: sim.Port, chosen: Algorithm, source: int) -> tuple[int, ...]:
    """The members (listed from the source on) in the order the tree or chain visits them: round the topology's
    ring where that crosses fewer links (`collectives._hop_order.rooted_order`), else group order."""
    n = port.group.size
    if chosen is DIRECT:
        return tuple(range(n))
    members = port.group.members
    listed = members[source:] + members[:source]
    kind = "chain" if chosen is RING else "tree"
    return port.once(("broadcast order", source), lambda: rooted_order(port.mesh, listed, kind))


def _tree_gaps(n: int) -> list[int]:
    """The distance each step of the binomial tree sends over (2^k in step k); ranks below it send."""
    return [1 << k for k in range(math.ceil(math.log2(n)))] if n > 1 else []


def _ring(port: sim.Port, rank: int, n: int, payload: Any, header: Any, member: Any) -> Generator:
    """The chain: rank r takes the array from r - 1 and passes it to r + 1; the last rank keeps it."""
    if rank > 0:
        message = yield port.recv(member(rank - 1))
        payload, header = message.payload, message.header
    if rank + 1 < n:
        port.send(member(rank + 1), payload, header=header, step=rank)
    return payload, header


def _resolve(port: sim.Port, name: str, size_bytes: int, source: int) -> Algorithm:
    """The record this call runs: the one named `name`, or for 'auto' the cost model's pick, timed on the
    group listed from the source on (the rooted steps start at index 0)."""
    def pick() -> str:
        asked = next(a for a in ALGORITHMS if a.name == name)
        if not asked.auto:
            return asked.name
        n, members = port.group.size, port.group.members
        choices = candidates(ALGORITHMS, n, (n,))
        return fastest(choices, port.mesh, members[source:] + members[:source], (n,), size_bytes).name
    chosen = port.once("algorithm", pick)
    return next(a for a in ALGORITHMS if a.name == chosen)


# ---------------------------------------------------------------------------------------------- definition


def _transpose(t: Transposition) -> list:
    """JAX's rule: the source's cotangent is the sum of every member's; the others' is zero."""
    axis_name, source = t.params["axis_name"], t.params["source"]
    total = t.ops.psum(t.ct, axis_name)
    return [np.where(t.ops.axis_index(axis_name) == source, total, np.zeros_like(total))]


def _strategy(st: Any, axes: Axes, **options: Any) -> Any:
    """Any `x` of rank 0 to 3 and any source index of the group."""
    return st.integers(0, axes.group_size - 1).flatmap(
        lambda source: any_shape(st, axes).map(lambda s: Sample({"source": source}, s.shapes)))


def _bind(jax: Any, p: dict[str, Any]) -> Any:
    """`jax.lax.pbroadcast` itself: XLA:CPU has no lowering for it in jax 0.10.2, and the worker runs it under
    `oracles.install_cpu_lowerings()`."""
    return lambda x: jax.lax.pbroadcast(x, p["axis_name"], p["source"])


_SOURCE_RULE = ("an integer, the axis index of the device that broadcasts (pbroadcast without a source is the "
                "design note's name for pvary, invariant -> varying without messages: did you mean op = \"pvary\"?)")

PBROADCAST = Definition(
    name="pbroadcast", function=pbroadcast, arrays=("x",),
    params=(AXIS_NAME, Param("source", lambda v: isinstance(v, int) and not isinstance(v, bool), _SOURCE_RULE),
            ),
    vma=Vma.KEEP,
    batch=batch_rules.elementwise, algorithms=ALGORITHMS, reduction=None, sizes=MOVES, sweep=None, drawing=WHOLE,
    transpose=_transpose,
    jax=JaxBinding("pbroadcast", ("pbroadcast",), _bind, on_cpu="cpu lowering",
                   cpu_note="a tree of ppermutes copying the source's bytes"),
    strategy=_strategy,
)
