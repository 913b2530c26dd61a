"""Trees and chains that follow the topology: the order of members that crosses the fewest links.

A broadcast's chain and binomial tree, and Bruck's all_to_all, send between members a fixed distance apart
in some order of the group. In group (row-major) order on a torus, members 1 apart are often several hops
apart (the end of one row to the start of the next); round `collectives._ring_order.ring_order` they are
neighbours. `rooted_order` and `cyclic_order` count the links every message of the pattern crosses
(weighted by its bytes) in group order and round the ring (both ways for a rooted pattern, which starts at
its source), and keep the fewest, group order on a tie: never more hops than row-major order.

>>> import sim
>>> mesh = sim.Mesh({"x": 4, "y": 4}, network=sim.Network.torus((4, 4), wraparound=True))
>>> listed = tuple(range(16))
>>> around = tuple(listed[i] for i in rooted_order(mesh, listed, "chain"))
>>> hops(mesh, listed, chain_pairs(16)), hops(mesh, around, chain_pairs(16))
(18.0, 15.0)
"""

from __future__ import annotations

from collections.abc import Sequence

import sim
from collectives._ring_order import ring_order

Pairs = list[tuple[int, int, float]]  # (from position, to position, bytes it carries)


def chain_pairs(p: int) -> Pairs:
    """A chain from position 0: r to r + 1."""
    return [(r, r + 1, 1.0) for r in range(p - 1)]


def tree_pairs(p: int) -> Pairs:
    """A binomial tree from position 0: in step k every position r below 2^k sends to r + 2^k."""
    found, gap = [], 1
    while gap < p:
        found += [(r, r + gap, 1.0) for r in range(gap) if r + gap < p]
        gap *= 2
    return found


def bruck_pairs(p: int) -> Pairs:
    """Bruck's steps: every position i to i + 2^k, carrying the slots whose index has bit k set."""
    found, gap = [], 1
    while gap < p:
        moving = float(sum(1 for j in range(p) if j & gap))
        found += [(i, (i + gap) % p, moving) for i in range(p)]
        gap *= 2
    return found


def hops(mesh: sim.Mesh, devices: Sequence[int], pairs: Pairs) -> float:
    """Links crossed by every message of `pairs` between `devices` (by position), each weighted by its bytes."""
    return sum(weight * len(mesh.route(devices[a], devices[b])) for a, b, weight in pairs)


def _fewest(mesh: sim.Mesh, members: Sequence[int], orders: list[tuple[int, ...]], pairs: Pairs) -> tuple[int, ...]:
    best, fewest = orders[0], hops(mesh, members, pairs)
    for order in orders[1:]:
        count = hops(mesh, tuple(members[i] for i in order), pairs)
        if count < fewest:
            best, fewest = order, count
    return best


def rooted_order(mesh: sim.Mesh, listed: Sequence[int], kind: str) -> tuple[int, ...]:
    """The positions of `listed` (a broadcast's members, its source first) in the order its 'chain' or 'tree'
    visits them: group order or round the ring from the source either way, whichever crosses fewer links."""
    p = len(listed)
    identity = tuple(range(p))
    ring = ring_order(mesh, listed)
    start = ring.index(0)
    forward = ring[start:] + ring[:start]
    backward = forward[:1] + forward[1:][::-1]
    return _fewest(mesh, listed, [identity, forward, backward], (chain_pairs if kind == "chain" else tree_pairs)(p))


def cyclic_order(mesh: sim.Mesh, members: Sequence[int]) -> tuple[int, ...]:
    """The group indices of `members` in the order Bruck's all_to_all goes round: group order or the ring's,
    whichever crosses fewer links (weighted by the slots each step carries)."""
    p = len(members)
    return _fewest(mesh, members, [tuple(range(p)), ring_order(mesh, members)], bruck_pairs(p))
