"""'in_network': psum and psum_scatter with the switch doing the sum (NVLink SHARP on an NVSwitch, SHARP on an
InfiniBand switch), on a network whose switch reduces (`sim.Network.switch_reduces`).

The operand is cut into n shards (psum: the flattened operand in row-major order, `numpy.array_split`'s
sizes; psum_scatter: chunk j along the scatter dimension). Every member sends each shard into the switch
(`sim.Port.reduce_in_switch`); the switch adds the n terms of shard j in group order as they come in, so
the sum has 'direct''s bits, and sends it on: to every member (psum: NCCL's NVLS, member j storing shard j
through the switch's multicast) or to member j alone (psum_scatter). Each egress port carries the operand
once and each ingress port the result once, so a large psum takes about n / bandwidth, where a ring takes
2 (p - 1)/p n / bandwidth: nccl-tests' busbw, 2 (p - 1)/p n / t, can pass the port rate.

Worked example on a switch that reduces, 2 devices: device 0 holds [1, 2], device 1 holds [10, 20].
`psum(x, 'x', algorithm='in_network')`: device 0 sends shard 0 ([1]) and shard 1 ([2]) into the switch,
device 1 sends [10] and [20]; the switch adds shard 0 to [11] and shard 1 to [22] and multicasts both,
so each device gets [11, 22]. `psum_scatter(x, 'x', algorithm='in_network')` sends [11] to device 0 only
and [22] to device 1 only.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence

import numpy as np

import sim
from collectives._algorithm import Algorithm, Pattern
from collectives._arithmetic import fold
from collectives._common import pack_slice, unpack_values
from collectives._joint import Cut
from layouts import Layout

_TAG = "in-network"


def reducer(reduction: str) -> Callable[[list[np.ndarray]], np.ndarray]:
    """The switch's fold of `reduction` over terms given in group order: 'direct''s (`_arithmetic.fold`, from
    the identity; bfloat16 in float32, rounded once at the end)."""
    return lambda terms: fold(reduction, sim.memory.restored(np.stack(terms), terms))  # abstract terms kept


def check_network(op: str, device: int, record: Algorithm, mesh: sim.Mesh) -> None:
    """Raise unless `record` can run on `mesh`'s network: 'in_network' needs a switch that reduces."""
    if record.in_network and not mesh.network.switch_reduces:
        raise sim.InvalidArgumentError(
            f"device {device}: {op}: algorithm={record.name!r} needs a switch that reduces, and the network "
            f"({mesh.network.describe()}) has switch_reduces={mesh.network.switch_reduces}: use a switch or "
            f"hierarchical network with switch_reduces=True (presets h100-nvlink, h100-ib, gb200-nvl72), or "
            f"another algorithm")


def all_reduce(port: sim.Port, buffer: sim.Buffer, reduction: str, out_layout: Layout) -> Generator:
    """psum's 'in_network': every shard reduced in the switch and multicast to every member; returns the
    member's result (a memory view in `out_layout`)."""
    source = port.memory.view(buffer)
    terms, _ = yield from pack_slice(port, source, Layout.row_major(source.ndim), phase="operand")
    members = port.group.members
    if _tables(terms):
        bounds = _bounds(terms.size, len(members))
        port.reduce_row_in_switch(terms.reshape(-1), bounds, True, reducer(reduction), phase=_TAG)
        flat = port.memory.view(port.memory.alloc(source.dtype, (source.size,)))
        flat[...] = yield from port.recv_reduced_row()
        return (yield from _laid_out(port, flat.reshape(source.shape), out_layout))
    parts = _split(terms.reshape(-1), len(members))
    port.reduce_in_switch(parts, members, [members] * len(members), reducer(reduction), phase=_TAG)
    flat = port.memory.view(port.memory.alloc(source.dtype, (source.size,)))
    units = _split(flat, len(members))
    for j, total in (yield from port.recv_reduced()):
        units[j][...] = total
    return (yield from _laid_out(port, flat.reshape(source.shape), out_layout))


def reduce_scatter(port: sim.Port, parts: Sequence[np.ndarray], shape: tuple[int, ...],
                   out_layout: Layout) -> Generator:
    """psum_scatter's 'in_network': chunk j (`parts[j]`, a view of the operand) reduced in the switch and sent
    to member j; returns the member's chunk of the sum (shape `shape`, laid out in `out_layout`)."""
    row = _row(parts)
    if row is not None:  # every chunk one run of the operand, row-major: sent as it lies, no pack
        port.reduce_row_in_switch(*row, False, reducer("sum"), phase=_TAG)
        total = yield from port.recv_reduced_row()
        return (yield from _laid_out(port, total.reshape(shape), out_layout))
    members, terms = port.group.members, []
    for j, part in enumerate(parts):
        values, _ = yield from pack_slice(port, part, Layout.row_major(part.ndim), chunk=j)
        terms.append(values.reshape(-1))
    port.reduce_in_switch(terms, members, [(m,) for m in members], reducer("sum"), phase=_TAG)
    ((_, total),) = yield from port.recv_reduced()
    return (yield from _laid_out(port, total.reshape(shape), out_layout))


def _tables(values: np.ndarray) -> bool:
    """Whether a row of `values` can go to the switch as one table (`sim.Port.reduce_row_in_switch`): real
    values (abstract ones take the shard by shard path), C-contiguous."""
    return values.flags.c_contiguous and not sim.memory.is_hollow(values.dtype)


def _row(parts: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """`parts` as one flat C-contiguous row and the bounds of its chunks, where they are consecutive runs of
    one flat buffer (a `Cut` of it) that `pack_slice` would send as they lie; None otherwise."""
    if not isinstance(parts, Cut) or not len(parts) or not _tables(parts.flat):
        return None
    at, sizes = parts.at, parts.sizes
    if not np.array_equal(at[1:], at[:-1] + sizes[:-1]):
        return None
    end = int(at[-1] + sizes[-1])
    return parts.flat[int(at[0]):end], np.append(at - at[0], end - at[0])


def _bounds(size: int, n: int) -> np.ndarray:
    """Where `numpy.array_split`'s n pieces of `size` elements start, and where the last ends."""
    base, extra = divmod(size, n)
    return np.arange(n + 1, dtype=np.int64) * base + np.minimum(np.arange(n + 1, dtype=np.int64), extra)


def _split(flat: np.ndarray, n: int) -> list[np.ndarray]:
    """`flat` cut into n views of `numpy.array_split`'s sizes (the first size % n one longer)."""
    base, extra = divmod(flat.size, n)
    bounds = np.cumsum([0] + [base + (j < extra) for j in range(n)]).tolist()
    return [flat[bounds[j]:bounds[j + 1]] for j in range(n)]


def _laid_out(port: sim.Port, values: np.ndarray, layout: Layout) -> Generator:
    """`values` (row-major) written into a new buffer laid out with `layout` (a timed unpack where strided)."""
    out = port.memory.view(port.memory.alloc(values.dtype, values.shape, layout))
    yield from unpack_values(port, values, tuple(range(values.ndim)), out, phase="result")
    return out


def _steps(kind: str):
    """One step: every member's n shards of b/n bytes into the switch, the sums to all ('multicast') or to
    their own member ('reduce')."""
    return lambda shape, b: [(Pattern(kind), b / int(np.prod(shape)), 1)]


_TEXT = ("in_network: every member sends each of its n shards of the operand into the switch, which adds the "
         "n terms of each shard in group order as they come in (the bits of 'direct') and sends the sum on")

ALL_REDUCE = Algorithm(
    "in_network", _TEXT + " to every member through its multicast (NCCL's NVLS): each port carries the operand "
                          "once each way, one switch latency. Only where the network's switch reduces.",
    _steps("multicast"), lambda shape: 2 * (int(np.prod(shape)) - 1), 2, reorders=False, in_network=True)
REDUCE_SCATTER = Algorithm(
    "in_network", _TEXT + " to its own member only: shard j's sum to member j, one switch latency. Only where "
                          "the network's switch reduces.",
    _steps("reduce"), lambda shape: int(np.prod(shape)) - 1, 1, reorders=False, in_network=True)
