"""How a call's `algorithm=` becomes one of its collective's `Algorithm` records, and the teams they run over.

Every collective takes `algorithm=`: 'direct' (the default, XLA:CPU's order, bit for bit) and 'auto' (the
fastest of the others for the call's bytes, group and network by `collectives._cost`), and some take more
(each collective's `Definition.algorithms`). 'per_axis' runs the operation one mesh axis at a time when
`axis_name` names several axes (group index row-major over the names, as `Mesh.group` orders it); over one
axis, or with `axis_index_groups` (whose groups need not form a grid), it falls back to its inner algorithm
over the whole group (`Algorithm.inner`: 'ring' for all_gather and the all-reduces, 'direct' for all_to_all).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import sim
from collectives._algorithm import Algorithm
from collectives._ring_order import ring_order


def named(algorithms: Sequence[Algorithm], name: Any) -> Algorithm | None:
    """The record of `algorithms` called `name` (what a user passes as `algorithm=`), or None."""
    return next((a for a in algorithms if a.name == name), None)


def check_algorithm(op: str, device: int, algorithm: Any, group_size: int,
                    algorithms: Sequence[Algorithm]) -> Algorithm:
    """The record of `algorithms` named `algorithm`; raise unless there is one and it fits the group size."""
    found = named(algorithms, algorithm) if isinstance(algorithm, str) else None
    if found is None:
        raise sim.InvalidArgumentError(
            f"device {device}: {op}: algorithm={algorithm!r} must be one of {tuple(a.name for a in algorithms)}")
    if not found.fits(group_size):
        raise sim.InvalidArgumentError(
            f"device {device}: {op}: algorithm={algorithm!r} needs a group size that is a power of two, "
            f"got {group_size}; use algorithm='ring', 'direct' or 'auto'")
    return found


def axes_shape(mesh: sim.Mesh, axis_name: Any, axis_index_groups: Any) -> tuple[int, ...]:
    """The sizes of the named mesh axes, in `axis_name` order (the grid 'per_axis' walks); one size with groups."""
    if axis_index_groups is not None:
        return (len(axis_index_groups[0]),)
    names = axis_name if isinstance(axis_name, (tuple, list)) else (axis_name,)
    return tuple(mesh.shape[name] for name in names)


def candidates(algorithms: Sequence[Algorithm], group_size: int, shape: tuple[int, ...], mesh: Any = None,
               members: Sequence[int] = ()) -> tuple[Algorithm, ...]:
    """What 'auto' chooses among: every other record that fits the group (grid ones over several axes only;
    in-network ones only where `mesh`'s switch reduces). Node-by-node ones are candidates everywhere: on a
    group within one node 'hierarchical' is a direct reduce-scatter and a direct all-gather, the fastest
    all-reduce of mid-sized operands on a switch or dedicated links."""
    reduces = mesh is not None and mesh.network.switch_reduces
    return tuple(a for a in algorithms if not a.auto and a.fits(group_size) and (not a.grid or len(shape) > 1)
                 and (not a.in_network or reduces))


def resolve(port: sim.Port, algorithms: Sequence[Algorithm], algorithm: str, size_bytes: int,
            shape: tuple[int, ...]) -> Algorithm:
    """The record this call runs: the one named `algorithm`, or for 'auto' the cost model's pick.

    Worked out once per call (`Port.once` under the key 'algorithm', whose name the engine copies into the
    call's `sim.CallRecord`), from what every member knows statically: the group, the bytes, the network.
    A grid algorithm over a one-axis grid comes back as its inner algorithm (`Algorithm.over`).
    """
    def pick() -> str:
        asked = named(algorithms, algorithm)
        if not asked.auto:
            return asked.over(shape).name
        from collectives._cost import fastest  # the cost model reads the network only when asked
        mesh, n = port.mesh, port.group.size
        choices = candidates(algorithms, n, shape, mesh, port.group.members)
        chosen = choices[0] if len(choices) == 1 else fastest(choices, mesh, port.group.members, shape, size_bytes)
        return chosen.over(shape).name
    return named(algorithms, port.once("algorithm", pick))


@dataclass(frozen=True)
class Team:
    """Members that run one step pattern together (a group, or its members along one mesh axis).

    `members[i]` is the device id of team position i; `index` is the caller's position. `order[i]` is the
    group (or axis) index of team position i: the identity unless the team goes round in another order
    (`ring_team`), in which case position-indexed data comes from group-indexed data by `arrange`.
    """

    members: tuple[int, ...]
    index: int
    order: tuple[int, ...] | None = None

    @property
    def size(self) -> int:
        return len(self.members)

    def at(self, offset: int) -> int:
        """The device id `offset` positions after the caller's, round the team."""
        return self.members[(self.index + offset) % len(self.members)]

    def reversed(self) -> Team:
        """The same members in the opposite ring direction."""
        order = None if self.order is None else self.order[::-1]
        return Team(self.members[::-1], len(self.members) - 1 - self.index, order)

    def arrange(self, items: Sequence[Any]) -> list[Any]:
        """`items` (one per group index) in team position order: position i gets `items[order[i]]`.

        >>> Team((5, 7, 6), 0, (0, 2, 1)).arrange(["a", "b", "c"])
        ['a', 'c', 'b']
        """
        return list(items) if self.order is None else [items[g] for g in self.order]


def whole(port: sim.Port) -> Team:
    """The call's whole group as a team, in group order."""
    return Team(port.group.members, port.group.index)


def ring_team(port: sim.Port) -> Team:
    """The call's whole group as a team in the order a ring visits it (`collectives._ring_order.ring_order`:
    a cycle of physical neighbours on a ring or torus where one exists, never more hops than group order)."""
    members = port.group.members

    def visit() -> tuple[tuple[int, ...] | None, tuple[int, ...], dict[int, int]]:
        order = ring_order(port.mesh, members)
        if order == tuple(range(len(members))):
            return None, members, {}
        return order, tuple(members[g] for g in order), {g: t for t, g in enumerate(order)}
    order, ringed, position = port.once("ring order", visit)  # worked out once per call, not per member
    if order is None:
        return whole(port)
    return Team(ringed, position[port.group.index], order)


def axis_teams(port: sim.Port, shape: tuple[int, ...]) -> list[tuple[int, Team]]:
    """(grid axis, the caller's team along it) for every axis of `shape`, the minor axis first.

    The group index is row-major over `shape`; the team along axis k holds the members whose indices
    differ from the caller's only in coordinate k, ordered by that coordinate.
    """
    members, me = port.group.members, port.group.index
    coords = list(np.unravel_index(me, shape))
    teams = []
    for k in reversed(range(len(shape))):
        positions = [int(np.ravel_multi_index(tuple(coords[:k] + [t] + coords[k + 1:]), shape))
                     for t in range(shape[k])]
        teams.append((k, Team(tuple(members[i] for i in positions), int(coords[k]))))
    return teams


def blocks_of(view: np.ndarray, axis: int, count: int, tiled: bool) -> np.ndarray:
    """A view of `view` with its `count` blocks along `axis` as the leading dimension.

    Tiled, axis `axis` is cut into `count` equal blocks; untiled, it is the block index itself. The
    result has shape (count, *block shape), so block k is one member's chunk where it lands.
    """
    if tiled:
        shape = view.shape
        view = view.reshape(shape[:axis] + (count, shape[axis] // count) + shape[axis + 1:])
    return np.moveaxis(view, axis, 0)


def group_index(port: sim.Port, device: int) -> int:
    """The group index of member `device` of the call's group."""
    return port.once("group index", lambda: {d: i for i, d in enumerate(port.group.members)})[device]
