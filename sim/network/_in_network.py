"""In-network reduction: a switch that adds what its ports take in and multicasts the sum (NVLink SHARP on an
NVSwitch, SHARP on an InfiniBand switch), as links and flows.

The model, precisely. A reduction of one shard over a group is one flow (cut-through, as every message in
`sim.network._flows`): it crosses every contributor's egress port into the switch and that port's reduction
link (the switch adding what the port takes in, at `Network.switch_reduction_bytes_per_s`, the port rate when
None), then the ingress port of every receiver of the sum. A contribution crosses its sender's egress port
only; the sum crosses each receiver's ingress port once, however many contributed to it. The flow starts
when the last contributor has posted its part (the switch cannot finish a sum before every term arrives)
and arrives one switch latency after its last byte is sent, as a message through the switch does.

Which switch: on a `switch` network, the one switch; on a `hierarchical` one, the node's fast switch when the
whole group is in one node (NVLS), else the slow switch joining the nodes, through every member's NIC port
(SHARP). The reduction links get integer indices after the topology's own (`sim.network._topology`): on a
switch `2D + d` for device d's port, on a hierarchical network `4D + d` (node switch) and `5D + d` (NIC
switch), for D devices.

So a psum of n bytes over p members, its shards of n/p reduced and multicast to all, puts n bytes on every
egress port and n on every ingress port: about n / bandwidth, where a ring moves 2 (p - 1)/p n through each.

>>> from sim.network._network import Network
>>> net = Network(1e-6, 10e9, "switch", switch_reduces=True)
>>> reduction_route(net, (0, 1), (0, 1), 2)
(('out', 0), ('out', 1), ('sum', 0), ('sum', 1), ('in', 0), ('in', 1))
>>> round(reduction_s(net, (0, 1, 2, 3), 4, 1_000_000, multicast=True) * 1e6, 3)  # 1 us + 4 shards of 1 MB at 10 GB/s
401.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from sim.network._network import Network

_PORTS = {False: ("out", "sum", "in"), True: ("nic_out", "nic_sum", "nic_in")}


def reduces(network: Network) -> bool:
    """Whether `network`'s switch can reduce (`Network.switch_reduces`)."""
    return network.switch_reduces


def across_nodes(network: Network, devices: Sequence[int]) -> bool:
    """Whether topology `devices` span nodes of a hierarchical network (their reduction is on the NIC switch)."""
    if network.topology != "hierarchical" or not len(devices):
        return False
    nodes = {int(d) // network.node_size for d in devices}
    return len(nodes) > 1


def reduction_route(network: Network, contributors: Sequence[int], receivers: Sequence[int],
                    devices: int) -> tuple:
    """The hashable link ids a shard's reduction crosses: every contributor's egress port and reduction link,
    then every receiver's ingress port (topology devices)."""
    out, add, into = _PORTS[across_nodes(network, tuple(contributors) + tuple(receivers))]
    return (tuple((out, int(d)) for d in contributors) + tuple((add, int(d)) for d in contributors)
            + tuple((into, int(d)) for d in receivers))


def link_bandwidth(network: Network, link: tuple) -> float:
    """Bytes per second of a reduction route's link (a port's, or a port's reduction: the smaller of the
    switch's rate and the port's)."""
    kind = link[0]
    nic = kind.startswith("nic")
    port = network.inter_bandwidth_bytes_per_s if nic else network.bandwidth_bytes_per_s
    if kind in ("sum", "nic_sum") and network.switch_reduction_bytes_per_s is not None:
        return min(port, network.switch_reduction_bytes_per_s)
    return port


def latency_s(network: Network, devices: Sequence[int]) -> float:
    """One switch latency: the node switch's, or the NIC switch's for a group across nodes."""
    return network.inter_latency_s if across_nodes(network, devices) else network.latency_s


def link_count(network: Network, devices: int) -> int:
    """Reduction links on `devices` devices (one per port of each switch that reduces)."""
    if not reduces(network):
        return 0
    return devices * (2 if network.topology == "hierarchical" else 1)


def capacities(network: Network, devices: int) -> np.ndarray:
    """Bytes per second of the reduction links, in index order after the topology's links."""
    kinds = ("sum", "nic_sum") if network.topology == "hierarchical" else ("sum",)
    return np.concatenate([np.full(devices, link_bandwidth(network, (kind, 0))) for kind in kinds]) \
        if reduces(network) else np.zeros(0)


def link_indices(network: Network, route: tuple, devices: int, base: int) -> np.ndarray:
    """Integer link indices of a reduction route's links; `base` is the topology's own link count."""
    ports = {"out": 0, "in": devices, "nic_out": 2 * devices, "nic_in": 3 * devices,
             "sum": base, "nic_sum": base + devices}
    return np.array([ports[kind] + int(device) for kind, device in route], np.int64)


def reduction_s(network: Network, members: Sequence[int], shards: int, shard_bytes: float,
                multicast: bool) -> float:
    """Seconds for the switch to reduce `shards` shards of `shard_bytes` over topology devices `members`,
    each sum multicast to every member (`multicast`) or sent to one member, shard j to member j mod p:
    one switch latency plus the most loaded link's bytes over its bandwidth (flows of equal size sharing
    links alike, where max-min fair sharing gives exactly this)."""
    members = tuple(members)
    p = len(members)
    if p < 2:
        return 0.0
    out, add, into = ((kind, members[0]) for kind in _PORTS[across_nodes(network, members)])
    sent = shards * shard_bytes  # every egress port and adder carries every shard
    taken = sent if multicast else math.ceil(shards / p) * shard_bytes
    slowest = max(sent / link_bandwidth(network, out), sent / link_bandwidth(network, add),
                  taken / link_bandwidth(network, into))
    return latency_s(network, members) + slowest


def flows(network: Network, posted: list[tuple], placement: np.ndarray | None, devices: int,
          base: int) -> tuple[tuple, tuple]:
    """The flows of reductions posted as (contributors, receivers, size, sink id) on mesh devices:
    ((sink, latency) of those that take no bandwidth: one device alone, none, or an empty shard),
    (sink, size, latency, flow_of, start, stop) of the others, runs of consecutive links as one interval."""
    instant_sink, instant_latency = [], []
    sink, size, latency, flow_of, start, stop = [], [], [], [], [], []
    for contributors, receivers, size_bytes, sink_id in posted:
        contributors, receivers = _placed(contributors, placement), _placed(receivers, placement)
        every = contributors + receivers
        if len(set(every)) < 2:
            instant_sink.append(sink_id)
            instant_latency.append(0.0)
            continue
        wait = latency_s(network, every)
        if size_bytes == 0:
            instant_sink.append(sink_id)
            instant_latency.append(wait)
            continue
        links = np.sort(link_indices(network, reduction_route(network, contributors, receivers, devices), devices,
                                     base))
        cuts = np.flatnonzero(np.diff(links) != 1) + 1  # consecutive links make one interval
        first, last = links[np.r_[0, cuts]], links[np.r_[cuts - 1, len(links) - 1]]
        flow_of.append(np.full(len(first), len(sink), np.int64))
        start.append(first)
        stop.append(last + 1)
        sink.append(sink_id)
        size.append(float(size_bytes))
        latency.append(wait)
    instant = (np.array(instant_sink, np.int64), np.array(instant_latency))
    if not sink:
        return instant, ()
    return instant, (np.array(sink, np.int64), np.array(size), np.array(latency), np.concatenate(flow_of),
                     np.concatenate(start), np.concatenate(stop))


def _placed(devices: Sequence[int], placement: np.ndarray | None) -> tuple[int, ...]:
    """Mesh devices as topology devices."""
    return tuple(int(d) for d in devices) if placement is None else tuple(int(placement[d]) for d in devices)


def in_network_s(mesh: Any, members: Sequence[int], shards: int, shard_bytes: float, multicast: bool) -> float:
    """`reduction_s` for mesh devices `members` of `mesh` (placed on its topology): what the cost model of
    'in_network' charges."""
    return reduction_s(mesh.network, _placed(members, mesh.placement), shards, shard_bytes, multicast)
