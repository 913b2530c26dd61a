"""Which node each member of a group sits in: the two-level layout the hierarchical algorithms work over.

A network with nodes (`sim.Network.hierarchical` and its presets, `h100-ib`) has a `node_size`: topology
devices `u * node_size .. (u + 1) * node_size - 1` form node u, joined by a fast switch, and the nodes by a
slower fabric. A mesh device's topology device is its `placement` (the identity without one). `node_grid`
lays a group out as a grid (nodes, members per node): its rows are the nodes in order of their first member,
each row the node's members in group order; column j holds the members of local rank j, one per node.

Where there is no such grid (a network without nodes, or a group spread over nodes unevenly) the whole
group is one node: `(1, p)`.

>>> import sim
>>> mesh = sim.Mesh({"x": 8}, network=sim.Network.hierarchical(node_size=4))
>>> node_grid(mesh, (1, 5, 2, 6))
((0, 2, 1, 3), (2, 2))
>>> node_grid(sim.Mesh({"x": 4}), (0, 1, 2, 3))
((0, 1, 2, 3), (1, 4))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["node_grid"]


def node_grid(mesh: Any, members: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, int]]:
    """(group indices node by node, (nodes, members per node)) for `members` (mesh devices) on `mesh`'s
    network; the group as one node (identity, (1, p)) without nodes or where the nodes hold unequal shares."""
    p = len(members)
    whole = tuple(range(p)), (1, p)
    node_size = getattr(mesh.network, "node_size", None)
    placement = getattr(mesh, "placement", None)
    if not node_size or p == 0:
        return whole
    rows: dict[int, list[int]] = {}
    for g, device in enumerate(members):
        topology_device = int(device) if placement is None else int(placement[device])
        rows.setdefault(topology_device // node_size, []).append(g)
    counts = {len(row) for row in rows.values()}
    if len(counts) != 1:
        return whole
    return tuple(g for row in rows.values() for g in row), (len(rows), counts.pop())
