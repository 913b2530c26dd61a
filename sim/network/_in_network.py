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
from dataclasses import dataclass
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


@dataclass(frozen=True, eq=False)
class Table:
    """Every shard of one call's reduction posted at once (`LinkState.send_reduced_table`): shard j of
    `sizes[j]` bytes from every one of mesh devices `contributors` to all of them (`multicast`) or to
    `contributors[j]` alone, heard of by sink `sink` as slot j."""

    contributors: tuple[int, ...]
    multicast: bool
    sizes: np.ndarray
    sink: int


class _Columns:
    """The instant arrivals and the flows of posted reductions, gathered as arrays."""

    def __init__(self) -> None:
        self.instant: list[tuple] = []  # (sinks, latencies, slots)
        self.flows: list[tuple] = []  # (sinks, slots, sizes, latencies, flow_of, start, stop)
        self.count = 0  # flows so far

    def add_instant(self, sinks: np.ndarray, latency: float, slots: np.ndarray) -> None:
        self.instant.append((sinks, np.full(len(sinks), latency), slots))

    def add_flows(self, sinks: np.ndarray, slots: np.ndarray, sizes: np.ndarray, latency: float,
                  flow_of: np.ndarray, start: np.ndarray, stop: np.ndarray) -> None:
        """Flows `flow_of` numbered from 0 among these (one interval [start, stop) of links each row)."""
        self.flows.append((sinks, slots, sizes.astype(np.float64), np.full(len(sinks), latency),
                           flow_of + self.count, start, stop))
        self.count += len(sinks)

    def result(self) -> tuple[tuple, tuple]:
        if self.instant:
            instant = tuple(np.concatenate(c) for c in zip(*self.instant))
        else:
            instant = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64))
        if not self.flows:
            return instant, ()
        return instant, tuple(np.concatenate(c) for c in zip(*self.flows))


def flows(network: Network, posted: list, placement: np.ndarray | None, devices: int,
          base: int) -> tuple[tuple, tuple]:
    """The flows of reductions posted as (contributors, receivers, size, sink id) (slot 0) or as a `Table`
    on mesh devices: ((sink, latency, slot) of those that take no bandwidth: one device alone, none, or an
    empty shard), (sink, slot, size, latency, flow_of, start, stop) of the others, runs of consecutive links
    as one interval; in the order posted."""
    columns = _Columns()
    for entry in posted:
        if isinstance(entry, Table):
            _table_flows(network, entry, placement, devices, base, columns)
            continue
        contributors, receivers, size_bytes, sink_id = entry
        contributors, receivers = _placed(contributors, placement), _placed(receivers, placement)
        sink, zero = np.array([sink_id], np.int64), np.zeros(1, np.int64)
        every = contributors + receivers
        if len(set(every)) < 2:
            columns.add_instant(sink, 0.0, zero)
            continue
        wait = latency_s(network, every)
        if size_bytes == 0:
            columns.add_instant(sink, wait, zero)
            continue
        first, stop = _intervals(link_indices(network, reduction_route(network, contributors, receivers, devices),
                                              devices, base))
        columns.add_flows(sink, zero, np.array([size_bytes]), wait, np.zeros(len(first), np.int64), first, stop)
    return columns.result()


def _intervals(links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Links as runs of consecutive indices: each run's first link and the one past its last."""
    links = np.sort(links)
    cuts = np.flatnonzero(np.diff(links) != 1) + 1  # consecutive links make one interval
    return links[np.r_[0, cuts]], links[np.r_[cuts - 1, len(links) - 1]] + 1


def _table_flows(network: Network, table: Table, placement: np.ndarray | None, devices: int, base: int,
                 columns: _Columns) -> None:
    """A `Table`'s shards as the flows (or instant arrivals) the same reductions posted one by one give: every
    shard crosses the contributors' egress ports and adders, then its receivers' ingress ports."""
    placed = _placed(table.contributors, placement)
    sizes = table.sizes
    slots = np.arange(len(sizes), dtype=np.int64)
    sinks = np.full(len(sizes), table.sink, np.int64)
    if len(set(placed)) < 2:  # the receivers are among the contributors: the same test as one by one
        columns.add_instant(sinks, 0.0, slots)
        return
    wait = latency_s(network, placed)
    live = sizes != 0
    columns.add_instant(sinks[~live], wait, slots[~live])
    live = np.flatnonzero(live)
    if not len(live):
        return
    if table.multicast:
        first, stop = _intervals(link_indices(network, reduction_route(network, placed, placed, devices), devices,
                                              base))
        flow_of = np.repeat(np.arange(len(live), dtype=np.int64), len(first))
        first, stop = np.tile(first, len(live)), np.tile(stop, len(live))
    else:  # shard j also crosses contributor j's ingress port: one more interval
        first, stop = _intervals(link_indices(network, reduction_route(network, placed, (), devices), devices, base))
        into = _PORTS[across_nodes(network, placed)][2]
        ins = link_indices(network, tuple((into, d) for d in placed), devices, base)[live]
        k = len(first) + 1
        flow_of = np.repeat(np.arange(len(live), dtype=np.int64), k)
        first = np.column_stack([np.tile(first, (len(live), 1)), ins]).reshape(-1)
        stop = np.column_stack([np.tile(stop, (len(live), 1)), ins + 1]).reshape(-1)
    columns.add_flows(sinks[live], slots[live], sizes[live], wait, flow_of, first, stop)


def _placed(devices: Sequence[int], placement: np.ndarray | None) -> tuple[int, ...]:
    """Mesh devices as topology devices."""
    return tuple(int(d) for d in devices) if placement is None else tuple(int(placement[d]) for d in devices)


def in_network_s(mesh: Any, members: Sequence[int], shards: int, shard_bytes: float, multicast: bool) -> float:
    """`reduction_s` for mesh devices `members` of `mesh` (placed on its topology): what the cost model of
    'in_network' charges."""
    return reduction_s(mesh.network, _placed(members, mesh.placement), shards, shard_bytes, multicast)
