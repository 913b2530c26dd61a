"""A shard_map nested in a shard_map body, run by the same simulated devices.

Every device of the mesh runs the enclosing body, holding its values whole along the axes the enclosing
shard_map leaves to the compiler. At a nested shard_map (manual over some of those axes) each device takes its
block of each operand along them, as the nested in_specs split it (`block`: no data moves, the device holds
the whole value), walks the nested body with the collectives it calls over any manual axis, and gets each
output whole along those axes again (`whole`): an all_gather over the axes its out_specs entry splits it
along, a collective the trace shows under the nested shard_map's line. JAX instead leaves the output split
and lets its partitioner move what later work needs, so these gathers are the simulator's, not JAX's; the
values are JAX's. Once the run is over, `claims` reports each unchecked replication claim of a nested
out_specs that the devices' values contradict, and `unchecked_inside` tells whether a checked body holds an
unchecked shard_map (whose results JAX types invariant: FINDINGS.md 26).

>>> # outer manual over 'x' of {'x': 2, 'y': 4}; inner over 'y' with in_specs=P(None, 'y') on a (2, 8)
>>> # value: device (i, j) walks the inner body on columns 2j:2j+2, then gathers the (2, 2) results along 'y'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from jax.extend import core

import collectives
import sim
from oracles._bridge_diagnostics import Diagnostic, differing, source_line
from oracles._bridge_specs import Entry

if TYPE_CHECKING:
    from oracles._bridge_device import Watch


def block(value: Any, entry: Entry, mesh: sim.Mesh, device: int) -> np.ndarray:
    """Device `device`'s block of `value` (whole along the nested shard_map's axes) for the in_specs `entry`:
    each dimension split along the axes the entry names, the device's part by its index along them."""
    index = []
    for dim, names in enumerate(entry.partitions):
        if not names:
            index.append(slice(None))
            continue
        axis = names if len(names) > 1 else names[0]
        size = np.shape(value)[dim] // mesh.axis_size(axis)
        start = mesh.axis_index(device, axis) * size
        index.append(slice(start, start + size))
    return np.ascontiguousarray(np.asarray(value)[tuple(index)])


def whole(value: Any, entry: Entry, check_vma: bool) -> Any:
    """A device's output block of a nested shard_map made whole along the axes its out_specs `entry` splits it
    along: an all_gather over them per dimension (an operand typed invariant along them is the same block on
    each of their devices, so it is gathered as varying)."""
    for dim, names in enumerate(entry.partitions):
        if names:
            if check_vma:
                value = sim.wrap(np.asarray(value), sim.vma_of(value) | frozenset(names))
            value = collectives.all_gather(value, names if len(names) > 1 else names[0], axis=dim, tiled=True)
    return value


def unchecked_inside(jaxpr: core.Jaxpr) -> bool:
    """Whether a checked shard_map's body `jaxpr` holds a check_vma=False shard_map (FINDINGS.md 26)."""
    return any((eqn.primitive.name == "shard_map" and not eqn.params["check_vma"])
               or any(unchecked_inside(getattr(sub, "jaxpr", sub)) for sub in core.jaxprs_in_params(eqn.params))
               for eqn in jaxpr.eqns)


def claims(watch: Watch, axes: Mapping[str, int]) -> list[Diagnostic]:
    """A diagnostic per output of a nested shard_map whose out_specs claim replication along some of its axes
    (unchecked: check_vma=False) where the devices along them hold different values, at the first visit
    where they do."""
    names, sizes = list(axes), tuple(axes.values())
    found = []
    for eqn, k, along, values in watch.claims.values():
        if len(values) != int(np.prod(sizes)):
            continue
        for visit in range(min(len(seen) for seen in values.values())):
            blocks = np.stack([values[d][visit] for d in sorted(values)])
            differ = differing(blocks, sizes, tuple(names.index(a) for a in along))
            if differ:
                line = source_line(eqn, watch.where)
                message = (f"nested shard_map output {k} at {line} claims replication along {list(along)}, but "
                           f"devices {list(differ)} differ from the first device along them; JAX leaves the value "
                           f"to its partitioner, which holds one of them (undefined: each simulated device goes on "
                           f"with its own) (no FINDINGS.md entry); strict=True makes this an error")
                found.append(Diagnostic("false replication claim", f"nested shard_map output {k}", line, along,
                                        differ, None, message))
                break
    return found
