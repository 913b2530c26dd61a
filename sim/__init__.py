"""The discrete-event mesh: devices with local memories exchanging messages over a network.

Its parts, each a sub-package, bottom up: `sim.record` (traces, equations, violations), `sim.network` (the
mesh, topologies, links), `sim.memory` (memories, placed arrays, shardings), `sim.engine` (the clock, the
driver, the rendezvous and the transport) and `sim.program` (`shard_map`, typed values, copies, `jit`).
"""

from sim._budget import (
    DEFAULT_MAX_MESSAGES,
    DEVICE_BYTES,
    MAX_DEVICES,
    MESSAGE_BYTES,
    check_call,
    check_memory,
    check_messages,
    default_max_memory_bytes,
    format_bytes,
    parse_bytes,
)
from sim._errors import InvalidArgumentError, InvalidTypeError, MemoryLimitError, MeshError, ProtocolError
from sim._gc import gc_paused
from sim.engine import (
    Collective,
    DeviceContext,
    Gathering,
    Joint,
    Message,
    Pairs,
    Pending,
    Perturbation,
    Port,
    Simulation,
    Waiting,
    compute,
    current,
    current_or_none,
    start,
)
from sim.memory import (
    Array,
    Buffer,
    LocalMemory,
    MemoryMeter,
    NamedSharding,
    P,
    PartitionSpec,
    Shard,
    SingleDeviceSharding,
    device_put,
)
from sim.network import (
    CALIBRATIONS,
    DEFAULT_COPY_COST,
    PRESETS,
    TOPOLOGIES,
    CopyCost,
    Costs,
    Group,
    LinkState,
    Mesh,
    Network,
    Roofline,
    check_axis_index_groups,
    in_network_s,
    max_min_rates,
)
from sim.program import (
    Compiled,
    Jitted,
    Lowered,
    OrderDifference,
    OrderReport,
    RowsDiffer,
    Run,
    ShapeDtypeStruct,
    ShardMapped,
    Varying,
    add_step,
    apply,
    as_array,
    copy_step,
    explore,
    jit,
    labelled,
    leaves,
    promote,
    shard_map,
    tree_map,
    vma_of,
    with_layout_constraint,
    wrap,
)
from sim.record import (
    CallRecord,
    ComputeRecord,
    Const,
    CopyRecord,
    Equation,
    MessageRecord,
    Program,
    SavedRun,
    Trace,
    Var,
    Violation,
    draw_runs,
    load_run,
    load_runs,
    located,
    save_runs,
    vma_str,
)

# Grouped by purpose; each group is sorted on its own.
__all__ = [  # the mesh, its devices and the network
    "CALIBRATIONS",
    "DEFAULT_COPY_COST",
    "PRESETS",
    "TOPOLOGIES",
    "Buffer",
    "CopyCost",
    "Costs",
    "Group",
    "LinkState",
    "LocalMemory",
    "Mesh",
    "Network",
    "Roofline",
    "check_axis_index_groups",
    "in_network_s",
    "max_min_rates",
]
__all__ += [  # memory and work guards
    "DEFAULT_MAX_MESSAGES", "DEVICE_BYTES", "MAX_DEVICES", "MESSAGE_BYTES", "MemoryLimitError", "MemoryMeter",
    "check_call", "check_memory", "check_messages", "default_max_memory_bytes", "format_bytes", "gc_paused",
    "parse_bytes",
]
__all__ += ["P", "PartitionSpec", "Run", "ShardMapped", "Simulation", "shard_map"]  # running programs
__all__ += ["CallRecord", "ComputeRecord", "CopyRecord", "MessageRecord", "Trace"]  # what a run records
__all__ += ["Pending", "compute", "start"]  # local work in time, and collectives that overlap it
__all__ += ["OrderDifference", "OrderReport", "Perturbation", "RowsDiffer", "explore"]  # arrival orders
__all__ += [  # typed values and programs
    "Const", "Equation", "Program", "Var", "Varying", "apply", "as_array", "promote", "vma_of", "vma_str", "wrap",
]
__all__ += [  # layouts on the devices: placed arrays, shardings, the compile model
    "Array", "Compiled", "Jitted", "Lowered", "NamedSharding", "ShapeDtypeStruct", "Shard",
    "SingleDeviceSharding", "device_put", "jit", "with_layout_constraint",
]
__all__ += [  # for collectives: the protocol interface
    "Collective", "DeviceContext", "Message", "Port", "Violation", "Waiting", "add_step", "copy_step", "current",
    "current_or_none",
]
__all__ += ["Gathering", "Joint", "Pairs"]  # for collectives: calls run for the whole group at once
__all__ += [  # errors and pytrees
    "InvalidArgumentError", "InvalidTypeError", "MeshError", "ProtocolError", "leaves", "tree_map",
]

# saved runs, call labels
__all__ += ["SavedRun", "draw_runs", "labelled", "load_run", "load_runs", "located", "save_runs"]
