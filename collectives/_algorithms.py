"""Which message patterns each collective offers (`algorithm=`), their rules, and the teams they run over.

Every collective takes `algorithm=`: 'direct' (the default, XLA:CPU's order, bit for bit) and 'auto' (the
fastest of the others for the call's bytes, group and network by `collectives._cost`), and some take more.
'per_axis' runs the operation one mesh axis at a time when `axis_name` names several axes (group index
row-major over the names, as `Mesh.group` orders it); over one axis, or with `axis_index_groups` (whose
groups need not form a grid), it falls back to its inner algorithm over the whole group: 'ring' for
all_gather and the all-reduces, 'direct' for all_to_all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import sim

AUTO = "auto"
GATHER = ("direct", "ring", "bidirectional_ring", "recursive_doubling", "per_axis", AUTO)
REDUCE = ("direct", "ring", "recursive_doubling", "bidirectional_ring", "rabenseifner", "per_axis", AUTO)
SCATTER = ("direct", "ring", "recursive_halving", AUTO)
EXCHANGE = ("direct", "pairwise", "bruck", "per_axis", AUTO)
RAGGED = ("direct", "pairwise", AUTO)
DIRECT_ONLY = ("direct", AUTO)

POWER_OF_TWO = frozenset({"recursive_doubling", "recursive_halving", "rabenseifner"})
_INNER = {"all_gather": "ring", "all_gather_invariant": "ring", "all_to_all": "direct"}  # per_axis's fallback


def algorithm_fits(algorithm: str, group_size: int) -> bool:
    """Whether `algorithm` runs on a group of `group_size` members (powers of two where it needs them)."""
    return algorithm not in POWER_OF_TWO or group_size & (group_size - 1) == 0


def check_algorithm(op: str, device: int, algorithm: Any, group_size: int, allowed: Sequence[str]) -> None:
    """Raise unless `algorithm` is one of `allowed` and fits a group of `group_size` members."""
    if not isinstance(algorithm, str) or algorithm not in allowed:
        raise sim.InvalidArgumentError(
            f"device {device}: {op}: algorithm={algorithm!r} must be one of {tuple(allowed)}")
    if not algorithm_fits(algorithm, group_size):
        raise sim.InvalidArgumentError(
            f"device {device}: {op}: algorithm={algorithm!r} needs a group size that is a power of two, "
            f"got {group_size}; use algorithm='ring', 'direct' or 'auto'")


def axes_shape(mesh: sim.Mesh, axis_name: Any, axis_index_groups: Any) -> tuple[int, ...]:
    """The sizes of the named mesh axes, in `axis_name` order (the grid 'per_axis' walks); one size with groups."""
    if axis_index_groups is not None:
        return (len(axis_index_groups[0]),)
    names = axis_name if isinstance(axis_name, (tuple, list)) else (axis_name,)
    return tuple(mesh.shape[name] for name in names)


def inner(op: str, algorithm: str, shape: tuple[int, ...]) -> str:
    """`algorithm`, or per_axis's inner algorithm when the grid has one axis (the documented fallback)."""
    if algorithm == "per_axis" and len(shape) < 2:
        return _INNER.get(op, "ring")
    return algorithm


def resolve(port: sim.Port, op: str, algorithm: str, allowed: Sequence[str], size_bytes: int,
            shape: tuple[int, ...]) -> str:
    """The algorithm this call runs: `algorithm`, or for 'auto' the cost model's pick among `allowed`.

    Worked out once per call (`Port.once` under the key 'algorithm', which the engine copies into the
    call's `sim.CallRecord`), from what every member knows statically: the group, the bytes, the network.
    'per_axis' over a one-axis grid comes back as its inner algorithm (see `inner`).
    """
    def pick() -> str:
        if algorithm != AUTO:
            return algorithm
        from collectives._cost import fastest  # the cost model reads the network only when asked
        mesh, n = port.mesh, port.group.size
        candidates = tuple(a for a in allowed
                           if a != AUTO and algorithm_fits(a, n) and (a != "per_axis" or len(shape) > 1))
        if len(candidates) == 1:
            return candidates[0]
        return fastest(op, candidates, mesh, port.group.members, shape, size_bytes)
    return port.once("algorithm", lambda: inner(op, pick(), shape))


@dataclass(frozen=True)
class Team:
    """Members that run one step pattern together (a group, or its members along one mesh axis).

    `members[i]` is the device id of team position i; `index` is the caller's position.
    """

    members: tuple[int, ...]
    index: int

    @property
    def size(self) -> int:
        return len(self.members)

    def at(self, offset: int) -> int:
        """The device id `offset` positions after the caller's, round the team."""
        return self.members[(self.index + offset) % len(self.members)]

    def reversed(self) -> Team:
        """The same members in the opposite ring direction."""
        return Team(self.members[::-1], len(self.members) - 1 - self.index)


def whole(port: sim.Port) -> Team:
    """The call's whole group as a team."""
    return Team(port.group.members, port.group.index)


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
