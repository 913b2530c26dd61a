"""`all_to_all`: member i sends its j-th chunk along `split_axis` to member j, who places it at i."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import sim
from collectives import _batch_rules as batch_rules
from collectives._algorithms import axes_shape, blocks_of, check_algorithm, named, resolve
from collectives._common import (
    axis_index,
    canonical_axis,
    group_of,
    map_tree,
    operand,
    out_layout_of,
    pack_slice,
    received,
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
from collectives._exchanging import ALGORITHMS, DIRECT, exchange
from collectives._facts import MOVES, Drawing, Sweep
from collectives._strategy import Axes, Sample, dims
from collectives._vma import typed


@dataclass(frozen=True)
class _Args:
    buffer: sim.Buffer
    split_axis: int
    concat_axis: int
    tiled: bool
    out_layout: Any = None
    algorithm: str = "direct"
    shape: tuple[int, ...] = ()


def all_to_all(x: Any, axis_name: Any, split_axis: int, concat_axis: int, *, axis_index_groups: Any = None,
               tiled: bool = False, algorithm: str = "direct", out_layout: Any = None) -> Any:
    """Split `x` along `split_axis` into one chunk per group member, exchange, and join along `concat_axis`.

    Both axes must be non-negative, as in `jax.lax.all_to_all`. Untiled, `x.shape[split_axis]` must equal
    the group size; chunk j is `x` at index j of `split_axis` (that dimension removed) and the received
    chunks are stacked in a new dimension at `concat_axis`.
    Tiled, `x.shape[split_axis]` must be divisible by the group size and chunks are concatenated.
    `x` may be a pytree of arrays.

    `x` may sit in memory in any layout: a chunk whose bytes are one contiguous run is sent straight
    from memory, any other is packed first by a timed step. The result is written in `out_layout` (a
    `layouts.Layout`, default row-major), chunks landing in strided regions unpacked by a timed step.

    `algorithm` chooses the messages, never the bytes: 'direct' (one step, a message per pair),
    'pairwise' (n - 1 steps: at step k member i sends to i + k and receives from i - k), 'bruck'
    (ceil(log2(n)) steps of the chunks whose rotated index has bit k set, any n), 'per_axis' (a direct
    exchange along each named mesh axis in turn; over one axis or with axis_index_groups, 'direct'),
    'multi_axis' (every chunk cut into one part per named axis, the parts exchanged at once, each along the
    axes in its own rotation of them: `collectives._multi_axis`; over one axis, 'direct'), or 'auto' (the
    fastest by `collectives._cost`, recorded in `sim.CallRecord.algorithm`).

    Example on a 2-device mesh {'x': 2}: device 0 holds [1, 2], device 1 holds [3, 4];
    `all_to_all(x, 'x', 0, 0)` gives [1, 3] on device 0 and [2, 4] on device 1.

    Raises:
        InvalidArgumentError: unknown axis name, bad groups, axes out of range, a split dimension that does
            not fit the group size, shapes or dtypes that differ within a group, an unknown algorithm.
    """
    return map_tree(lambda leaf: _all_to_all(leaf, axis_name, split_axis, concat_axis, axis_index_groups, tiled,
                                             out_layout, algorithm), x)


def _all_to_all(x: Any, axis_name: Any, split_axis: int, concat_axis: int, axis_index_groups: Any,
                tiled: bool, out_layout: Any = None, algorithm: str = "direct") -> np.ndarray:
    context, group = group_of("all_to_all", axis_name, axis_index_groups)
    device = context.device
    original, x = x, operand("all_to_all", device, "x", x)
    if x.ndim == 0:
        raise sim.InvalidArgumentError(f"device {device}: all_to_all: x must have rank >= 1, got a scalar")
    # jax.lax.all_to_all does not normalise negative axes (some pairs crash its lowering): reject them
    split_axis = canonical_axis("all_to_all", device, "split_axis", split_axis, x.ndim, negative=False)
    concat_axis = canonical_axis("all_to_all", device, "concat_axis", concat_axis, x.ndim, negative=False)
    size = x.shape[split_axis]
    if tiled and size % group.size:
        raise sim.InvalidArgumentError(
            f"device {device}: all_to_all: x.shape[split_axis={split_axis}]={size} must be divisible by the "
            f"group size {group.size} when tiled=True"
        )
    if not tiled and size != group.size:
        raise sim.InvalidArgumentError(
            f"device {device}: all_to_all: x.shape[split_axis={split_axis}]={size} must equal the group size "
            f"{group.size} when tiled=False"
        )
    out_layout = out_layout_of("all_to_all", device, out_layout, x.ndim)
    check_algorithm("all_to_all", device, algorithm, group.size, ALGORITHMS)
    args = _Args(context.memory.resident(x), split_axis, concat_axis, bool(tiled), out_layout, algorithm,
                 axes_shape(context.mesh, axis_name, axis_index_groups))
    params = (("axis_name", axis_name), ("split_axis", split_axis), ("concat_axis", concat_axis),
              ("tiled", bool(tiled)), ("algorithm", algorithm))
    validate = same_operands("all_to_all", group)
    compute = lambda: context.collective(sim.Collective("all_to_all", group, params, args, _protocol, validate))
    return typed(ALL_TO_ALL, axis_name, [original], compute,
                 {"axis_name": axis_name, "axis_index_groups": axis_index_groups, "split_axis": split_axis,
                  "concat_axis": concat_axis, "tiled": tiled})


def _protocol(port: sim.Port, args: _Args):
    """Direct algorithm: one message per (sender, receiver) pair, the chunk packed if strided (the others:
    `collectives._exchanging`)."""
    source = port.memory.view(args.buffer)
    g, me = port.group.size, port.group.index
    step = source.shape[args.split_axis] // g if args.tiled else 1
    chunk = lambda j: source[axis_index(source.shape, args.split_axis, slice(j * step, (j + 1) * step))]
    view = port.memory.view(port.memory.alloc(source.dtype, _out_shape(args, source.shape, g), args.out_layout))
    algorithm = resolve(port, ALGORITHMS, args.algorithm, source.nbytes, args.shape)
    if algorithm is DIRECT and _rows_in_place(port, chunk(0)):
        # nothing to pack or unpack: the members exchange whole rows of messages (the chunks follow each
        # other in the operand), and each receiver's blocks follow each other in member order
        port.send_split(source, slice=range(g), axis=args.concat_axis, rows=_rows(args, chunk(0).shape, me))
        yield from port.recv_into(view)
        return view
    chunks = [chunk(j) for j in range(g)]
    rows = [_rows(args, chunk.shape, me) for chunk in chunks]
    if algorithm is not DIRECT:
        blocks = blocks_of(view, args.concat_axis, g, args.tiled)
        yield from exchange(port, algorithm, chunks, args.buffer.layout, blocks, rows, args.shape)
        return view
    for j, (dst, chunk) in enumerate(zip(port.group.members, chunks)):
        payload, header = yield from pack_slice(port, chunk, args.buffer.layout, slice=j)
        port.send(dst, payload, header=header, slice=j, axis=args.concat_axis, rows=rows[j])
    for i, src in enumerate(port.group.members):
        message = yield port.recv(src)
        start, stop = _rows(args, received(message).shape, i)
        target = view[axis_index(view.shape, args.concat_axis, slice(start, stop))]
        yield from unpack_into(port, message, target, slice=i)
    return view


def _rows_in_place(port: sim.Port, chunk: np.ndarray) -> bool:
    """Whether, for every member, each chunk is one contiguous run of its row-major operand and lands as
    one in its row-major result (decided once per call, from what all members know statically; the chunks
    share their shape and strides, so the first tells for all)."""
    return port.once("in_place", lambda: row_major_everywhere(port.group_args, lambda a: a.concat_axis == 0)
                     and chunk.flags.c_contiguous)


def _rows(args: _Args, chunk_shape: tuple[int, ...], i: int) -> tuple[int, int]:
    """Where member i's chunk lands along `concat_axis` of the output."""
    n = chunk_shape[args.concat_axis] if args.tiled else 1
    return i * n, (i + 1) * n


def _out_shape(args: _Args, shape: tuple[int, ...], g: int) -> tuple[int, ...]:
    out = list(shape)
    if args.tiled:
        out[args.split_axis] //= g
        out[args.concat_axis] *= g
    else:
        del out[args.split_axis]
        out.insert(args.concat_axis, g)
    return tuple(out)


def _transpose(t: Transposition) -> list:
    """all_to_all with the split and concat axes swapped sends every chunk back where it came from."""
    p = t.params
    return [t.ops.all_to_all(t.ct, p["axis_name"], p["concat_axis"], p["split_axis"],
                             axis_index_groups=p["axis_index_groups"], tiled=p["tiled"])]


def _strategy(st: Any, axes: Axes, *, negative_axes: bool = False, **options: Any) -> Any:
    """Ranks 1 to 3, tiled or not, any axes; the split dimension is the group size (untiled) or a multiple
    of it, 0 included (tiled). `negative_axes=True` draws a negative split or concat axis instead, which
    JAX 0.10.2 cannot lower (for the rejection test)."""
    @st.composite
    def sample(draw: Any) -> Sample:
        rank = draw(st.integers(1, 3))
        low = -rank if negative_axes else 0
        split_axis, concat_axis = draw(st.integers(low, rank - 1)), draw(st.integers(low, rank - 1))
        if negative_axes and split_axis >= 0 and concat_axis >= 0:
            split_axis -= rank
        tiled = draw(st.booleans())

        @st.composite
        def shape(draw_shape: Any) -> dict[str, tuple[int, ...]]:
            chosen = draw_shape(dims(st, rank))
            chosen[split_axis] = axes.group_size * (draw_shape(st.integers(0, 2)) if tiled else 1)
            return {"x": tuple(chosen)}

        return Sample({"split_axis": split_axis, "concat_axis": concat_axis, "tiled": tiled}, shape())
    return sample()


def _teach(params: dict[str, Any], n: int) -> list[str]:
    """Which chunk goes where, then the algorithm's messages when it is not 'direct'."""
    split, concat = params.get("split_axis"), params.get("concat_axis")
    how = "concatenated" if params.get("tiled") else "stacked (untiled: axis split_axis of size n disappears)"
    algorithm = named(ALGORITHMS, params.get("algorithm", "direct"))
    return [f"Protocol: each device cuts its operand along split_axis={split} into {n} chunks; chunk j goes to "
            f"group member j. The receiver puts the chunk from member k at block k along concat_axis={concat}, "
            f"{how}. Device j ends with chunk j of every member: the mapped axis and axis {split} trade places.",
            *([] if algorithm is DIRECT else [f"Algorithm {algorithm.text}"])]


ALL_TO_ALL = Definition(
    name="all_to_all", function=all_to_all, arrays=("x",),
    params=(AXIS_NAME, integer("split_axis"), integer("concat_axis"), AXIS_INDEX_GROUPS, flag("tiled", False)),
    vma=Vma.KEEP, transpose=_transpose,
    jax=JaxBinding("all_to_all", ("all_to_all",), lambda jax, p: lambda x: jax.lax.all_to_all(x, **p)),
    strategy=_strategy,
    batch=batch_rules.all_to_all, algorithms=ALGORITHMS, reduction=None, sizes=MOVES,
    sweep=Sweep("AlltoAll", "split", "(n-1)/n", lambda axis_name, n, algorithm: lambda x: all_to_all(
        x, axis_name, 0, 0, tiled=True, algorithm=algorithm)),
    drawing=Drawing(axis="split_axis", chunked=True), teach=_teach,
)
