"""Where links are and which ones a message crosses: the geometry of each topology, one message at a time
(hashable link ids) and many at once (integer link indices in flat numpy arrays).

Devices here are topology devices, numbered row-major over the topology's shape; the mesh maps its own
devices onto them (`sim.Mesh(placement=...)`). Link ids, by topology:

- fully_connected: `(a, b)`, the dedicated link from device a to device b;
- switch: `("out", a)` and `("in", b)`, device a's egress port and device b's ingress port;
- hierarchical: `("out", a)`, `("in", b)` on the node's fast switch, `("nic_out", a)`, `("nic_in", b)` on the
  slow switch between nodes (one NIC port per device and direction); with a leaf/spine fabric also
  `("up", leaf)` and `("down", leaf)`, a leaf's links to and from the spines (`sim.network._fabric`);
- ring and torus: `(a, b)`, the link from device a to its neighbour b (one per neighbour and direction).

Routes on a ring or torus are dimension-ordered (dimension 0 first, then 1, then 2) and take the shorter way
round each ring with wraparound; at a tie (the destination exactly half way round) they go the positive way
(increasing coordinate) from an even coordinate and the negative way from an odd one, so the ties of an
all-pairs exchange load both directions of every ring alike, as the bidirectional closed forms assume.
Without wraparound a dimension is a line and the route runs straight along it. On a multipath network
(`Network(multipath=True)`) a message is instead split in equal shares over all its minimal paths
(`sim.network._multipath`; `routes` lists them, `subflows` gives their intervals); `route` stays the
dimension-ordered one.
A switch hop's latency is charged on its egress port (`out`, `nic_out`), so a route through a switch costs
one latency.

Integer link indices are laid out so that every route is a few *intervals* of consecutive indices: on a
torus, the links of one ring (one dimension, one direction, the other coordinates fixed) are consecutive,
in order of position along the ring, so a route's hops along one dimension are one interval (two, where
it wraps past the ring's end). Flows over intervals let `sim.network._flows` count the flows on every link and find
the flows crossing a full link with prefix sums, in time linear in messages, not in hops.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from sim.network import _fabric, _multipath

if TYPE_CHECKING:
    from sim.network._network import Network


def route(network: Network, src: int, dst: int) -> tuple:
    """The hashable link ids from topology device `src` to `dst`, in order (empty when they are equal)."""
    if src == dst:
        return ()
    kind = network.topology
    if kind == "fully_connected":
        return ((src, dst),)
    if kind == "switch" or (kind == "hierarchical" and src // network.node_size == dst // network.node_size):
        return (("out", src), ("in", dst))
    if kind == "hierarchical":
        return _fabric.route(network, src, dst) if _fabric.has_leaves(network) else (("nic_out", src),
                                                                                      ("nic_in", dst))
    return _walk(network, src, dst, range(len(network.shape)), {})


def routes(network: Network, src: int, dst: int) -> tuple[tuple[tuple, float], ...]:
    """Every path a message from `src` to `dst` is split over, with the share of its bytes each carries: the
    one `route` unless the network is multipath (see `sim.network._multipath`)."""
    if not network.multipath or src == dst:
        return ((route(network, src, dst), 1.0),)
    paths = _multipath.choices(network.shape, network.wraparound, src, dst)
    return tuple((_walk(network, src, dst, order, ways), 1.0 / len(paths)) for order, ways in paths)


def _walk(network: Network, src: int, dst: int, order, ways: dict[int, bool]) -> tuple:
    """The links of the shortest route along the dimensions in `order`; `ways[k]` says which way a half-way
    tie of dimension k goes (True: positive), else the parity rule of the module docstring."""
    shape, hops = network.shape, []
    here, there = list(np.unravel_index(src, shape)), np.unravel_index(dst, shape)
    for k in order:
        size = shape[k]
        forward = (int(there[k]) - here[k]) % size
        if network.wraparound[k] and size > 2:
            up = forward < size - forward or (2 * forward == size and ways.get(k, here[k] % 2 == 0))
            step, count = (1, forward) if up else (-1, size - forward)
        else:
            step, count = (1 if there[k] >= here[k] else -1), abs(int(there[k]) - here[k])
        for _ in range(count):
            before = int(np.ravel_multi_index(here, shape))
            here[k] = (here[k] + step) % size
            hops.append((before, int(np.ravel_multi_index(here, shape))))
    return tuple(hops)


def link_count(network: Network, devices: int) -> int:
    """How many integer link indices the topology uses on `devices` devices."""
    kind = network.topology
    if kind == "fully_connected":
        return devices * devices
    leaves = 2 * _fabric.leaf_count(network, devices) if _fabric.has_leaves(network) else 0
    return {"switch": 2, "hierarchical": 4}.get(kind, 2 * len(network.shape or (1,))) * devices + leaves


def link_id(network: Network, index: int, devices: int) -> tuple:
    """The hashable id of integer link `index`."""
    kind = network.topology
    if kind == "fully_connected":
        return (index // devices, index % devices)
    if kind == "hierarchical" and index >= 4 * devices:
        return _fabric.link_id(network, index, devices)
    if kind in ("switch", "hierarchical"):
        port, device = divmod(index, devices)
        return (("out", "in", "nic_out", "nic_in")[port], device)
    shape = network.shape
    k, rest = divmod(index, 2 * devices)
    negative, rest = divmod(rest, devices)
    row, position = divmod(rest, shape[k])
    stride = math.prod(shape[k + 1:])
    device = (row // stride) * shape[k] * stride + row % stride
    after = (position + (-1 if negative else 1)) % shape[k]
    return (device + position * stride, device + after * stride)


def link_index(network: Network, link: tuple, devices: int) -> int:
    """The integer index of hashable link id `link`."""
    kind = network.topology
    if kind == "fully_connected":
        return link[0] * devices + link[1]
    if kind == "hierarchical" and link[0] in _fabric.KINDS:
        return _fabric.link_index(network, link, devices)
    if kind in ("switch", "hierarchical"):
        return ("out", "in", "nic_out", "nic_in").index(link[0]) * devices + int(link[1])
    shape, (a, b) = network.shape, link
    for k, (x, y) in enumerate(zip(np.unravel_index(a, shape), np.unravel_index(b, shape))):
        if x != y:
            negative = y < x if shape[k] == 2 else (y - x) % shape[k] != 1
            stride = math.prod(shape[k + 1:])
            row = (a // (shape[k] * stride)) * stride + a % stride
            return 2 * devices * k + devices * int(negative) + row * shape[k] + int(x)
    raise ValueError(f"link={link!r} joins a device to itself")


def all_capacities(network: Network, count: int, devices: int) -> np.ndarray:
    """`capacities` of every link index 0 .. count - 1; where every link has the network's bandwidth, one
    read-only value seen `count` times (a fully connected mesh of 1024 devices has a million links)."""
    if network.topology == "hierarchical":
        return capacities(network, np.arange(count), devices)
    return np.broadcast_to(np.float64(network.bandwidth_bytes_per_s), (count,))


def capacities(network: Network, links: np.ndarray, devices: int) -> np.ndarray:
    """Bytes per second of each integer link index in `links`."""
    if network.topology == "hierarchical":
        spine = _fabric.uplink_bandwidth(network) if _fabric.has_leaves(network) else 0.0
        return np.where(links < 2 * devices, network.bandwidth_bytes_per_s,
                        np.where(links < 4 * devices, network.inter_bandwidth_bytes_per_s, spine))
    return np.full(len(links), float(network.bandwidth_bytes_per_s))


def route_latency(network: Network, src: np.ndarray, dst: np.ndarray, hops: np.ndarray) -> np.ndarray:
    """The latency of each route `src[i] -> dst[i]` of `hops[i]` links: one per hop, one per switch."""
    kind = network.topology
    if kind == "switch":
        return np.full(len(src), float(network.latency_s))
    if kind == "hierarchical":
        far = src // network.node_size != dst // network.node_size
        spine = np.where(_fabric.crossing(network, src, dst), network.spine_latency_s, 0.0)
        return np.where(far, network.inter_latency_s + spine, network.latency_s)
    return hops * network.latency_s


def segments(network: Network, src: np.ndarray, dst: np.ndarray, devices: int) -> tuple[np.ndarray, ...]:
    """The routes (`route`) of messages `src[i] -> dst[i]` (topology devices, `src != dst`) as intervals of
    link indices: message `flow_of[j]` crosses links `start[j] .. stop[j] - 1`; and every message's hop count."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    kind, count = network.topology, len(src)
    if kind in ("ring", "torus"):
        return _torus_segments(network.shape, network.wraparound, src, dst, devices)
    if kind == "fully_connected":
        start = src * devices + dst
        return np.arange(count, dtype=np.int64), start, start + 1, np.ones(count, np.int64)
    far = np.zeros(count, bool) if kind == "switch" else src // network.node_size != dst // network.node_size
    start = np.empty(2 * count, np.int64)
    start[0::2] = src + np.where(far, 2 * devices, 0)
    start[1::2] = dst + np.where(far, 3 * devices, devices)
    flow_of = np.repeat(np.arange(count, dtype=np.int64), 2)
    spine = np.flatnonzero(_fabric.crossing(network, src, dst) & far)
    if len(spine):
        up = 4 * devices + _fabric.leaf_of(network, src[spine])
        down = 4 * devices + _fabric.leaf_count(network, devices) + _fabric.leaf_of(network, dst[spine])
        flow_of, start = np.concatenate([flow_of, spine, spine]), np.concatenate([start, up, down])
    hops = np.full(count, 2, np.int64)
    hops[spine] = 4
    return flow_of, start, start + 1, hops


def subflows(network: Network, src: np.ndarray, dst: np.ndarray, devices: int) -> tuple[np.ndarray, ...]:
    """The paths of messages `src[i] -> dst[i]` (topology devices, `src != dst`) as sub-flows over intervals of
    link indices: sub-flow j carries `share[j]` of message `message[j]`'s bytes; sub-flow `flow_of[i]`
    crosses links `start[i] .. stop[i] - 1`; and every message's hop count (all of its paths are as long).
    One sub-flow per message, all of it, unless the network is multipath (see `routes`)."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    if not network.multipath or not len(src):
        flow_of, start, stop, hops = segments(network, src, dst, devices)
        return np.arange(len(src), dtype=np.int64), np.ones(len(src)), flow_of, start, stop, hops
    message, share, parts, first = [], [], [], 0
    for members, order, up, part in _multipath.groups(network.shape, network.wraparound, src, dst):
        flow_of, start, stop, _ = _torus_segments(network.shape, network.wraparound, src[members], dst[members],
                                                  devices, order, up)
        message.append(members)
        share.append(np.full(len(members), part))
        parts.append((flow_of + first, start, stop))
        first += len(members)
    hops = _torus_segments(network.shape, network.wraparound, src, dst, devices)[3]
    columns = [np.concatenate(column) for column in zip(*parts)]
    return np.concatenate(message), np.concatenate(share), *columns, hops


def _torus_segments(shape: tuple[int, ...], wraparound: tuple[bool, ...], src: np.ndarray, dst: np.ndarray,
                    devices: int, order=None, ways: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Shortest routes on a torus along the dimensions in `order` (all, in order, by default) as intervals,
    vectorised; `ways[i, k]` is the way message i goes at a half-way tie of dimension k (True: positive),
    else the parity rule of the module docstring."""
    flows, here = np.arange(len(src), dtype=np.int64), src.copy()
    parts, total = [], np.zeros(len(src), np.int64)
    for k in range(len(shape)) if order is None else order:
        size, stride = shape[k], math.prod(shape[k + 1:])
        at, to = (here // stride) % size, (dst // stride) % size
        forward = (to - at) % size
        if wraparound[k] and size > 2:  # a ring of two is one link each way
            tie_up = (at % 2 == 0) if ways is None else ways[:, k]
            up = (forward < size - forward) | ((2 * forward == size) & tie_up)
            hops = np.where(up, forward, size - forward)
        else:
            up, hops = to >= at, np.abs(to - at)
        moving = hops > 0
        row = (here // (size * stride)) * stride + here % stride
        line = 2 * devices * k + devices * (~up) + row * size  # the first index of the ring's links
        low = np.where(up, at, (at - hops + 1) % size)  # a negative run of links ends where it starts
        high = low + hops
        wraps = high > size
        keep = moving & ~wraps
        parts.append((flows[keep], line[keep] + low[keep], line[keep] + high[keep]))
        parts.append((flows[wraps], line[wraps] + low[wraps], line[wraps] + size))
        parts.append((flows[wraps], line[wraps], line[wraps] + high[wraps] - size))
        total += hops
        here += (to - at) * stride
    return (*(np.concatenate(column) for column in zip(*parts)), total)
