"""Corrected batching rules of ppermute and pbroadcast over a vmap axis (findings 18, 19 and 20 of FINDINGS.md).

`jax.vmap(..., axis_name='y')` makes 'y' an axis collectives can name; their batchers then move values along
the batch dimension. Each installer puts a corrected batcher in `batching.fancy_primitive_batchers`, wrapping
JAX's own (stock) one, so installing twice changes nothing. ppermute's two fixes share one batcher, which
applies the ones installed (psend and precv keep JAX's). For example, finding 20:

    import oracles
    oracles.install_jax_fixes(["vmap-axis-pbroadcast-take"])
    jax.vmap(lambda v: lax.pbroadcast(v, "y", 0), axis_name="y")(jnp.array([1., 2.]))   # [1., 1.]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# the ppermute fixes installed, read by `_ppermute_batcher`
_ppermute_fixes: set[str] = set()


def _names(axis_name: Any) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _batched(v: Any, d: Any, size: int) -> tuple[Any, int]:
    """`v` with a batch dimension of `size` (every member's value the same if `d` is None), and where it is."""
    from jax._src.lax import lax

    if d is not None:
        return v, d
    return lax.broadcast_in_dim(v, (size, *v.shape), tuple(range(1, v.ndim + 1))), 0


def _zero_unless(x: Any, keep: Any, d: int) -> Any:
    """`x` where the boolean `keep` (along dimension `d`, or a scalar) holds, else zeros."""
    from jax._src.lax import lax

    dims = () if getattr(keep, "ndim", 0) == 0 else (d,)
    return lax.select(lax.broadcast_in_dim(keep, x.shape, dims), x, lax.full_like(x, 0))


def _over_the_vmap_axis(v: Any, d: Any, size: int, perm: Any) -> tuple[Any, int]:
    """Finding 19: ppermute along the vmap axis alone; a member no pair writes to gets zeros."""
    import numpy as np

    if d is None and len(perm) == size:
        return v, d  # every member holds the same value, and each receives one
    v, d = _batched(v, d, size)
    sources = np.zeros(size, dtype=int)
    received = np.zeros(size, dtype=bool)
    for src, dst in perm:
        sources[dst % size], received[dst % size] = src % size, True
    out = v.take(sources, d)
    return (out if received.all() else _zero_unless(out, received, d)), d


def _over_a_tuple(v: Any, d: Any, size: int, frame: Any, names: tuple, perm: Any) -> tuple[Any, int]:
    """Finding 18: ppermute over `names`, a tuple holding the vmap axis `frame`.

    A member's index along `names` is row-major in their order; each pair's source and destination split into
    a batch coordinate and an index along the other axes. The pairs between one source batch member and one
    destination batch member form a perm of the other axes: ppermute that slice over them and keep it where
    this device is a destination.
    """
    import numpy as np
    from jax._src import core
    from jax._src.lax import lax, parallel, slicing

    k = names.index(frame)
    rest = names[:k] + names[k + 1:]
    sizes = [size if name == frame else core.get_axis_env().axis_size(name) for name in names]
    rest_sizes = sizes[:k] + sizes[k + 1:]

    def split(index: int) -> tuple[int, int]:  # a negative index counts from the end, as in the lowering
        coords = np.unravel_index(index % int(np.prod(sizes)), sizes)
        return int(coords[k]), int(np.ravel_multi_index(coords[:k] + coords[k + 1:], rest_sizes))

    groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for src, dst in perm:
        (b_src, r_src), (b_dst, r_dst) = split(src), split(dst)
        groups.setdefault((b_src, b_dst), []).append((r_src, r_dst))
    v, d = _batched(v, d, size)
    members = [slicing.index_in_dim(v, b, d, keepdims=False) for b in range(size)]
    here = parallel.axis_index(rest)
    out = [lax.full_like(member, 0) for member in members]
    for (b_src, b_dst), pairs in groups.items():
        moved = parallel.ppermute(members[b_src], rest, pairs)
        keep = np.zeros(np.prod(rest_sizes, dtype=int), dtype=bool)
        keep[[r_dst for _, r_dst in pairs]] = True
        received = slicing.dynamic_index_in_dim(lax.asarray(keep), here, 0, keepdims=False)
        out[b_dst] = lax.select(lax.broadcast_in_dim(received, moved.shape, ()), moved, out[b_dst])
    return lax.concatenate([lax.expand_dims(o, (d,)) for o in out], d), d


def _ppermute_batcher(axis_data: Any, vals_in: Any, dims_in: Any, axis_name: Any, perm: Any) -> tuple:
    from jax._src.lax import parallel

    (v,), (d,) = vals_in, dims_in
    names = _names(axis_name)
    if axis_data.name in names:
        if len(names) > 1 and "vmap-axis-ppermute-tuple" in _ppermute_fixes:
            return _over_a_tuple(v, d, axis_data.size, axis_data.name, names, perm)
        if len(names) == 1 and "vmap-axis-ppermute-partial-perm" in _ppermute_fixes:
            return _over_the_vmap_axis(v, d, axis_data.size, perm)
    return parallel._ppermute_batcher(axis_data, vals_in, dims_in, axis_name, perm)


def _install_ppermute(finding: str) -> None:
    from jax._src.interpreters import batching
    from jax._src.lax import parallel

    _ppermute_fixes.add(finding)
    batching.fancy_primitive_batchers[parallel.ppermute_p] = _ppermute_batcher


def vmap_axis_ppermute_tuple() -> None:
    """Finding 18: ppermute over a tuple holding a vmap axis moves values along every axis of the tuple.

    The stock batcher binds ppermute with the same perm over the tuple's other axes, whose indices mean
    something else: a silent wrong answer, or a ValueError for a valid perm.
    """
    _install_ppermute("vmap-axis-ppermute-tuple")


def vmap_axis_ppermute_partial_perm() -> None:
    """Finding 19: ppermute over a vmap axis takes a partial perm; members no pair writes to get zeros.

    The stock batcher asserts the perm has one pair per member.
    """
    _install_ppermute("vmap-axis-ppermute-partial-perm")


def vmap_axis_pbroadcast_take() -> None:
    """Finding 20: pbroadcast over a vmap axis takes the source's member with an index array.

    The stock batcher hands `take` a list, which a jax array refuses.
    """
    import numpy as np
    from jax._src.interpreters import batching
    from jax._src.lax import parallel

    stock = parallel._pbroadcast_batcher

    def batcher(axis_data: Any, vals_in: Any, dims_in: Any, axis_name: Any, source: int) -> tuple:
        (v,), (d,) = vals_in, dims_in
        if d is None or _names(axis_name) != (axis_data.name,):
            return stock(axis_data, vals_in, dims_in, axis_name=axis_name, source=source)
        assert 0 <= source < axis_data.size, "collective broadcast doesn't fit in the axis size!"
        return v.take(np.full(axis_data.size, source), d), d

    batching.fancy_primitive_batchers[parallel.pbroadcast_p] = batcher


FIXES: dict[str, Callable[[], None]] = {
    "vmap-axis-ppermute-tuple": vmap_axis_ppermute_tuple,
    "vmap-axis-ppermute-partial-perm": vmap_axis_ppermute_partial_perm,
    "vmap-axis-pbroadcast-take": vmap_axis_pbroadcast_take,
}
