"""The discrete-event mesh: devices with local memories exchanging messages over a network."""

from sim._engine import Collective, DeviceContext, Message, Port, Simulation, current
from sim._errors import InvalidArgumentError, InvalidTypeError, MeshError, ProtocolError
from sim._memory import Buffer, LocalMemory
from sim._mesh import Group, Mesh, check_axis_index_groups
from sim._network import Network
from sim._shard_map import P, PartitionSpec, Run, ShardMapped, shard_map
from sim._trace import MessageRecord, Trace
from sim._tree import leaves, tree_map

__all__ = [
    "Buffer", "Collective", "DeviceContext", "Group", "InvalidArgumentError", "InvalidTypeError",
    "LocalMemory", "Mesh", "MeshError", "Message", "MessageRecord", "Network", "P", "PartitionSpec",
    "Port", "ProtocolError", "Run", "ShardMapped", "Simulation", "Trace", "check_axis_index_groups",
    "current", "leaves", "shard_map", "tree_map",
]
