"""The discrete-event mesh: devices with local memories exchanging messages over a network."""

from sim._array import Array, Shard, device_put
from sim._budget import DEVICE_BYTES, MAX_DEVICES, MESSAGE_BYTES, check_memory, default_max_memory_bytes, parse_bytes
from sim._compile import Compiled, Jitted, Lowered, ShapeDtypeStruct, jit
from sim._copy import copy_step, with_layout_constraint
from sim._driver import DeviceContext, current, current_or_none
from sim._engine import Simulation
from sim._errors import InvalidArgumentError, InvalidTypeError, MeshError, ProtocolError
from sim._explore import OrderDifference, OrderReport, RowsDiffer, explore
from sim._flows import LinkState, max_min_rates
from sim._memory import Buffer, LocalMemory
from sim._mesh import Group, Mesh, check_axis_index_groups
from sim._network import DEFAULT_COPY_COST, TOPOLOGIES, CopyCost, Network
from sim._perturb import Perturbation
from sim._presets import PRESETS
from sim._program import Const, Equation, Program, Var, vma_str
from sim._rendezvous import Collective, Waiting
from sim._shard_map import Run, ShardMapped, shard_map
from sim._sharding import NamedSharding, SingleDeviceSharding
from sim._spec import P, PartitionSpec
from sim._trace import CallRecord, CopyRecord, MessageRecord, Trace
from sim._transport import Message, Port
from sim._tree import leaves, tree_map
from sim._varying import Varying, apply, promote, vma_of, wrap
from sim._violation import Violation

# Grouped by purpose; each group is sorted on its own.
__all__ = [  # the mesh, its devices and the network
    "DEFAULT_COPY_COST",
    "PRESETS",
    "TOPOLOGIES",
    "Buffer",
    "CopyCost",
    "Group",
    "LinkState",
    "LocalMemory",
    "Mesh",
    "Network",
    "check_axis_index_groups",
    "max_min_rates",
]
__all__ += [  # memory guards
    "DEVICE_BYTES", "MAX_DEVICES", "MESSAGE_BYTES", "check_memory", "default_max_memory_bytes", "parse_bytes",
]
__all__ += ["P", "PartitionSpec", "Run", "ShardMapped", "Simulation", "shard_map"]  # running programs
__all__ += ["CallRecord", "CopyRecord", "MessageRecord", "Trace"]  # what a run records
__all__ += ["OrderDifference", "OrderReport", "Perturbation", "RowsDiffer", "explore"]  # arrival orders
__all__ += [  # typed values and programs
    "Const", "Equation", "Program", "Var", "Varying", "apply", "promote", "vma_of", "vma_str", "wrap",
]
__all__ += [  # layouts on the devices: placed arrays, shardings, the compile model
    "Array", "Compiled", "Jitted", "Lowered", "NamedSharding", "ShapeDtypeStruct", "Shard",
    "SingleDeviceSharding", "device_put", "jit", "with_layout_constraint",
]
__all__ += [  # for collectives: the protocol interface
    "Collective", "DeviceContext", "Message", "Port", "Violation", "Waiting", "copy_step", "current", "current_or_none",
]
__all__ += [  # errors and pytrees
    "InvalidArgumentError", "InvalidTypeError", "MeshError", "ProtocolError", "leaves", "tree_map",
]
