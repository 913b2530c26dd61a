"""Device memories and the arrays placed in them: buffers with layouts, shardings, partition specs, the
global `Array`, and the layout choices of the compile model (AUTO)."""

from sim.memory._abstract import (
    AbstractValueError,
    ShapeDtypeStruct,
    abstract_like,
    hollow_dtype,
    hollow_empty,
    hollow_ufunc,
    is_abstract,
    is_hollow,
    is_struct,
    logical_dtype,
    restored,
)
from sim.memory._array import Array, Shard, device_put
from sim.memory._buffer import Buffer
from sim.memory._memory import LocalMemory
from sim.memory._meter import MemoryMeter
from sim.memory._sharding import NamedSharding, SingleDeviceSharding
from sim.memory._spec import P, PartitionSpec

__all__ = [
    "Array", "Buffer", "LocalMemory", "MemoryMeter", "NamedSharding", "P", "PartitionSpec", "Shard",
    "SingleDeviceSharding", "device_put",
]
__all__ += [  # abstract payloads: shapes and dtypes without values
    "AbstractValueError", "ShapeDtypeStruct", "abstract_like", "hollow_dtype", "hollow_empty", "hollow_ufunc",
    "is_abstract", "is_hollow", "is_struct", "logical_dtype", "restored",
]
