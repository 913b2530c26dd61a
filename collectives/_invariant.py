"""The design note's collectives for device-variance types: `pvary` (and `pcast`), `all_gather_invariant`,
`pscatter`.

(The fourth, `psum_invariant`, lives with the other all-reduces in `_reduce.py`.) Each public function
computes the value half of its row in the note's table; the device-variance rule (varying -> invariant and
back) is attached on top. The note calls pvary "pbroadcast" (JAX's own `jax.lax.pbroadcast` is a broadcast
from one device, `collectives.pbroadcast`). In jax 0.10.2 the names map as each definition's `JaxBinding`
records: pvary is the `pvary` primitive (`jax.lax.pcast(x, axis, to='varying')`, `pcast` here too),
all_gather_invariant keeps its name (`jax._src.lax.parallel.all_gather_invariant`), and pscatter has no
primitive: it is JAX's transpose of all_gather_invariant, a dynamic slice at `axis_index`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import sim
from collectives import _all_gather
from collectives import _batch_rules as batch_rules
from collectives._algorithm import direct_only
from collectives._algorithms import check_algorithm
from collectives._common import axis_index as index_along
from collectives._common import canonical_axis, group_of, map_tree, operand, out_layout_of
from collectives._definition import AXIS_NAME, Definition, JaxBinding, Param, Transposition, Vma, flag, integer
from collectives._facts import GATHERS, LOCAL, WHOLE
from collectives._gathering import ALGORITHMS as GATHER
from collectives._strategy import Axes, Sample, any_shape, dims, split_shape
from collectives._vma import typed


def pvary(x: Any, axis_name: Any, *, algorithm: str = "direct", out_layout: Any = None) -> Any:
    """`x` itself (invariant -> varying along `axis_name`); no communication and no arithmetic.

    The result stays where the operand is, in its layout; given an `out_layout` (a `layouts.Layout`)
    that differs from it, the result is a copy laid out so, made without simulated time like the
    program's own array operations. `algorithm` ('direct' or 'auto') is checked and changes nothing:
    there are no messages.

    Example on a 2-device mesh {'i': 2}: both devices hold [1, 2]; `pvary(x, 'i')` gives [1, 2] on
    both, now typed as varying along 'i'.

    Raises:
        InvalidArgumentError: an unknown or repeated axis name, an `out_layout` of another rank than x, an
            unknown algorithm.
        InvalidTypeError: a non-numeric x, an `out_layout` that is not a `layouts.Layout` or None.
    """
    return _pvary(x, axis_name, out_layout, algorithm)


CASTS = ("varying", "reduced", "unreduced")  # the `to` values JAX 0.10.2 takes


def pcast(x: Any, axis_name: Any, *, to: str, algorithm: str = "direct", out_layout: Any = None) -> Any:
    """`jax.lax.pcast`: `x` retyped along `axis_name`; `to='varying'` is `pvary` (invariant -> varying).

    JAX 0.10.2 also takes `to='reduced'` and `to='unreduced'`, its types for arrays whose sum over devices
    is still pending; meshsim models no such types, so those are refused rather than treated as the
    identity. `algorithm` and `out_layout` as in `pvary`; the call is recorded as `pvary`, the primitive
    JAX binds.

    Example on a 2-device mesh {'i': 2}: both devices hold [1, 2]; `pcast(x, 'i', to='varying')` gives
    [1, 2] on both, typed as varying along 'i'.

    Raises:
        InvalidArgumentError: `to` other than 'varying' (naming the rule), and as `pvary`.
        InvalidTypeError: as `pvary`.
    """
    if to != "varying":
        raise sim.InvalidArgumentError(f"device {sim.current().device}: pcast: {_cast_rule(to)}")
    return _pvary(x, axis_name, out_layout, algorithm, "pcast")


def _cast_rule(to: Any) -> str:
    """Why pcast refuses `to`: meshsim accepts only 'varying'; JAX's two other casts and any other value."""
    accepted = (f"to={to!r} must be 'varying', the only value meshsim's pcast accepts (pvary: invariant -> "
                f"varying)")
    if to in CASTS:
        return (f"{accepted}. JAX's pcast also takes {to!r}, but meshsim models no reduced or unreduced types "
                f"(JAX's sums still pending across devices), so it refuses the cast rather than treat it as the "
                f"identity")
    return (f"{accepted}. {to!r} is not among JAX's casts either ('varying', 'reduced', 'unreduced'), and "
            f"meshsim refuses 'reduced' and 'unreduced' since it models no such types (sums still pending across "
            f"devices). A varying value becomes invariant by a reduction (psum, all_gather_invariant), not by a "
            f"cast")


def all_gather_invariant(x: Any, axis_name: Any, *, axis: int = 0, tiled: bool = False, algorithm: str = "direct",
                         out_layout: Any = None) -> Any:
    """`all_gather`'s bytes (varying -> invariant), the same messages, without axis_index_groups.

    `x` may sit in memory in any layout; the result is written in `out_layout` (a `layouts.Layout`,
    default row-major), with `all_gather`'s timed unpacking of chunks that land in strided regions.
    `algorithm` takes `all_gather`'s choices ('direct', 'ring', 'bidirectional_ring',
    'recursive_doubling', 'per_axis', 'auto') and sends their messages.

    Example on a 2-device mesh {'i': 2}: device 0 holds [1], device 1 holds [2];
    `all_gather_invariant(x, 'i')` gives [[1], [2]] on both, and with `tiled=True`, [1, 2].

    Raises:
        InvalidArgumentError: as `all_gather`, and an `out_layout` of another rank than the result.
        InvalidTypeError: an `out_layout` that is not a `layouts.Layout` or None.
    """
    return _all_gather_invariant(x, axis_name, axis, tiled, out_layout, algorithm)


def pscatter(x: Any, axis_name: Any, *, axis: int = 0, tiled: bool = False, algorithm: str = "direct",
             out_layout: Any = None) -> Any:
    """This device's slice of `x` along `axis` (invariant -> varying); no communication.

    Untiled, `x.shape[axis]` must equal the axis size and the result is index `axis_index(axis_name)`
    along `axis` (that dimension removed); tiled, it must be divisible by the axis size and the result is
    block `axis_index(axis_name)`. The transpose of `all_gather_invariant`. `x` may sit in memory in
    any layout; the slice is written in `out_layout` (a `layouts.Layout`, default row-major), a local
    copy made without simulated time like the program's own array operations. `algorithm` ('direct' or
    'auto') is checked and changes nothing: there are no messages.

    Example on a 2-device mesh {'i': 2}: both devices hold [[1, 2], [3, 4]]; `pscatter(x, 'i')` gives
    [1, 2] on device 0 and [3, 4] on device 1; `pscatter(x, 'i', axis=1, tiled=True)` gives [[1], [3]]
    and [[2], [4]].

    Raises:
        InvalidArgumentError: unknown axis name, `axis` out of range, a dimension that does not fit the
            axis size, a scalar x, an `out_layout` of another rank than the result, an unknown algorithm.
        InvalidTypeError: a non-numeric x, an `out_layout` that is not a `layouts.Layout` or None.
    """
    return _pscatter(x, axis_name, axis, tiled, out_layout, algorithm)


def _pvary(x: Any, axis_name: Any, out_layout: Any = None, algorithm: str = "direct", op: str = "pvary") -> Any:
    def leaf(value: Any) -> np.ndarray:
        context, group = group_of(op, axis_name, None)
        check_algorithm(op, context.device, algorithm, group.size, _PVARY)
        array = operand(op, context.device, "x", value)
        layout = out_layout_of(op, context.device, out_layout, array.ndim)
        memory = context.memory
        buffer = memory.resident(array)
        if layout is not None and buffer.layout != layout:
            buffer = memory.store(memory.view(buffer), layout)
        return memory.view(buffer)
    return map_tree(lambda value: typed(PVARY, axis_name, [value], lambda: leaf(value),
                                        {"axis_name": axis_name}, called=op), x)


def _all_gather_invariant(x: Any, axis_name: Any, axis: int, tiled: bool, out_layout: Any = None,
                          algorithm: str = "direct") -> Any:
    op = "all_gather_invariant"

    def one(leaf: Any) -> Any:
        canonical, compute = _all_gather.gather_leaf(op, leaf, axis_name, None, axis, tiled, out_layout, algorithm)
        return typed(ALL_GATHER_INVARIANT, axis_name, [leaf], compute,
                     {"axis_name": axis_name, "axis": canonical, "tiled": tiled})
    return map_tree(one, x)


def _pscatter(x: Any, axis_name: Any, axis: int, tiled: bool, out_layout: Any = None,
              algorithm: str = "direct") -> Any:
    return map_tree(lambda leaf: typed(PSCATTER, axis_name, [leaf], lambda: _scatter_leaf(
        leaf, axis_name, axis, tiled, out_layout, algorithm), {"axis_name": axis_name, "axis": axis, "tiled": tiled}),
        x)


def _scatter_leaf(x: Any, axis_name: Any, axis: int, tiled: bool, out_layout: Any, algorithm: str) -> np.ndarray:
    op = "pscatter"
    context, group = group_of(op, axis_name, None)
    device = context.device
    check_algorithm(op, device, algorithm, group.size, _PSCATTER)
    x = operand(op, device, "x", x)
    if x.ndim == 0:
        raise sim.InvalidArgumentError(f"device {device}: {op}: x must have rank >= 1, got a scalar")
    axis = canonical_axis(op, device, "axis", axis, x.ndim)
    size, n = x.shape[axis], group.size
    if (size % n) if tiled else (size != n):
        rule = (f"be divisible by the axis size {n} when tiled=True" if tiled
                else f"equal the axis size {n} when tiled=False")
        raise sim.InvalidArgumentError(f"device {device}: {op}: x.shape[axis={axis}]={size} must {rule}")
    layout = out_layout_of(op, device, out_layout, x.ndim if tiled else x.ndim - 1)
    step = size // n
    place = slice(group.index * step, (group.index + 1) * step) if tiled else group.index
    return context.memory.view(context.memory.store(x[index_along(x.shape, axis, place)], layout))


# ---------------------------------------------------------------------------------------------- definitions


def _axes(axis_name: Any) -> tuple[Any, ...]:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _bind_pvary(jax: Any, p: dict[str, Any]) -> Any:
    return lambda x: jax.lax.pcast(x, _axes(p["axis_name"]), to="varying")


def _bind_pcast(jax: Any, p: dict[str, Any]) -> Any:
    return lambda x: jax.lax.pcast(x, _axes(p["axis_name"]), to=p["to"])


def _bind_all_gather_invariant(jax: Any, p: dict[str, Any]) -> Any:
    return lambda x: jax.parallel.all_gather_invariant(x, _axes(p["axis_name"]), axis=p.get("axis", 0),
                                                       tiled=p.get("tiled", False))


def _bind_pscatter(jax: Any, p: dict[str, Any]) -> Any:
    """pscatter as JAX defines it: the linear transpose of all_gather_invariant, applied to `x`.

    Untyped (`check_vma=False`) that transpose cannot know the cotangent is one value on every device, and
    with `oracles.install_jax_fixes()` it sums them (psum_scatter, FINDINGS.md 10): there pscatter is the
    slice at `axis_index` that the typed transpose takes."""
    names, axis, tiled = _axes(p["axis_name"]), p.get("axis", 0), p.get("tiled", False)

    def scatter(x: Any) -> Any:
        size = int(np.prod([jax.lax.axis_size(name) for name in names]))
        dim = axis % x.ndim
        if not jax.parallel.config._check_vma.value:
            block = x.shape[dim] // size if tiled else 1
            part = jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(names) * block, block, axis=dim)
            return part if tiled else jax.lax.squeeze(part, (dim,))
        example = (jax.lax.slice_in_dim(x, 0, x.shape[dim] // size, axis=dim) if tiled
                   else jax.lax.index_in_dim(x, 0, dim, keepdims=False))
        gather = lambda part: jax.parallel.all_gather_invariant(part, names, axis=axis, tiled=tiled)
        (result,) = jax.linear_transpose(gather, jax.lax.pcast(example, names, to="varying"))(x)
        return result
    return scatter


def _pvary_transpose(t: Transposition) -> list:
    """The design note's pair: the transpose of pvary is psum_invariant.

    Untyped (`check_vma=False`), pvary is the identity (JAX binds nothing for it) and the transposed
    shard_map sums the cotangent of an unmapped input itself: a psum_invariant here would sum it twice."""
    if not sim.current().check_vma:
        return [t.ct]
    return [t.ops.psum_invariant(t.ct, t.params["axis_name"])]


def _gather_invariant_transpose(t: Transposition) -> list:
    """The design note's pair: the transpose of all_gather_invariant is pscatter (no communication).

    Untyped, nothing says the cotangent is equal on every device (an output mapped over the axis gets one
    per device), so it is psum_scatter, all_gather's transpose, which is pscatter's answer when they are
    equal. JAX takes the slice there too, which drops the other devices' cotangents (FINDINGS.md)."""
    if not sim.current().check_vma:
        return [t.ops.psum_scatter(t.ct, t.params["axis_name"], scatter_dimension=t.params["axis"],
                                   tiled=t.params["tiled"])]
    return [t.ops.pscatter(t.ct, t.params["axis_name"], axis=t.params["axis"], tiled=t.params["tiled"])]


def _pscatter_transpose(t: Transposition) -> list:
    """The design note's pair: the transpose of pscatter is all_gather_invariant.

    Untyped, the transposed shard_map sums the cotangent of the (unmapped) operand itself, so each device
    contributes only its own block: the gathered cotangent with the other devices' blocks zeroed."""
    gathered = t.ops.all_gather_invariant(t.ct, t.params["axis_name"], axis=t.params["axis"], tiled=t.params["tiled"])
    if sim.current().check_vma:
        return [gathered]
    return [gathered * _own_block(np.shape(gathered), t.params).astype(np.asarray(t.ct).dtype)]


def _own_block(shape: tuple[int, ...], params: dict) -> np.ndarray:
    """1 on this device's block of a gathered array (along `axis`), 0 elsewhere."""
    context = sim.current()
    axis, n = params["axis"] % len(shape), context.mesh.axis_size(params["axis_name"])
    along = np.arange(shape[axis]) // (shape[axis] // n if params["tiled"] else 1)
    mask = (along == context.mesh.axis_index(context.device, params["axis_name"])).astype(np.int8)
    return mask.reshape([-1 if i == axis else 1 for i in range(len(shape))])


def _gather_invariant_strategy(st: Any, axes: Axes, **options: Any) -> Any:
    """Ranks 0 to 3, tiled (rank >= 1) or not, any `axis` (negative too); never tiled along an empty
    dimension, which XLA rejects."""
    @st.composite
    def sample(draw: Any) -> Sample:
        rank = draw(st.integers(0, 3))
        tiled = draw(st.booleans()) and rank > 0
        room = rank if tiled else rank + 1
        axis = draw(st.integers(-room, room - 1))

        def shape(chosen: list[int]) -> dict[str, tuple[int, ...]]:
            if tiled and chosen[axis] == 0:
                chosen[axis] = 1
            return {"x": tuple(chosen)}
        return Sample({"axis": axis, "tiled": tiled}, dims(st, rank).map(shape))
    return sample()


_PVARY = direct_only("direct: no messages: each device keeps its own operand, now typed as varying.",
                     messages=lambda shape: 0)
_PSCATTER = direct_only("direct: no messages: each device keeps chunk k of its (invariant) operand, k its position "
                        "along the axis.", messages=lambda shape: 0)

PVARY = Definition(
    name="pvary", function=pvary, arrays=("x",), params=(AXIS_NAME,),
    vma=Vma.INTRODUCE,
    batch=batch_rules.elementwise, algorithms=_PVARY, reduction=None, sizes=LOCAL, sweep=None, drawing=WHOLE,
    transpose=_pvary_transpose,
    jax=JaxBinding("pvary", ("pvary",), _bind_pvary),
    strategy=any_shape,
    # sim.promote records the pvary it inserts with the axes it adds as `axes`
    from_recorded=lambda p: {"axis_name": p["axes"] if "axes" in p else p["axis_name"]},
)
PCAST = Definition(
    name="pcast", function=pcast, arrays=("x",),
    params=(AXIS_NAME, Param("to", lambda value: value == "varying", "'varying' (meshsim models no reduced or "
                             "unreduced types)", choices=("varying",))),
    vma=Vma.INTRODUCE,
    batch=batch_rules.elementwise, algorithms=_PVARY, reduction=None, sizes=LOCAL, sweep=None, drawing=WHOLE,
    transpose=_pvary_transpose,
    # JAX binds pvary for pcast(to='varying'), and so does meshsim: a jaxpr's pvary is PVARY's
    jax=JaxBinding("pcast", (), _bind_pcast),
    strategy=lambda st, axes, **options: any_shape(st, axes).map(lambda s: Sample({"to": "varying"}, s.shapes)),
)
ALL_GATHER_INVARIANT = Definition(
    name="all_gather_invariant", function=all_gather_invariant, arrays=("x",),
    params=(AXIS_NAME, integer("axis", 0), flag("tiled", False)), vma=Vma.REDUCE,
    batch=batch_rules.gather("axis", removes=False), algorithms=GATHER, reduction=None, sizes=GATHERS, sweep=None,
    drawing=WHOLE, teach=_all_gather.teach,
    transpose=_gather_invariant_transpose,
    jax=JaxBinding("all_gather_invariant", ("all_gather_invariant",), _bind_all_gather_invariant),
    strategy=_gather_invariant_strategy,
)
PSCATTER = Definition(
    name="pscatter", function=pscatter, arrays=("x",),
    params=(AXIS_NAME, integer("axis", 0), flag("tiled", False)),
    vma=Vma.INTRODUCE,
    batch=batch_rules.gather("axis", removes=True), algorithms=_PSCATTER, reduction=None, sizes=LOCAL, sweep=None,
    drawing=WHOLE,
    transpose=_pscatter_transpose,
    jax=JaxBinding("transpose(all_gather_invariant)", (), _bind_pscatter),
    strategy=lambda st, axes, **options: split_shape(st, axes, "axis", negative=True),
)
