"""`all_gather`: every member sends its operand to every member; receivers stack or concatenate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import sim
from collectives import _batch_rules as batch_rules
from collectives._algorithms import axes_shape, check_algorithm, named, resolve
from collectives._common import (
    axis_index,
    canonical_axis,
    group_of,
    map_tree,
    operand,
    out_layout_of,
    pack_slice,
    row_major_everywhere,
    same_operands,
    unpack_into,
)
from collectives._definition import (
    AXIS_INDEX_GROUPS,
    AXIS_NAME,
    Definition,
    JaxBinding,
    Transposition,
    Vma,
    flag,
    integer,
)
from collectives._facts import GATHERS, WHOLE, Sweep
from collectives._gathering import ALGORITHMS, DIRECT, gather_blocks, result_buffer
from collectives._strategy import Axes, Sample, dims
from collectives._vma import typed


@dataclass(frozen=True)
class _Args:
    buffer: sim.Buffer
    axis: int
    tiled: bool
    out_layout: Any = None
    algorithm: str = "direct"
    shape: tuple[int, ...] = ()


def all_gather(x: Any, axis_name: Any, *, axis_index_groups: Any = None, axis: int = 0, tiled: bool = False,
               algorithm: str = "direct", out_layout: Any = None) -> Any:
    """Gather `x` from every device of the group, in group order, along `axis`.

    Untiled, the chunks are stacked in a new dimension at `axis`; tiled, they are concatenated along the
    existing dimension `axis`. `x` may be a pytree of arrays.

    `x` may sit in memory in any layout; each device sends its operand's bytes as they lie and writes
    the result in `out_layout` (a `layouts.Layout`, default row-major: what JAX's `out_shardings=Format`
    sets), unpacking every chunk that lands in a strided region by a timed step.

    `algorithm` chooses the messages, never the bytes (every block travels unchanged): 'direct' (one step,
    every member sends its operand to every member), 'ring' (n - 1 steps to the next member),
    'bidirectional_ring' (n // 2 steps, each block relayed both ways round), 'recursive_doubling' (log2(n)
    steps, n a power of two), 'per_axis' (a ring along each named mesh axis in turn; over one axis or with
    axis_index_groups, 'ring'), 'multi_axis' (every block cut into one part per named axis, the parts
    gathered at once by bidirectional rings along the axes, each part in its own rotation of them:
    `collectives._multi_axis`; over one axis, 'bidirectional_ring'), 'hierarchical' (on a network with nodes,
    a ring across nodes among the members of each local rank, then one direct step inside each node:
    `collectives._hierarchical`), or 'auto' (the fastest of these by
    `collectives._cost` for the bytes, the group and the network; the pick is recorded in
    `sim.CallRecord.algorithm`). Those besides 'direct' work on a row-major buffer of blocks: an operand or
    a result laid out otherwise costs one timed pack or unpack.

    Example on a 2-device mesh {'x': 2}: device 0 holds [1, 2], device 1 holds [3, 4];
    `all_gather(x, 'x')` gives [[1, 2], [3, 4]] on both, `all_gather(x, 'x', tiled=True)` gives [1, 2, 3, 4].
    On a mesh {'x': 2, 'y': 2} where device d holds [4d, 4d + 1, 4d + 2, 4d + 3], `all_gather(x, ('x', 'y'),
    tiled=True, algorithm='multi_axis')` gives [0, 1, ..., 15] on every device: elements 0:2 of each block
    travel along y then x, elements 2:4 along x then y, both at the same time.

    Raises:
        InvalidArgumentError: unknown axis name, bad groups, `axis` out of range, shapes or dtypes that differ
            within a group, an unknown algorithm or one that needs a power-of-two group on another size.
    """
    return map_tree(lambda leaf: _all_gather(leaf, axis_name, axis_index_groups, axis, tiled, out_layout,
                                             algorithm), x)


def _all_gather(x: Any, axis_name: Any, axis_index_groups: Any, axis: int, tiled: bool,
                out_layout: Any = None, algorithm: str = "direct") -> np.ndarray:
    axis, compute = gather_leaf("all_gather", x, axis_name, axis_index_groups, axis, tiled, out_layout, algorithm)
    return typed(ALL_GATHER, axis_name, [x], compute,
                 {"axis_name": axis_name, "axis_index_groups": axis_index_groups, "axis": axis, "tiled": tiled})


def gather_leaf(op: str, x: Any, axis_name: Any, axis_index_groups: Any, axis: int, tiled: bool,
                out_layout: Any, algorithm: str = "direct") -> tuple[int, Callable[[], np.ndarray]]:
    """Check one leaf for `op` (all_gather or all_gather_invariant, which send the same messages); return
    its axis counted from 0 and the call that runs the gather on this device."""
    context, group = group_of(op, axis_name, axis_index_groups)
    x = operand(op, context.device, "x", x)
    if tiled and x.ndim == 0:
        raise sim.InvalidArgumentError(f"device {context.device}: {op}: tiled=True needs x of rank >= 1")
    rank = x.ndim if tiled else x.ndim + 1
    axis = canonical_axis(op, context.device, "axis", axis, rank)
    check_algorithm(op, context.device, algorithm, group.size, ALGORITHMS)
    args = _Args(context.memory.resident(x), axis, bool(tiled), out_layout_of(op, context.device, out_layout, rank),
                 algorithm, axes_shape(context.mesh, axis_name, axis_index_groups))
    params = (("axis_name", axis_name), ("axis", axis), ("tiled", bool(tiled)), ("algorithm", algorithm))
    call = sim.Collective(op, group, params, args, _protocol, same_operands(op, group))
    return axis, lambda: context.collective(call)


def _protocol(port: sim.Port, args: _Args):
    """Direct algorithm: send the whole operand to each member, write each arrival into its place (the
    others: `collectives._gathering`)."""
    source = port.memory.view(args.buffer)
    algorithm = resolve(port, ALGORITHMS, args.algorithm, source.nbytes, args.shape)
    n = source.shape[args.axis] if args.tiled else 1
    g, me = port.group.size, port.group.index
    shape = list(source.shape)
    if args.tiled:
        shape[args.axis] *= g
    else:
        shape.insert(args.axis, g)
    if algorithm is not DIRECT:
        view = result_buffer(port, source.dtype, tuple(shape), args.out_layout)
        return (yield from gather_blocks(port, source, view, args.axis, args.tiled, algorithm, args.shape))
    view = port.memory.view(port.memory.alloc(source.dtype, tuple(shape), args.out_layout))
    if _rows_in_place(port):
        # nothing to pack or unpack: one row of identical messages each, blocks land in member order
        port.send_copies(source, slice=me, axis=args.axis, rows=(me * n, (me + 1) * n))
        yield from port.recv_into(view)
        return view
    payload, header = yield from pack_slice(port, source, args.buffer.layout, slice=me)
    for dst in port.group.members:
        port.send(dst, payload, header=header, slice=me, axis=args.axis, rows=(me * n, (me + 1) * n))
    for i, src in enumerate(port.group.members):
        message = yield port.recv(src)
        place = slice(i * n, (i + 1) * n)  # untiled, n == 1: a unit dimension keeps the target a view
        yield from unpack_into(port, message, view[axis_index(view.shape, args.axis, place)], slice=i)
    return view


def _rows_in_place(port: sim.Port) -> bool:
    """Whether every member gathers along axis 0 from a row-major operand into a row-major result (decided
    once per call, from what all members know statically)."""
    return port.once("in_place", lambda: row_major_everywhere(port.group_args, lambda a: a.axis == 0))


def _transpose(t: Transposition) -> list:
    """psum_scatter along the gathered axis: each member gets back the sum of the cotangents of its chunk."""
    p = t.params
    return [t.ops.psum_scatter(t.ct, p["axis_name"], scatter_dimension=p["axis"],
                               axis_index_groups=p["axis_index_groups"], tiled=p["tiled"])]


def _strategy(st: Any, axes: Axes, **options: Any) -> Any:
    """Ranks 1 to 3, tiled or not, any `axis` (negative too); never tiled along an empty dimension, which XLA
    rejects."""
    @st.composite
    def sample(draw: Any) -> Sample:
        rank, tiled = draw(st.integers(1, 3)), draw(st.booleans())
        room = rank if tiled else rank + 1
        axis = draw(st.integers(-room, room - 1))

        @st.composite
        def shape(draw_shape: Any) -> dict[str, tuple[int, ...]]:
            chosen = draw_shape(dims(st, rank))
            if tiled and chosen[axis] == 0:
                chosen[axis] = draw_shape(st.integers(1, 3))
            return {"x": tuple(chosen)}

        return Sample({"axis": axis, "tiled": tiled}, shape())
    return sample()


def teach(params: dict[str, Any], n: int) -> list[str]:
    """Where each block lands, then the algorithm's messages (all_gather and all_gather_invariant)."""
    axis, tiled = params.get("axis", 0), params.get("tiled", False)
    where = (f"rows k*m:(k+1)*m of axis {axis} (tiled: the blocks are concatenated)" if tiled
             else f"index k of a new axis {axis} (untiled: the blocks are stacked)")
    algorithm = named(ALGORITHMS, params.get("algorithm", "direct"))
    return [f"Protocol: every device sends its whole operand to each of the {n} members of its group "
            f"(the copy to itself is local and takes no time). The block of group member k lands at {where}, "
            f"so every member ends with the same gathered array.",
            *([] if algorithm is DIRECT else [f"Algorithm {algorithm.text}"])]


ALL_GATHER = Definition(
    name="all_gather", function=all_gather, arrays=("x",),
    params=(AXIS_NAME, AXIS_INDEX_GROUPS, integer("axis", 0), flag("tiled", False)),
    vma=Vma.KEEP, transpose=_transpose,
    jax=JaxBinding("all_gather", ("all_gather",), lambda jax, p: lambda x: jax.lax.all_gather(x, **p)),
    strategy=_strategy,
    batch=batch_rules.gather("axis", removes=False), algorithms=ALGORITHMS, reduction=None, sizes=GATHERS,
    sweep=Sweep("AllGather", "gathered", "(n-1)/n", lambda axis_name, n, algorithm: lambda x: all_gather(
        x, axis_name, tiled=True, algorithm=algorithm)),
    drawing=WHOLE, teach=teach,
)
