"""`Mesh`: named axes over devices in row-major order, and the groups a collective runs over."""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim._budget import DEVICE_BYTES, check_device_count, check_memory
from sim._errors import InvalidArgumentError, InvalidTypeError

AxisName = Hashable | tuple


@dataclass(frozen=True)
class Group:
    """The devices one collective call runs over, as seen from one member.

    `members[i]` is the device id of group index i; `index` is the caller's own group index.
    """

    members: tuple[int, ...]
    index: int

    @property
    def size(self) -> int:
        return len(self.members)


class Mesh:
    """Named axes with sizes; device ids run row-major over the axes, as in `jax.sharding.Mesh`.

    >>> Mesh({'x': 2, 'y': 2}).coords(3)
    {'x': 1, 'y': 1}
    """

    def __init__(self, axes: dict[str, int], network=None, copy_cost=None,
                 max_memory_bytes: int | None = None, placement: dict[str, int] | Sequence[int] | None = None
                 ) -> None:
        """A mesh of `axes` (name -> size), checked before anything is allocated.

        `network` (a `sim.Network`; fully connected by default) must hold exactly the mesh's devices. By
        default mesh device d is topology device d (both row-major), so mesh axes lie along the topology's
        dimensions in order; `placement` says otherwise: a dict mapping every mesh axis to the topology
        dimension it lies along (sizes equal), or a sequence giving each mesh device's topology device.

        Raises:
            InvalidArgumentError: a size is not a positive integer, the mesh has more than `sim.MAX_DEVICES`
                (2**20) devices, or its devices alone (`sim.DEVICE_BYTES` each) need more than
                `max_memory_bytes` (default: half the machine's memory, see `sim.default_max_memory_bytes`),
                which every run on the mesh then holds its device memories to (`sim.Simulation`);
                the network cannot hold the mesh, or `placement` is not a placement of it.
        """
        if not isinstance(axes, dict) or not axes:
            raise InvalidTypeError(f"axes={axes!r} must be a non-empty dict of axis name -> size")
        for name, size in axes.items():
            if not isinstance(size, (int, np.integer)) or size < 1:
                raise InvalidArgumentError(f"axes[{name!r}]={size!r} must be a positive integer")
        self.shape: dict[str, int] = {name: int(size) for name, size in axes.items()}
        self.axis_names: tuple[str, ...] = tuple(self.shape)
        self.size = math.prod(self.shape.values())  # Python ints: no overflow before the check
        check_device_count(self.shape, self.size)
        check_memory(f"a mesh of {self.size} devices", {"devices": self.size * DEVICE_BYTES}, max_memory_bytes)
        self.max_memory_bytes = max_memory_bytes  # every run on the mesh holds its memories to it (None: default)
        self._grid = np.arange(self.size).reshape(tuple(self.shape.values()))
        self._groups: dict[tuple, list[Group]] = {}
        self._coords: dict[int, dict[str, int]] = {}  # each device's coordinates, spelled once per mesh
        self._names: dict[str, tuple[str, ...]] = {}  # each axis name checked once per mesh
        from sim.network._network import DEFAULT_COPY_COST, Network

        network = Network.fully_connected() if network is None else network
        if not isinstance(network, Network):
            raise InvalidTypeError(f"network={network!r} must be a sim.Network")
        self.network = network.sized(self.size)
        self.placement = None if placement is None else place(self.shape, self.network, placement)
        self.copy_cost = DEFAULT_COPY_COST if copy_cost is None else copy_cost

    def __repr__(self) -> str:
        return f"Mesh({self.shape})"

    @property
    def devices(self) -> range:
        """Device ids, 0 .. size-1."""
        return range(self.size)

    def coords(self, device: int) -> dict[str, int]:
        """The mesh coordinates of `device`."""
        return dict(self._coords_of(device))

    def _coords_of(self, device: int) -> dict[str, int]:
        """`coords(device)`, kept per mesh (not to be changed by the caller)."""
        found = self._coords.get(device)
        if found is None:
            position = np.unravel_index(device, self._grid.shape)
            found = self._coords[device] = {name: int(i) for name, i in zip(self.axis_names, position)}
        return found

    def route(self, src: int, dst: int) -> tuple:
        """The links (hashable ids, see `sim.Network.route`) a message from device `src` to device `dst`
        crosses, in order, after placing both on the topology."""
        if self.placement is not None:
            src, dst = int(self.placement[src]), int(self.placement[dst])
        return self.network.route(src, dst)

    def routes(self, src: int, dst: int) -> tuple[tuple[tuple, float], ...]:
        """Every path a message from device `src` to device `dst` is split over, with the share of its bytes
        each carries (see `sim.Network.routes`), after placing both on the topology."""
        if self.placement is not None:
            src, dst = int(self.placement[src]), int(self.placement[dst])
        return self.network.routes(src, dst)

    def axis_names_of(self, axis_name: AxisName) -> tuple[str, ...]:
        """`axis_name` as a tuple of known names; raises for unknown or repeated names."""
        found = self._names.get(axis_name) if isinstance(axis_name, str) else None
        if found is None:
            found = self._checked_names(axis_name)
            if isinstance(axis_name, str):
                self._names[axis_name] = found
        return found

    def _checked_names(self, axis_name: AxisName) -> tuple[str, ...]:
        names = axis_name if isinstance(axis_name, (tuple, list)) else (axis_name,)
        if not names:
            raise InvalidArgumentError(f"axis_name={axis_name!r} must name at least one mesh axis")
        for name in names:
            if name not in self.shape:
                raise InvalidArgumentError(
                    f"axis_name={axis_name!r}: unknown axis {name!r}; the mesh has axes {self.axis_names}"
                )
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"axis_name={axis_name!r} must not repeat an axis; the mesh has axes "
                                       f"{self.axis_names}")
        return tuple(names)

    def axis_size(self, axis_name: AxisName) -> int:
        """The number of devices along `axis_name` (the product for a tuple of names)."""
        return math.prod(self.shape[n] for n in self.axis_names_of(axis_name))

    def axis_index(self, device: int, axis_name: AxisName) -> int:
        """`device`'s index along `axis_name`; for a tuple, row-major over the names in tuple order."""
        names = self.axis_names_of(axis_name)
        coords = self._coords_of(device)
        index = 0
        for name in names:
            index = index * self.shape[name] + coords[name]
        return index

    def axis_peers(self, device: int, axis_name: AxisName) -> tuple[int, ...]:
        """The devices that differ from `device` only along `axis_name`, ordered by axis index."""
        names = self.axis_names_of(axis_name)
        coords = self.coords(device)
        peers = []
        for values in itertools.product(*(range(self.shape[n]) for n in names)):
            coords.update(zip(names, values))
            peers.append(int(self._grid[tuple(coords[n] for n in self.axis_names)]))
        return tuple(peers)

    def group(self, device: int, axis_name: AxisName, axis_index_groups=None) -> Group:
        """The group `device` belongs to for a collective over `axis_name` with `axis_index_groups`.

        Every device's group for one `(axis_name, axis_index_groups)` is computed and checked once per mesh;
        the members of one group share one tuple, so a rendezvous can key on it cheaply.
        """
        key = (_hashable(axis_name), _hashable(axis_index_groups))
        try:
            table = self._groups.get(key)
        except TypeError:  # not a name or groups at all: let the checks say what is wrong
            return self._group_table(axis_name, axis_index_groups)[device]
        if table is None:
            table = self._groups[key] = self._group_table(axis_name, axis_index_groups)
        return table[device]

    def _group_table(self, axis_name: AxisName, axis_index_groups) -> list[Group]:
        """Every device's group, by device id."""
        names = self.axis_names_of(axis_name)
        # devices along the named axes form the last dimension, the other axes the leading ones
        ids = np.moveaxis(self._grid, [self.axis_names.index(n) for n in names],
                          list(range(len(self.shape) - len(names), len(self.shape))))
        rows = ids.reshape(-1, self.axis_size(names)).tolist()
        index_groups = (None if axis_index_groups is None
                        else check_axis_index_groups(axis_index_groups, len(rows[0]), axis_name))
        table: list[Group] = [None] * self.size  # type: ignore[list-item]
        for row in rows:
            for picked in [list(range(len(row)))] if index_groups is None else index_groups:
                members = tuple(row[i] for i in picked)
                for index, member in enumerate(members):
                    table[member] = Group(members, index)
        return table


def place(shape: dict[str, int], network, placement: dict[str, int] | Sequence[int]) -> np.ndarray:
    """Each mesh device's topology device under `placement` (see `Mesh`), checked."""
    size = math.prod(shape.values())
    if isinstance(placement, dict):
        topology = network.shape or (size,)
        dims = [placement.get(name) for name in shape]
        ok = (set(placement) == set(shape) and sorted(dims) == list(range(len(topology)))
              and all(shape[name] == topology[placement[name]] for name in shape))
        if not ok:
            raise InvalidArgumentError(
                f"placement={placement!r} must map every mesh axis of {shape} to a distinct dimension of "
                f"{network.topology} shape={topology} of the same size")
        grid = np.arange(size).reshape(topology)
        return np.ascontiguousarray(np.transpose(grid, dims)).reshape(-1)
    try:
        order = np.array(placement, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError):
        raise InvalidTypeError(f"placement={placement!r} must be a dict of axis -> dimension or a sequence "
                               f"of device ids") from None
    if len(order) != size or sorted(order.tolist()) != list(range(size)):
        raise InvalidArgumentError(f"placement={placement!r} must list every topology device 0..{size - 1} "
                                   f"exactly once, one per mesh device")
    return order


def _hashable(value: Any) -> Hashable:
    """`value` (an axis name, a list of names, or nested lists of ints) as a hashable key. A number is keyed
    with its type: 0.0 and True hash as 0 does, and groups of them must reach the checks, not a table cached
    for ints."""
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, np.ndarray):
        return _hashable(value.tolist())
    if isinstance(value, str):
        return value
    return type(value), value


def check_axis_index_groups(groups: Sequence[Sequence[int]], axis_size: int, axis_name) -> list[list[int]]:
    """Validate `groups` against an axis of `axis_size`: every index exactly once, equal sizes."""
    rule = f"axis_index_groups={groups!r} must be a list of lists of ints"
    try:
        rows = [list(group) for group in groups]
    except TypeError:
        raise InvalidTypeError(rule) from None
    for k, group in enumerate(rows):
        for j, i in enumerate(group):
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
                raise InvalidTypeError(f"{rule}: axis_index_groups[{k}][{j}]={i!r} is not an int")
    groups = [[int(i) for i in group] for group in rows]
    where = f"axis_index_groups={groups} over axis_name={axis_name!r} of size {axis_size}"
    if not groups or any(len(g) == 0 for g in groups):
        raise InvalidArgumentError(f"{where}: groups must be non-empty")
    sizes = [len(g) for g in groups]
    if len(set(sizes)) != 1:
        raise InvalidArgumentError(f"{where}: all groups must be the same size, got sizes {sizes} (in group order)")
    flat = sorted(i for g in groups for i in g)
    if flat != list(range(axis_size)):
        missing = sorted(set(range(axis_size)) - set(flat))
        repeated = sorted({i for i in flat if flat.count(i) > 1})
        extra = sorted(i for i in set(flat) if not 0 <= i < axis_size)
        raise InvalidArgumentError(
            f"{where}: groups must cover every axis index exactly once "
            f"(missing {missing}, repeated {repeated}, out of range {extra})"
        )
    return groups
