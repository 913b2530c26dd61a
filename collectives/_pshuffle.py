"""`pshuffle` and `pswapaxes`: JAX's two collectives written in terms of others.

`jax.lax.pshuffle(x, axis_name, perm)` is `ppermute(x, axis_name, list(zip(perm, range(len(perm)))))`: device i
gets the x of axis index perm[i]. `jax.lax.pswapaxes(x, axis_name, axis, *, axis_index_groups=None)` is
`all_to_all(x, axis_name, axis, axis, axis_index_groups=...)`: the mapped axis and `axis` trade places. Each
checks its own arguments by its own rule, then runs (and is recorded as) the collective JAX binds for it, so
a program's listing shows ppermute and all_to_all as a jaxpr does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import sim
from collectives import _all_to_all, _ppermute
from collectives import _batch_rules as batch_rules
from collectives._all_to_all import all_to_all
from collectives._common import canonical_axis, group_of, operand
from collectives._definition import (
    AXIS_INDEX_GROUPS,
    AXIS_NAME,
    Definition,
    JaxBinding,
    Param,
    Transposition,
    Vma,
    integer,
)
from collectives._facts import MOVES, WHOLE, Drawing, Peers, Sizes
from collectives._ppermute import ppermute
from collectives._strategy import Axes, Sample, any_shape, dims


def pshuffle(x: Any, axis_name: Any, perm: Any, *, algorithm: str = "direct", out_layout: Any = None) -> Any:
    """Device at axis index i gets the `x` of axis index `perm[i]`: `perm` is a permutation of range(n).

    As in JAX this is `ppermute(x, axis_name, list(zip(perm, range(n))))`, and it runs and is recorded as
    that ppermute; `algorithm` and `out_layout` as in `ppermute`.

    Example on a 4-device mesh {'i': 4}: device d holds [d]; `pshuffle(x, 'i', [1, 2, 3, 0])` gives [1],
    [2], [3], [0].

    Raises:
        InvalidArgumentError: `perm` not a permutation of range(n) for the axis size n (naming the rule),
            and as `ppermute`.
        InvalidTypeError: `perm` not a sequence of ints; as `ppermute`.
    """
    context, group = group_of("pshuffle", axis_name, None)
    return ppermute(x, axis_name, _pairs(context.device, perm, group.size, axis_name), algorithm=algorithm,
                    out_layout=out_layout)


def _pairs(device: int, perm: Any, size: int, axis_name: Any) -> list[tuple[int, int]]:
    try:
        indices = list(perm)
        if not set(map(type, indices)) <= {int}:  # plain ints, as a list written in Python is, taken as they are
            indices = [int(i) if isinstance(i, (int, np.integer)) and not isinstance(i, bool) else None
                       for i in indices]
    except TypeError:
        indices = [None]
    if None in indices:
        raise sim.InvalidTypeError(f"device {device}: pshuffle: perm={perm!r} must be a sequence of ints")
    if sorted(indices) != list(range(size)):
        raise sim.InvalidArgumentError(
            f"device {device}: pshuffle: perm={list(indices)} must be a permutation of range({size}), the axis "
            f"size of axis_name={axis_name!r}: every index once")
    return list(zip(indices, range(size)))


def pswapaxes(x: Any, axis_name: Any, axis: int, *, axis_index_groups: Any = None, algorithm: str = "direct",
              out_layout: Any = None) -> Any:
    """Swap the mapped axis with `axis` of `x`: device j ends with index j along `axis` of every member's x,
    stacked in member order along `axis`; `x.shape[axis]` must be the group size.

    As in JAX this is `all_to_all(x, axis_name, axis, axis, axis_index_groups=...)`, and it runs and is
    recorded as that all_to_all; `algorithm` and `out_layout` as in `all_to_all`.

    Example on a 2-device mesh {'i': 2}: device 0 holds [[1, 2], [3, 4]], device 1 holds [[5, 6], [7, 8]];
    `pswapaxes(x, 'i', 0)` gives [[1, 2], [5, 6]] on device 0 and [[3, 4], [7, 8]] on device 1.

    Raises:
        InvalidArgumentError: `axis` outside [0, rank), `x.shape[axis]` other than the group size, and as
            `all_to_all` (groups, axis names, algorithm).
    """
    context, group = group_of("pswapaxes", axis_name, axis_index_groups)
    for leaf in sim.leaves(x):
        array = operand("pswapaxes", context.device, "x", leaf)
        if array.ndim == 0:
            raise sim.InvalidArgumentError(f"device {context.device}: pswapaxes: x must have rank >= 1, got a scalar")
        at = canonical_axis("pswapaxes", context.device, "axis", axis, array.ndim, negative=False)
        if array.shape[at] != group.size:
            raise sim.InvalidArgumentError(
                f"device {context.device}: pswapaxes: x.shape[axis={at}]={array.shape[at]} must equal the group "
                f"size {group.size}")
    return all_to_all(x, axis_name, axis, axis, axis_index_groups=axis_index_groups, algorithm=algorithm,
                      out_layout=out_layout)


# ---------------------------------------------------------------------------------------------- definitions


def _shuffle_transpose(t: Transposition) -> list:
    """The inverse permutation sends every cotangent back to where its value came from."""
    perm = list(t.params["perm"])
    return [t.ops.pshuffle(t.ct, t.params["axis_name"], [perm.index(i) for i in range(len(perm))])]


def _swap_transpose(t: Transposition) -> list:
    """Swapping the same two axes again undoes it: pswapaxes is its own transpose."""
    p = t.params
    return [t.ops.pswapaxes(t.ct, p["axis_name"], p["axis"], axis_index_groups=p.get("axis_index_groups"))]


def _swap_batch(definition: Definition, arrays: list, dims: list, params: dict) -> tuple[Any, Any]:
    """JAX's all_to_all rule with split_axis == concat_axis: `axis` shifts past a batch axis before it."""
    (x,), (d,) = arrays, dims
    axis = params.pop("axis") % (np.ndim(x) - 1)
    return definition.function(x, axis=axis + (d <= axis), **params), d


def _shuffle_strategy(st: Any, axes: Axes, **options: Any) -> Any:
    """Any permutation of the axis indices, any `x` of rank 0 to 3; a tuple axis_name in mesh order (see
    `ppermute`)."""
    names = axes.axis_name
    if isinstance(names, tuple):
        names = tuple(a for a in axes.mesh_shape if a in names)
    return st.permutations(range(axes.group_size)).flatmap(
        lambda perm: any_shape(st, axes).map(lambda s: Sample({"axis_name": names, "perm": list(perm)}, s.shapes)))


def _swap_strategy(st: Any, axes: Axes, **options: Any) -> Any:
    """Ranks 1 to 3, `axis` any of them, of the group size."""
    @st.composite
    def sample(draw: Any) -> Sample:
        rank = draw(st.integers(1, 3))
        axis = draw(st.integers(0, rank - 1))
        shape = dims(st, rank).map(lambda chosen: {"x": tuple(axes.group_size if k == axis else n
                                                              for k, n in enumerate(chosen))})
        return Sample({"axis": axis}, shape)
    return sample()


def _is_indices(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)


PSHUFFLE = Definition(
    name="pshuffle", function=pshuffle, arrays=("x",),
    params=(AXIS_NAME, Param("perm", _is_indices, "a list of axis indices, a permutation of range(axis size)")),
    vma=Vma.KEEP, transpose=_shuffle_transpose,
    batch=batch_rules.elementwise, algorithms=_ppermute.ALGORITHMS, reduction=None,
    sizes=Sizes(gathered=False, peers=Peers.ONE), sweep=None, drawing=WHOLE,
    # JAX binds ppermute for it: a jaxpr's ppermute is PPERMUTE's
    jax=JaxBinding("pshuffle", (), lambda jax, p: lambda x: jax.lax.pshuffle(x, **p)),
    strategy=_shuffle_strategy,
)
PSWAPAXES = Definition(
    name="pswapaxes", function=pswapaxes, arrays=("x",),
    params=(AXIS_NAME, integer("axis"), AXIS_INDEX_GROUPS),
    vma=Vma.KEEP, transpose=_swap_transpose,
    batch=_swap_batch, algorithms=_all_to_all.ALGORITHMS, reduction=None, sizes=MOVES, sweep=None,
    drawing=Drawing(axis="axis", chunked=True),
    # JAX binds all_to_all for it: a jaxpr's all_to_all is ALL_TO_ALL's
    jax=JaxBinding("pswapaxes", (), lambda jax, p: lambda x: jax.lax.pswapaxes(x, **p)),
    strategy=_swap_strategy,
)
