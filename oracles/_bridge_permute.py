"""A permutation over a tuple of mesh axes as JAX 0.10.2 runs it (FINDINGS.md 29).

JAX 0.10.2 numbers the pairs of `ppermute` (and of `psend` / `precv`, which share its lowering) over a tuple of
mesh axes in the mesh's axis order, where `axis_index` and `all_gather` number the tuple in its own order:
on a mesh ('a', 'c') of 2 x 2, index 1 of ('c', 'a') is device (a=1, c=0) for `axis_index` and device (a=0,
c=1) for ppermute. meshsim numbers every collective as `axis_index` does. So that the bridge returns what JAX
returns, a pair (i, j) of JAX's is run as the pair of the same two devices in meshsim's numbering, and the
tuple indices whose sender differs from the one the pairs name are reported
(`oracles._bridge_diagnostics.renumbered`).

>>> jax_pairs(((0, 1), (1, 2), (2, 3), (3, 0)), ("c", "a"), {"a": 2, "c": 2})
(((0, 2), (2, 1), (1, 3), (3, 0)), (1, 2, 3))
>>> jax_pairs(((0, 1), (1, 0)), ("a", "c"), {"a": 2, "c": 2}) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

PERMUTES = frozenset({"ppermute", "psend", "precv"})


def jax_pairs(perm: Sequence[tuple[int, int]], names: tuple[str, ...], mesh: Mapping[str, int]
              ) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]] | None:
    """Where JAX's numbering of `perm` over the mesh axes `names` moves values between other devices than
    `axis_index`'s numbering does: the pairs, in `axis_index`'s numbering, of the devices JAX pairs, and the
    indices (in that numbering) whose sender differs; None where the two numberings agree on `perm`."""
    axes = list(mesh)
    order = sorted(range(len(names)), key=lambda k: axes.index(names[k]))
    sizes = [mesh[name] for name in names]
    n = int(np.prod(sizes))
    tuple_of = np.arange(n).reshape(sizes).transpose(order).reshape(-1).tolist()  # JAX's index -> the tuple's
    pairs = tuple((tuple_of[s % n], tuple_of[d % n]) for s, d in perm)
    jax_sender = {d: s for s, d in pairs}
    named_sender = {d % n: s % n for s, d in perm}
    differ = tuple(sorted(r for r in jax_sender.keys() | named_sender.keys()
                          if jax_sender.get(r) != named_sender.get(r)))
    return (pairs, differ) if differ else None


def devices_at(indices: Sequence[int], names: tuple[str, ...], mesh: Mapping[str, int]) -> tuple[int, ...]:
    """The devices (row-major over the mesh) whose index along the tuple `names` is one of `indices`."""
    coords = np.indices(tuple(mesh.values()))
    along = np.ravel_multi_index([coords[list(mesh).index(name)] for name in names], [mesh[n] for n in names])
    return tuple(int(d) for d in np.flatnonzero(np.isin(along.reshape(-1), list(indices))))
