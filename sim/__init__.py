"""The discrete-event mesh: devices with local memories exchanging messages over a network."""

from sim._engine import Collective, DeviceContext, Message, Port, Simulation, current, current_or_none
from sim._errors import InvalidArgumentError, InvalidTypeError, MeshError, ProtocolError
from sim._memory import Buffer, LocalMemory
from sim._mesh import Group, Mesh, check_axis_index_groups
from sim._network import Network
from sim._program import Const, Equation, Program, Var, vma_str
from sim._shard_map import Run, ShardMapped, shard_map
from sim._spec import P, PartitionSpec
from sim._trace import MessageRecord, Trace
from sim._tree import leaves, tree_map
from sim._varying import Varying, apply, promote, vma_of, wrap

__all__ = [
    "Buffer", "Collective", "Const", "DeviceContext", "Equation", "Group", "InvalidArgumentError",
    "InvalidTypeError", "LocalMemory", "Mesh", "MeshError", "Message", "MessageRecord", "Network", "P",
    "PartitionSpec", "Port", "Program", "ProtocolError", "Run", "ShardMapped", "Simulation", "Trace", "Var",
    "Varying", "apply", "check_axis_index_groups", "current", "current_or_none", "leaves", "promote",
    "shard_map", "tree_map", "vma_of", "vma_str", "wrap",
]

# Layouts on the devices: shardings, placed arrays, local copies, the compile model.
from sim._array import Array, Shard, device_put  # noqa: E402
from sim._compile import Compiled, Jitted, Lowered, ShapeDtypeStruct, jit  # noqa: E402
from sim._copy import DEFAULT_COPY_COST, CopyCost, CopyRecord, copy_step, with_layout_constraint  # noqa: E402
from sim._sharding import NamedSharding, SingleDeviceSharding  # noqa: E402

__all__ += [
    "Array", "Compiled", "CopyCost", "CopyRecord", "DEFAULT_COPY_COST", "Jitted", "Lowered", "NamedSharding",
    "Shard", "ShapeDtypeStruct", "SingleDeviceSharding", "copy_step", "device_put", "jit", "with_layout_constraint",
]
