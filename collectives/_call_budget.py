"""A collective call's memory estimate, checked as the call starts, before anything of it is allocated.

Every device estimates the whole call from its own operands (the members of a call pass operands of one
shape, which the rendezvous checks): the results it allocates on every device of the mesh (the group size
times the operands for a gather, at most the operands otherwise: the definition's `Sizes`) and its trace
(`sim.MESSAGE_BYTES` for each message its pattern sends, counted with the fewest messages per peer of the
collective's algorithms). A call that would take the run's memories past `max_memory_bytes` is refused with
`sim.MemoryLimitError`, naming the estimate; so is the 64-device ring all_gather of 64 MiB per device from
Python under the default budget, before its 256 GiB of results are asked for:

>>> import numpy as np, sim, collectives
>>> mesh = sim.Mesh({"x": 4}, max_memory_bytes=1 << 20)
>>> gather = sim.shard_map(lambda v: collectives.all_gather(v, "x", tiled=True), mesh=mesh,
...                        in_specs=sim.P("x"), out_specs=sim.P("x"))
>>> try:
...     gather(np.zeros(4 * 32768, np.float32))
... except sim.MemoryLimitError as error:
...     print(str(error).split(" (")[0])
device 0: all_gather of 128 KiB per device in groups of 4 on 4 devices needs about 2.01 MiB of memory
"""

from __future__ import annotations

from typing import Any

import sim
from collectives._definition import Definition

_ESTIMATES = "collectives._call_budget"  # the key of the run's estimates in `DeviceContext.shared`
_FEWEST: dict[str, int] = {}  # by collective: the fewest messages per peer any of its algorithms sends


def check_call(context: sim.DeviceContext, definition: Definition, operands: list, axis_name: Any,
               params: dict | tuple, op: str) -> None:
    """Refuse the call of `definition` on `operands` (`op`, as the caller named it) that the device of
    `context` is making, when its estimate would take the run's memories past their limit (see the module's
    docstring). The estimate of a call over a whole axis is worked out once per run for each collective,
    axis and operand size (in `context.shared`): most calls cost one look-up and one comparison.

    Raises:
        MemoryLimitError: naming the device, the call, the estimate and its parts, and the limit.
    """
    meter = context.memory.meter
    if meter is None:
        return
    operand_bytes = getattr(operands[0], "nbytes", 0) if len(operands) == 1 else \
        sum(getattr(x, "nbytes", 0) for x in operands)
    if isinstance(params, dict):
        groups = params.get("axis_index_groups")
    else:
        groups = None
        for name, value in params:
            if name == "axis_index_groups":
                groups = value
    estimates = context.shared.get(_ESTIMATES)
    if estimates is None:
        estimates = context.shared[_ESTIMATES] = {}
    try:
        key = (definition.name, axis_name, operand_bytes) if groups is None else None
        estimate = estimates.get(key)
    except TypeError:  # an axis_name that is not hashable: the collective says what is wrong with it
        return
    if estimate is None:
        estimate = _estimate(context.mesh, definition, operand_bytes, axis_name, groups)
        if estimate is None:
            return
        if key is not None:
            estimates[key] = estimate
    n, outputs, trace = estimate
    if meter.held_bytes + outputs + trace <= meter.max_memory_bytes:
        return
    abstract = any(sim.memory.is_abstract(x) for x in operands)
    if abstract:  # abstract payloads: results hold no bytes
        outputs = 0
        if meter.held_bytes + trace <= meter.max_memory_bytes:
            return
    what = f"{op} of {sim.format_bytes(operand_bytes)} per device in groups of {n} on {context.mesh.size} devices"
    sim.check_call(what, context.device, {"outputs": outputs, "trace": trace}, meter.held_bytes,
                   meter.max_memory_bytes, abstract)


def _estimate(mesh: sim.Mesh, definition: Definition, operand_bytes: int, axis_name: Any,
              groups: Any) -> tuple[int, int, int] | None:
    """The group size, the results' bytes on every device and the trace's bytes of a call; None when
    `axis_name` or `groups` are not valid (the collective then refuses the call in its own words)."""
    try:
        n = len(groups[0]) if groups is not None else mesh.axis_size(axis_name)
    except (sim.MeshError, TypeError, IndexError, KeyError):
        return None
    sizes = definition.sizes
    outputs = mesh.size * sizes.result_bytes(operand_bytes, n)
    return n, outputs, sizes.messages(mesh.size, n, _fewest(definition)) * sim.MESSAGE_BYTES


def _fewest(definition: Definition) -> int:
    """The fewest messages per peer among `definition`'s algorithms (its 'auto' left out)."""
    fewest = _FEWEST.get(definition.name)
    if fewest is None:
        fewest = _FEWEST[definition.name] = min(
            (a.messages_per_peer for a in definition.algorithms if not a.auto), default=1)
    return fewest
