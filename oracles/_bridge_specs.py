"""A shard_map's specs as JAX gives them (partitions, `unreduced=`, `reduced=`) and its outputs assembled as
JAX assembles them.

The simulated run returns every device's block of every output (one leading row per device, row-major over
the mesh); `assemble` builds JAX's global array from them: blocks placed by the entry's partitions, the first
device's block along each mesh axis the entry leaves out (as JAX reads a replicated array), and, along the
axes the entry holds `unreduced`, every device's partial value kept, one per leading row. The devices whose
block differs from the one returned along a left-out axis are reported beside the result.

Example on a 2 x 2 mesh {'i': 2, 'j': 2} with blocks b0..b3: `P('i')` gives `concat(b0, b2)` and checks
`b1 == b0`, `b3 == b2`; `P(('i', 'j'))` gives `concat(b0, b1, b2, b3)`; `P(unreduced={'j'})` gives
`stack(b0, b1)` and checks `b2 == b0`, `b3 == b1`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

import sim
from oracles._bridge_diagnostics import differing


@dataclass(frozen=True)
class Entry:
    """One in_specs or out_specs entry: per dimension the mesh axes it splits over, and the axes it holds
    unreduced and reduced."""

    partitions: tuple[tuple[str, ...], ...]
    unreduced: frozenset[str] = frozenset()
    reduced: frozenset[str] = frozenset()

    @classmethod
    def of(cls, spec: Any) -> Entry:
        """The entry of a `jax.sharding.PartitionSpec` (read through `.partitions`, never by iterating it)."""
        try:
            return _entries(spec)
        except TypeError:  # a spec that cannot be a key
            return cls.read(spec)

    @classmethod
    def read(cls, spec: Any) -> Entry:
        """`of(spec)`, read anew."""
        dims = tuple(() if p is None else (tuple(p) if isinstance(p, (tuple, list)) else (p,))
                     for p in spec.partitions)
        return cls(dims, frozenset(spec.unreduced), frozenset(spec.reduced))

    def axes(self) -> tuple[str, ...]:
        """The mesh axes the entry splits over, in the order of its dimensions."""
        return tuple(name for names in self.partitions for name in names)

    def plain(self) -> sim.PartitionSpec:
        """The simulator's spec of the partitions (a reduced or unreduced input is placed whole on each
        device: its value is the same there)."""
        return sim.P(*(None if not n else (n[0] if len(n) == 1 else n) for n in self.partitions))


@lru_cache(maxsize=1024)
def _entries(spec: Any) -> Entry:
    return Entry.read(spec)


def every_device(axes: Mapping[str, int]) -> sim.PartitionSpec:
    """The simulator's spec of a leading dimension holding one row per device, row-major over `axes`."""
    names = tuple(axes)
    return sim.P(names if len(names) > 1 else names[0]) if names else sim.P()


@dataclass(frozen=True)
class Assembled:
    """An output as JAX returns it, and the mesh axes it claims replication along with the devices whose
    block differs from the one returned."""

    value: np.ndarray
    replicated: tuple[str, ...]
    differing: tuple[int, ...]


def assemble(blocks: np.ndarray, axes: Mapping[str, int], entry: Entry, manual: frozenset | None = None
             ) -> Assembled:
    """JAX's global array of one output from each device's block (`blocks[d]`, row-major over `axes`); the
    replication it claims is checked along the `manual` axes it leaves out (by default every axis)."""
    names, sizes = tuple(axes), tuple(axes.values())
    kept, order, shape, left_out = _placement(names, sizes, entry, blocks.shape)
    grid = blocks.reshape(*sizes, *blocks.shape[1:])[kept]
    value = np.ascontiguousarray(grid if order is None else np.transpose(grid, order)).reshape(shape)
    claimed = tuple(k for k in left_out if manual is None or names[k] in manual)
    found = differing(blocks, sizes, claimed) if claimed else ()
    return Assembled(value, tuple(names[k] for k in claimed), found)


@lru_cache(maxsize=1024)
def _placement(names: tuple[str, ...], sizes: tuple[int, ...], entry: Entry, shape: tuple[int, ...]) -> tuple:
    """How `assemble` lays out blocks of `shape` (one leading row per device) for `entry` on a mesh of
    `names` and `sizes`: the index that keeps one block along each left-out axis, the transpose of the kept
    grid (None: none needed), the global shape, and the left-out axes' positions."""
    axes = dict(zip(names, sizes))
    split = entry.axes()
    left_out = tuple(k for k, name in enumerate(names) if name not in split and name not in entry.unreduced)
    kept = tuple(0 if k in left_out else slice(None) for k in range(len(names)))
    kept_names = [name for k, name in enumerate(names) if k not in left_out]
    local = shape[1:]
    order = [kept_names.index(n) for n in names if n in entry.unreduced]
    dims = [axes[n] for n in names if n in entry.unreduced]
    if order:
        dims = [int(np.prod(dims))]
    for dim, dim_names in enumerate(entry.partitions):
        order += [kept_names.index(n) for n in dim_names] + [len(kept_names) + dim]
        dims.append(int(np.prod([axes[n] for n in dim_names], dtype=int)) * local[dim])
    order += list(range(len(kept_names) + len(entry.partitions), len(kept_names) + len(local)))
    dims += list(local[len(entry.partitions):])
    return kept, None if order == sorted(order) else tuple(order), tuple(dims), left_out


def jax_blocks(array: Any, mesh: Any) -> np.ndarray:
    """Each device's shard of the JAX `array`, one leading row per device in `mesh`'s row-major order."""
    position = {d.id: k for k, d in enumerate(np.asarray(mesh.devices).reshape(-1))}
    shards = sorted(array.addressable_shards, key=lambda s: position[s.device.id])
    return np.stack([np.asarray(s.data) for s in shards])
