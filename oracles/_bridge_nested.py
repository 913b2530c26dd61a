"""A shard_map nested in a shard_map body, run by the same simulated devices.

Every device of the mesh runs the enclosing body, holding its values whole along the axes the enclosing
shard_map leaves to the compiler. At a nested shard_map (manual over some of those axes) each device takes its
block of each operand along them, as the nested in_specs split it (`block`: no data moves, the device holds
the whole value), walks the nested body with the collectives it calls over any manual axis, and gets each
output whole along those axes again (`whole`): an all_gather over the axes its out_specs entry splits it
along, a collective the trace shows under the nested shard_map's line. JAX instead leaves the output split
and lets its partitioner move what later work needs, so these gathers are the simulator's, not JAX's; the
values are JAX's.

>>> # outer manual over 'x' of {'x': 2, 'y': 4}; inner over 'y' with in_specs=P(None, 'y') on a (2, 8)
>>> # value: device (i, j) walks the inner body on columns 2j:2j+2, then gathers the (2, 2) results along 'y'
"""

from __future__ import annotations

from typing import Any

import numpy as np

import collectives
import sim
from oracles._bridge_specs import Entry


def block(value: Any, entry: Entry, device: int) -> np.ndarray:
    """The running device's block of `value` (whole along the nested shard_map's axes) for the in_specs
    `entry`: each dimension split along the axes the entry names, the device's part by its index along them."""
    mesh = sim.current().mesh
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
