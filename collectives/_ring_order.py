"""The order in which a ring visits a group's members: a cycle of physical neighbours where the topology has one.

On a ring or torus network the members' topology coordinates usually form a grid (every combination of a few
values along a few dimensions). `ring_order` tries a few closed walks over that grid and keeps the one whose
steps cross the fewest links in total (`cycle_hops`, the route of every step and of the step back to the
start), preferring group order at a tie, so a ring is never longer than in group (row-major) order:

- group order itself;
- the snake (boustrophedon): the grid's last dimension forwards, then backwards on the next line, and so on,
  the direction of each dimension flipping whenever a higher one steps; on a torus whose wraparound joins
  its ends this is a Hamiltonian cycle of neighbours when the first varying dimension has an even count;
- the comb, for each varying dimension d: along d from 0 to the end at the snake position 0 of the other
  dimensions, then the other dimensions' snake on d's far end back and forth towards d = 1, and home along
  d = 0: a Hamiltonian cycle of neighbours on any grid of consecutive coordinates with an even number of
  points, wraparound or not.

Other topologies (fully connected, switch, hierarchical) keep group order.

>>> import sim
>>> mesh = sim.Mesh({"X": 4, "Y": 4}, network=sim.Network.torus((4, 4), wraparound=False))
>>> members = tuple(range(16))
>>> cycle_hops(mesh, members), cycle_hops(mesh, tuple(members[i] for i in ring_order(mesh, members)))
(30, 16)
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

import sim

RINGS = ("ring", "bidirectional_ring")  # the algorithms whose whole-group ring visits members in `ring_order`


def cycle_hops(mesh: sim.Mesh, devices: Sequence[int]) -> int:
    """Links crossed by a message from each of `devices` to the next, the last one's back to the first."""
    n = len(devices)
    return sum(len(mesh.route(devices[i], devices[(i + 1) % n])) for i in range(n)) if n > 1 else 0


def ring_order(mesh: sim.Mesh, members: Sequence[int]) -> tuple[int, ...]:
    """The group indices of `members` in the order a ring visits them (see the module docstring); group order
    on anything but a `sim.Mesh` (a stand-in with routes only)."""
    if not isinstance(mesh, sim.Mesh):
        return tuple(range(len(members)))
    placement = None if mesh.placement is None else tuple(int(d) for d in mesh.placement)
    return _ring_order(mesh.network, placement, tuple(int(m) for m in members))


@lru_cache(maxsize=256)
def _ring_order(network: sim.Network, placement: tuple[int, ...] | None,
                members: tuple[int, ...]) -> tuple[int, ...]:
    identity = tuple(range(len(members)))
    if network.topology not in ("ring", "torus") or len(members) < 3:
        return identity
    mesh = _Placed(network, placement)
    best, fewest = identity, cycle_hops(mesh, members)
    for order in _candidates(network.shape, [mesh.place(m) for m in members]):
        hops = cycle_hops(mesh, tuple(members[i] for i in order))
        if hops < fewest:
            best, fewest = order, hops
    return best


class _Placed:
    """Routes between mesh devices under `placement` (what `sim.Mesh.route` does, from hashable parts)."""

    def __init__(self, network: sim.Network, placement: tuple[int, ...] | None) -> None:
        self.network, self.placement = network, placement

    def place(self, device: int) -> int:
        return device if self.placement is None else self.placement[device]

    def route(self, src: int, dst: int) -> tuple:
        return self.network.route(self.place(src), self.place(dst))


def _candidates(shape: tuple[int, ...], places: list[int]) -> list[tuple[int, ...]]:
    """Orders (group indices) to try: the snake and the combs of the members' coordinate grid, if they form one."""
    coords = [tuple(int(c) for c in np.unravel_index(p, shape)) for p in places]
    varying = [k for k in range(len(shape)) if len({c[k] for c in coords}) > 1]
    values = [sorted({c[k] for c in coords}) for k in varying]
    grid = [tuple(v.index(c[k]) for k, v in zip(varying, values)) for c in coords]
    counts = tuple(len(v) for v in values)
    if len(set(grid)) != len(grid) or len(grid) != int(np.prod(counts)):
        return []
    where = {g: i for i, g in enumerate(grid)}
    walks = [snake(counts)] + [comb(counts, d) for d in range(len(counts))]
    return [tuple(where[g] for g in walk) for walk in walks if walk is not None]


def snake(counts: Sequence[int]) -> list[tuple[int, ...]]:
    """Every point of the grid `counts`, each a neighbour of the one before (boustrophedon order).

    >>> snake((2, 3))
    [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0)]
    """
    if not counts:
        return [()]
    inner, walk = snake(counts[1:]), []
    for i in range(counts[0]):
        walk += [(i, *rest) for rest in (inner if i % 2 == 0 else inner[::-1])]
    return walk


def comb(counts: Sequence[int], d: int) -> list[tuple[int, ...]] | None:
    """A closed walk of neighbours through every point of the grid `counts`, its spine along dimension `d`;
    None unless the other dimensions' snake has an even length and d has at least two points.

    >>> comb((2, 2), 0)
    [(0, 0), (1, 0), (1, 1), (0, 1)]
    """
    others = snake(tuple(c for k, c in enumerate(counts) if k != d))
    size = counts[d]
    if size < 2 or len(others) % 2 or len(others) < 2:
        return None
    put = lambda t, rest: (*rest[:d], t, *rest[d:])
    walk = [put(t, others[0]) for t in range(size)]
    for j, rest in enumerate(others[1:]):
        line = range(size - 1, 0, -1) if j % 2 == 0 else range(1, size)
        walk += [put(t, rest) for t in line]
    return walk + [put(0, rest) for rest in others[:0:-1]]
