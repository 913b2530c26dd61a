"""`pbroadcast`: JAX's `lax.pbroadcast(x, axis_name, source)`, a broadcast of one member's array to its group.

Not the design note's "pbroadcast" (invariant -> varying, no data moves): that is `pvary` (see `_invariant.py`).
Here the member at axis index `source` sends its array and every member ends with it, by one of three
message patterns: 'direct' (the source sends to every member), 'tree' (a binomial tree: ceil(log2 n)
steps, every member that holds the array sends it on), 'ring' (a pipeline along the group from the source,
the array cut into n - 1 chunks that follow each other), or 'auto' (the fastest for the bytes and network).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

import sim
from collectives._algorithms import AUTO, check_algorithm
from collectives._common import group_of, map_tree, operand, out_layout_of, pack_slice, same_operands, unpack_values
from collectives._definition import AXIS_NAME, Definition, JaxBinding, Param, Transposition, Vma, algorithm
from collectives._strategy import Axes, Sample, any_shape
from collectives._vma import typed

_OP = "pbroadcast"
ALGORITHMS = ("direct", "tree", "ring", AUTO)


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
    'ring' (a pipeline from the source round the group, the array in n - 1 chunks, 2n - 3 steps), 'auto'
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
    """The source packs its array; members receive it (whole or in chunks), pass it on as the algorithm says,
    and write it into their result."""
    n, me = port.group.size, port.group.index
    rank = (me - args.source) % n  # position in the broadcast order, the source first
    view = port.memory.view(args.buffer)
    out = port.memory.view(port.memory.alloc(view.dtype, view.shape, args.out_layout))
    chosen = _resolve(port, dict(port.collective.params)["algorithm"], view.nbytes)
    if rank == 0:
        payload, header = yield from pack_slice(port, view, args.buffer.layout, source=args.source)
    else:
        payload, header = None, None
    member = lambda r: port.group.members[(r + args.source) % n]
    if chosen == "ring":
        payload, header = yield from _ring(port, rank, n, payload, header, member)
    elif chosen == "tree":
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
    physical = payload.reshape([view.shape[k] for k in order])  # the ring's chunks arrive flat
    yield from unpack_values(port, physical.transpose(np.argsort(order)), order, out)
    return out


def _tree_gaps(n: int) -> list[int]:
    """The distance each step of the binomial tree sends over (2^k in step k); ranks below it send."""
    return [1 << k for k in range(math.ceil(math.log2(n)))] if n > 1 else []


def _ring(port: sim.Port, rank: int, n: int, payload: Any, header: Any, member: Any) -> Generator:
    """The pipeline: chunk j goes from rank r to r + 1 as soon as r has it; the last rank keeps it."""
    count = max(1, n - 1)
    if rank == 0:
        chunks = np.array_split(payload.reshape(-1), count)
        for j, chunk in enumerate(chunks):
            if n > 1:
                port.send(member(1), np.ascontiguousarray(chunk), tag=j, header=header, step=j, chunk=j)
        return payload, header
    parts = []
    for j in range(count):
        message = yield port.recv(member(rank - 1), tag=j)
        parts.append(message.payload)
        header = message.header
        if rank + 1 < n:
            port.send(member(rank + 1), message.payload, tag=j, header=header, step=rank + j, chunk=j)
    return np.concatenate(parts) if parts else payload, header


def _resolve(port: sim.Port, chosen: str, size_bytes: int) -> str:
    """The algorithm this call runs: `chosen`, or for 'auto' the one `estimate_s` finds fastest."""
    if chosen != AUTO:
        return chosen
    members = port.group.members
    return port.once("algorithm", lambda: min(ALGORITHMS[:-1], key=lambda a: estimate_s(
        a, port.simulation.mesh, members, size_bytes)))


def estimate_s(chosen: str, mesh: sim.Mesh, members: tuple[int, ...], size_bytes: int) -> float:
    """Seconds `chosen` takes from member 0 on `mesh`'s routes: per step, the longest route's latency plus
    the most loaded link's bytes over its bandwidth."""
    n = len(members)
    if chosen == "direct":
        steps = [[(0, r, size_bytes) for r in range(1, n)]]
    elif chosen == "tree":
        steps = [[(r, r + gap, size_bytes) for r in range(gap) if r + gap < n] for gap in _tree_gaps(n)]
        steps = steps or [[]]
    else:
        chunk = size_bytes / max(1, n - 1)
        steps = [[(r, r + 1, chunk) for r in range(n - 1)]] * (2 * n - 3 if n > 1 else 0)
    return sum(_step_s(mesh, [(members[a], members[b], size) for a, b, size in step]) for step in steps)


def _step_s(mesh: sim.Mesh, messages: list[tuple[int, int, float]]) -> float:
    network, loads, latency = mesh.network, {}, 0.0
    for src, dst, size in messages:
        route = mesh.route(src, dst)
        latency = max(latency, sum(network.link_latency_s(link) for link in route))
        for link in route:
            loads[link] = loads.get(link, 0.0) + size
    return latency + max((load / network.link_bandwidth(link) for link, load in loads.items()), default=0.0)


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
    """The source's block of an all_gather: XLA:CPU has no lowering for `jax.lax.pbroadcast` in jax 0.10.2,
    and this equivalent keeps the bytes (the docs' psum of a masked x turns -0.0 into 0.0)."""
    return lambda x: jax.lax.index_in_dim(jax.lax.all_gather(x, p["axis_name"]), p["source"], 0, keepdims=False)


_SOURCE_RULE = ("an integer, the axis index of the device that broadcasts (pbroadcast without a source is the "
                "design note's name for pvary, invariant -> varying without messages: did you mean op = \"pvary\"?)")

PBROADCAST = Definition(
    name="pbroadcast", function=pbroadcast, arrays=("x",),
    params=(AXIS_NAME, Param("source", lambda v: isinstance(v, int) and not isinstance(v, bool), _SOURCE_RULE),
            algorithm(ALGORITHMS)),
    vma=Vma.KEEP,
    transpose=_transpose,
    jax=JaxBinding("pbroadcast", ("pbroadcast",), _bind),
    strategy=_strategy,
)
