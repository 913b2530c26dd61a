"""Shardings: which block of a global array each simulated device holds.

`NamedSharding(mesh, spec)` splits dimensions over mesh axes by a `PartitionSpec` and replicates along
the axes the spec leaves out; `SingleDeviceSharding(device)` puts the whole array on one device.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim._errors import InvalidArgumentError, InvalidTypeError
from sim.memory._spec import PartitionSpec
from sim.network._mesh import Mesh

Index = tuple[slice, ...]


@dataclass(frozen=True)
class SingleDeviceSharding:
    """The whole array on device `device`.

    >>> SingleDeviceSharding(0).indices((2, 3))
    {0: (slice(0, 2, None), slice(0, 3, None))}
    """

    device: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.device, int) or isinstance(self.device, bool) or self.device < 0:
            raise InvalidTypeError(f"device={self.device!r} must be a device id (an int >= 0)")

    @property
    def device_set(self) -> tuple[int, ...]:
        return (self.device,)

    def indices(self, shape: tuple[int, ...]) -> dict[int, Index]:
        """The block of a global array of `shape` each device holds."""
        return {self.device: tuple(slice(0, n) for n in shape)}

    def shard_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of one device's block."""
        return tuple(shape)


@dataclass(frozen=True, eq=False)
class NamedSharding:
    """Dimensions split over `mesh` axes by `spec`; devices along axes `spec` omits hold copies.

    Two NamedShardings are equal when they name the same mesh object and equal specs.

    >>> NamedSharding(Mesh({'x': 2}), PartitionSpec('x')).indices((4, 3))[1]
    (slice(2, 4, None), slice(0, 3, None))

    Raises:
        InvalidTypeError: `mesh` is not a `sim.Mesh` or `spec` not a `sim.P`.
        InvalidArgumentError: `spec` names an unknown axis or one axis twice.
    """

    mesh: Mesh
    spec: PartitionSpec

    def __post_init__(self) -> None:
        if not isinstance(self.mesh, Mesh):
            raise InvalidTypeError(f"mesh={self.mesh!r} must be a sim.Mesh")
        if not isinstance(self.spec, PartitionSpec):
            raise InvalidTypeError(f"spec={self.spec!r} must be a sim.P (PartitionSpec)")
        for name in self.spec.axes():
            self.mesh.axis_names_of(name)
        if len(set(self.spec.axes())) != len(self.spec.axes()):
            raise InvalidArgumentError(f"spec={self.spec!r} must not use a mesh axis twice")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NamedSharding) and other.mesh is self.mesh and tuple(other.spec) == tuple(self.spec)

    def __hash__(self) -> int:
        return hash((id(self.mesh), tuple(self.spec)))

    @property
    def device_set(self) -> tuple[int, ...]:
        return tuple(self.mesh.devices)

    def shard_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of one device's block; raises unless every split dimension divides evenly."""
        if len(self.spec) > len(shape):
            raise InvalidArgumentError(f"spec={self.spec!r} has {len(self.spec)} entries but the array has "
                                       f"rank {len(shape)}; a spec may not be longer than the rank")
        block = list(shape)
        for dim, entry in enumerate(self.spec):
            if entry is None:
                continue
            count = self.mesh.axis_size(entry)
            if shape[dim] % count:
                raise InvalidArgumentError(f"spec={self.spec!r}: dimension {dim} of size {shape[dim]} must be "
                                           f"divisible by the {count} devices of {entry!r}")
            block[dim] = shape[dim] // count
        return tuple(block)

    def indices(self, shape: tuple[int, ...]) -> dict[int, Index]:
        """The block of a global array of `shape` each device holds."""
        block = self.shard_shape(shape)
        found = {}
        for device in self.mesh.devices:
            index = []
            for dim, n in enumerate(shape):
                entry = self.spec[dim] if dim < len(self.spec) else None
                start = 0 if entry is None else self.mesh.axis_index(device, entry) * block[dim]
                index.append(slice(start, start + (n if entry is None else block[dim])))
            found[device] = tuple(index)
        return found


Sharding = NamedSharding | SingleDeviceSharding


def check_sharding(sharding: object, what: str) -> Sharding:
    """`sharding` if it is a simulator sharding, else a clear InvalidTypeError naming `what`."""
    if not isinstance(sharding, (NamedSharding, SingleDeviceSharding)):
        raise InvalidTypeError(f"{what}={sharding!r} must be a sim.NamedSharding or sim.SingleDeviceSharding")
    return sharding
