"""The memory a scenario file needs, estimated from its tables before any array is allocated.

A `Budget` refuses a file whose estimate exceeds the limit (`scenarios.load(path, max_memory_bytes=...)`,
`meshsim run --max-memory SIZE`; by default half the machine's memory) with a message that gives the
estimate, what it is made of, and the knob. The estimate counts, in bytes:

- devices: `sim.DEVICE_BYTES` per device (its first memory page, greenlet, SimPy process, program record);
- inputs: each device's arrays as the file describes them (`[inputs] seed`/`shape`, `{fill, shape}` tables,
  `[[args]]` shapes), the loader's float64 or int64 intermediates, and the global arrays a run stacks them
  into; literal values are as large as the file and are not counted;
- outputs: each device's result, at most its inputs, or the group size times them for the gathers
  (`Definition.sizes`);
- trace: `sim.MESSAGE_BYTES` per message, the messages counted from the collective's pattern (`Sizes.messages`:
  every device to every member of its group, as many times as the algorithm's `messages_per_peer`). A
  program's messages are known only when it runs, and are not counted.

The same count of messages is the run's work: a `[collective]` file that would send more than the work
limit (`scenarios.load(path, max_messages=...)`, `meshsim run --max-messages N`; by default
`sim.DEFAULT_MAX_MESSAGES`, a million) is refused before anything runs, with the estimate and the knob, so
that no run goes on for minutes without saying so. While it runs, the memory limit holds too: the
simulator counts every array its device memories hold (`sim.MemoryMeter`), and a program's code runs
under an address-space limit (`scenarios._address_space`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import sim
from collectives import Definition
from collectives._algorithms import axes_shape
from scenarios._errors import Source
from scenarios._fields import DTYPE_NAMES

_KNOB = "; raise the limit with `meshsim run --max-memory SIZE` (e.g. --max-memory {}) or " \
        "scenarios.load(path, max_memory_bytes=N)"
_WORK_KNOB = "; a run that large takes long (seconds to minutes per million messages): raise the limit with " \
             "`meshsim run --max-messages N` (e.g. --max-messages {}) or scenarios.load(path, max_messages=N), " \
             "and bound the run's time with --timeout SECONDS"
_LOADER_BYTES = 8  # numpy draws floats as float64 and fills with int64 before casting to the file's dtype


class Budget:
    """The memory and work limits of one scenario file, and the checks that refuse estimates beyond them."""

    def __init__(self, source: Source, max_memory_bytes: int | None, max_messages: int | None = None) -> None:
        sim.check_memory("", {}, max_memory_bytes)  # a bad limit is the caller's error, not the file's
        sim.check_messages("", 0, max_messages)
        self.source = source
        self.max_memory_bytes = max_memory_bytes
        self.max_messages = max_messages

    def check(self, parts: dict[str, int], table: str, key: str | None, index: int = 0) -> None:
        """Raise a `ScenarioError` at `[table] key` when the estimate `parts` exceeds the limit."""
        try:
            sim.check_memory("the scenario", parts, self.max_memory_bytes)
        except sim.InvalidArgumentError as error:
            suggested = f"{math.ceil(sum(parts.values()) / (1 << 30))}GiB"
            raise self.source.error(table, key, f"{error}{_KNOB.format(suggested)}", index) from None

    def check_mesh(self, axes: dict[str, int]) -> None:
        """Refuse a mesh of more than `sim.MAX_DEVICES` devices, or whose devices alone exceed the limit."""
        count = math.prod(axes.values())
        if count > sim.MAX_DEVICES:
            raise self.source.error("mesh", "axes", f"[mesh] axes={axes!r} make {count} devices; a mesh may have "
                                                    f"at most {sim.MAX_DEVICES} (2**20)")
        self.check({"devices": count * sim.DEVICE_BYTES}, "mesh", "axes")

    def check_collective(self, data: dict, mesh: sim.Mesh, definition: Definition, params: dict[str, Any]) -> None:
        """Refuse a `[collective]` scenario whose inputs, outputs and trace would exceed the limit."""
        where, inputs, staging = _input_bytes(data, mesh)
        group = _group_size(mesh, params)
        messages = _messages(mesh, definition, params, group)
        devices, trace = mesh.size * sim.DEVICE_BYTES, messages * sim.MESSAGE_BYTES
        if max(devices, trace) > inputs:  # the mesh, not the arrays, is what makes the scenario large
            where = ("mesh", "axes")
        outputs = definition.sizes.result_bytes(inputs, group)
        if data.get("payload") == "abstract":  # shapes and dtypes only: no array holds a byte
            inputs = staging = outputs = 0
        self.check({"devices": devices, "inputs": inputs, "the loader's intermediates": staging,
                    "the run's global inputs": inputs, "outputs": outputs, "trace": trace}, *where)
        self.check_work(f"{definition.name} on {mesh.size} devices in groups of {group}", messages)

    def check_work(self, what: str, messages: int) -> None:
        """Raise a `ScenarioError` at `[mesh] axes` when `what` would send more than `max_messages` messages."""
        try:
            sim.check_messages(f"the scenario ({what})", messages, self.max_messages)
        except sim.InvalidArgumentError as error:
            suggested = 10 ** math.ceil(math.log10(messages + 1))
            raise self.source.error("mesh", "axes", f"{error}{_WORK_KNOB.format(suggested)}") from None

    def check_program(self, sizes: list[int], mesh: sim.Mesh) -> None:
        """Refuse a `[program]` whose `[[args]]` (`sizes` bytes each) would exceed the limit.

        The arguments, the forward outputs, the cotangents and the transposed outputs are each counted at
        the size of all arguments together.
        """
        arguments = sum(sizes)
        self.check({"devices": mesh.size * sim.DEVICE_BYTES, "arguments": 2 * arguments,
                    "outputs and transposes": 3 * arguments}, "args", "shape")


def _input_bytes(data: dict, mesh: sim.Mesh) -> tuple[tuple, int, int]:
    """Where the inputs are given, their bytes on all devices, and the loader's intermediates' bytes."""
    settings = data.get("inputs") if isinstance(data.get("inputs"), dict) else {}
    itemsize = _itemsize(settings.get("dtype"))
    if _is_shape(settings.get("shape")):
        elements = math.prod(settings["shape"])
        return ("inputs", "shape"), mesh.size * elements * itemsize, elements * _LOADER_BYTES
    devices = data.get("device") if isinstance(data.get("device"), list) else []
    total, where = 0, ("device", None)
    for d, table in enumerate(devices[:mesh.size]):
        for name, value in (table.items() if isinstance(table, dict) else ()):
            if isinstance(value, dict) and _is_shape(value.get("shape")):
                if total == 0:
                    where = ("device", name, d)
                total += math.prod(value["shape"])
    return where, total * itemsize, total * _LOADER_BYTES


def _messages(mesh: sim.Mesh, definition: Definition, params: dict[str, Any], group: int) -> int:
    """At most how many messages the call sends (`Definition.most_messages`, by the algorithm it asks for, on
    its grid of named axes; one axis of `group` members with axis_index_groups)."""
    algorithm = definition.algorithm(params.get("algorithm", definition.param("algorithm").default))
    grid = axes_shape(mesh, params["axis_name"], params.get("axis_index_groups")) if "axis_name" in params \
        else (group,)
    return definition.most_messages(algorithm, mesh.size, grid)



def _group_size(mesh: sim.Mesh, params: dict[str, Any]) -> int:
    """The size of the call's groups (already checked against the mesh)."""
    groups = params.get("axis_index_groups")
    if groups:
        return len(groups[0])
    return mesh.axis_size(params["axis_name"]) if "axis_name" in params else 1


def _itemsize(name: Any) -> int:
    """The bytes of one element of `[inputs] dtype` (4, float32's or int32's, when it is absent or invalid:
    the loader refuses an invalid name after this estimate)."""
    return np.dtype(name).itemsize if isinstance(name, str) and name in DTYPE_NAMES else 4


def arg_bytes(spec: dict) -> int:
    """The bytes an `[[args]]` table with a valid `shape` draws, intermediates included."""
    return math.prod(spec["shape"]) * (_itemsize(spec.get("dtype", "float32")) + _LOADER_BYTES)


def _is_shape(value: Any) -> bool:
    """Whether `value` is a list of non-negative ints."""
    return isinstance(value, list) and all(type(n) is int and n >= 0 for n in value)
