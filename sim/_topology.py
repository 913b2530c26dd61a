"""Where links are and which ones a message crosses: the geometry of each topology, one message at a time
(hashable link ids) and many at once (integer link indices in flat numpy arrays).

Devices here are topology devices, numbered row-major over the topology's shape; the mesh maps its own
devices onto them (`sim.Mesh(placement=...)`). Link ids, by topology:

- fully_connected: `(a, b)`, the dedicated link from device a to device b;
- switch: `("out", a)` and `("in", b)`, device a's egress port and device b's ingress port;
- hierarchical: `("out", a)`, `("in", b)` on the node's fast switch, `("nic_out", a)`, `("nic_in", b)` on the
  slow switch between nodes (one NIC port per device and direction);
- ring and torus: `(a, b)`, the link from device a to its neighbour b (one per neighbour and direction).

Routes on a ring or torus are dimension-ordered (dimension 0 first, then 1, then 2) and take the shorter way
round each ring with wraparound; at a tie (the destination exactly half way round) they go the positive way
(increasing coordinate). Without wraparound a dimension is a line and the route runs straight along it.
A switch hop's latency is charged on its egress port (`out`, `nic_out`), so a route through a switch costs
one latency.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sim._network import Network


def route(network: Network, src: int, dst: int) -> tuple:
    """The hashable link ids from topology device `src` to `dst`, in order (empty when they are equal)."""
    if src == dst:
        return ()
    kind = network.topology
    if kind == "fully_connected":
        return ((src, dst),)
    if kind == "switch":
        return (("out", src), ("in", dst))
    if kind == "hierarchical":
        if src // network.node_size == dst // network.node_size:
            return (("out", src), ("in", dst))
        return (("nic_out", src), ("nic_in", dst))
    offsets, links = routes(network, np.array([src]), np.array([dst]), math.prod(network.shape))
    return tuple(link_id(network, int(index), 0) for index in links)


def link_id(network: Network, index: int, devices: int) -> tuple:
    """The hashable id of integer link `index` (see `routes`)."""
    kind = network.topology
    if kind == "fully_connected":
        return (index // devices, index % devices)
    if kind in ("switch", "hierarchical"):
        port, device = divmod(index, devices)
        return (("out", "in", "nic_out", "nic_in")[port], device)
    shape = network.shape
    device, rest = divmod(index, 2 * len(shape))
    dim, negative = divmod(rest, 2)
    coords = list(np.unravel_index(device, shape))
    coords[dim] = (coords[dim] + (-1 if negative else 1)) % shape[dim]
    return (device, int(np.ravel_multi_index(coords, shape)))


def link_index(network: Network, link: tuple, devices: int) -> int:
    """The integer index of hashable link id `link`; raises ValueError for a link the topology lacks."""
    kind = network.topology
    if kind == "fully_connected":
        a, b = link
        return a * devices + b
    if kind in ("switch", "hierarchical"):
        ports = ("out", "in") if kind == "switch" else ("out", "in", "nic_out", "nic_in")
        return ports.index(link[0]) * devices + int(link[1])
    shape, (a, b) = network.shape, link
    ca, cb = np.unravel_index(a, shape), np.unravel_index(b, shape)
    for dim, (x, y, size) in enumerate(zip(ca, cb, shape)):
        if x != y:
            negative = y < x if size == 2 else (y - x) % size != 1
            return a * 2 * len(shape) + 2 * dim + int(negative)
    raise ValueError(f"link={link!r} joins a device to itself")


def link_count(network: Network, devices: int) -> int:
    """How many integer link indices the topology uses on `devices` devices."""
    kind = network.topology
    if kind == "fully_connected":
        return devices * devices
    if kind == "switch":
        return 2 * devices
    if kind == "hierarchical":
        return 4 * devices
    return devices * 2 * len(network.shape)


def capacities(network: Network, links: np.ndarray, devices: int) -> np.ndarray:
    """Bytes per second of each integer link index in `links`."""
    if network.topology == "hierarchical":
        return np.where(links < 2 * devices, network.bandwidth_bytes_per_s, network.inter_bandwidth_bytes_per_s)
    return np.full(len(links), float(network.bandwidth_bytes_per_s))


def latencies(network: Network, links: np.ndarray, devices: int) -> np.ndarray:
    """Seconds of latency of each integer link index in `links` (zero on a switch's ingress ports)."""
    kind = network.topology
    if kind == "switch":
        return np.where(links < devices, network.latency_s, 0.0)
    if kind == "hierarchical":
        port = links // devices
        return np.choose(port, [network.latency_s, 0.0, network.inter_latency_s, 0.0])
    return np.full(len(links), float(network.latency_s))


def routes(network: Network, src: np.ndarray, dst: np.ndarray, devices: int) -> tuple[np.ndarray, np.ndarray]:
    """The routes of messages `src[i] -> dst[i]` (topology devices, `src != dst`) as integer link indices:
    `links[offsets[i]:offsets[i + 1]]` is message i's route, in order."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    kind = network.topology
    if kind in ("ring", "torus"):
        return _torus_routes(network.shape, network.wraparound, src, dst)
    count = len(src)
    if kind == "fully_connected":
        return np.arange(count + 1, dtype=np.int64), src * devices + dst
    links = np.empty(2 * count, np.int64)
    far = np.zeros(count, bool) if kind == "switch" else src // network.node_size != dst // network.node_size
    links[0::2] = src + np.where(far, 2 * devices, 0)
    links[1::2] = dst + np.where(far, 3 * devices, devices)
    return np.arange(0, 2 * count + 1, 2, dtype=np.int64), links


def _torus_routes(shape: tuple[int, ...], wraparound: tuple[bool, ...], src: np.ndarray,
                  dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dimension-ordered shortest routes on a torus (see the module docstring), vectorised over messages."""
    ndim, count = len(shape), len(src)
    strides = [math.prod(shape[k + 1:]) for k in range(ndim)]
    at = [(src // strides[k]) % shape[k] for k in range(ndim)]
    to = [(dst // strides[k]) % shape[k] for k in range(ndim)]
    hops, plus = [], []
    for k in range(ndim):
        if wraparound[k] and shape[k] > 2:  # a ring of two is one link each way
            forward = (to[k] - at[k]) % shape[k]
            up = forward <= shape[k] - forward
            hops.append(np.where(up, forward, shape[k] - forward))
        else:
            up = to[k] >= at[k]
            hops.append(np.abs(to[k] - at[k]))
        plus.append(up)
    total = sum(hops)
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(total, out=offsets[1:])
    links = np.empty(int(offsets[-1]), np.int64)
    base = offsets[:-1].copy()
    here = src.copy()  # the device each message has reached, dimension by dimension
    for k in range(ndim):
        flows = np.repeat(np.arange(count), hops[k])
        if len(flows):
            first = np.cumsum(hops[k]) - hops[k]
            step = np.arange(len(flows)) - first[flows]
            sign = np.where(plus[k], 1, -1)[flows]
            position = (at[k][flows] + sign * step) % shape[k]
            device = here[flows] + (position - at[k][flows]) * strides[k]
            links[base[flows] + step] = device * (2 * ndim) + 2 * k + (sign < 0)
        base += hops[k]
        here += (to[k] - at[k]) * strides[k]
    return offsets, links
