"""A leaf/spine fabric between the nodes of a hierarchical network.

Without leaves (`Network.leaf_size is None`) every device's NIC port pair sits on one non-blocking switch
joining the nodes. With leaves, the NIC ports hang off leaf switches joined through spines:

- `rails=False`: a leaf holds every NIC of `leaf_size` consecutive nodes (nodes 0 .. leaf_size - 1 on leaf 0,
  and so on);
- `rails=True` (rail-optimized, as in NVIDIA's DGX SuperPOD): a leaf holds NIC r of every node of a group of
  `leaf_size` nodes, one leaf per rail r = device index within its node; so devices of the same rank in
  different nodes of a group meet on their leaf, and devices of different ranks meet at the spines.

Each leaf has an uplink (`("up", leaf)`, towards the spines) and a downlink (`("down", leaf)`, from them),
each carrying the leaf's aggregate uplink bandwidth per direction: the NIC ports a full leaf holds times the
NIC bandwidth over `oversubscription` (1: non-blocking). A message between nodes on the same leaf crosses
`nic_out`, `nic_in` as before; between leaves it crosses `nic_out`, its leaf's uplink, the far leaf's downlink
and `nic_in`, and pays `spine_latency_s` on the uplink besides the NIC port's `inter_latency_s`. The spines
themselves are non-blocking.

Link indices after the 4 x devices of the hierarchical ports: uplinks 4D .. 4D + L - 1, then downlinks
(L leaves).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sim.network._network import Network

KINDS = ("up", "down")


def has_leaves(network: Network) -> bool:
    """Whether the nodes of `network` are joined through leaves and spines."""
    return network.topology == "hierarchical" and network.leaf_size is not None


def leaf_of(network: Network, device):
    """The leaf of topology `device` (an int or an integer array)."""
    node = device // network.node_size
    group = node // network.leaf_size
    return group * network.node_size + device % network.node_size if network.rails else group


def leaf_count(network: Network, devices: int) -> int:
    """How many leaves hold the NICs of `devices` devices."""
    groups = math.ceil(devices // network.node_size / network.leaf_size)
    return groups * (network.node_size if network.rails else 1)


def ports_per_leaf(network: Network) -> int:
    """How many NIC ports a full leaf holds."""
    return network.leaf_size * (1 if network.rails else network.node_size)


def uplink_bandwidth(network: Network) -> float:
    """A leaf's aggregate uplink (and downlink) bandwidth, bytes per second per direction."""
    return ports_per_leaf(network) * network.inter_bandwidth_bytes_per_s / network.oversubscription


def route(network: Network, src: int, dst: int) -> tuple:
    """The link ids from `src` to `dst` on different nodes."""
    near, far = leaf_of(network, src), leaf_of(network, dst)
    if near == far:
        return (("nic_out", src), ("nic_in", dst))
    return (("nic_out", src), ("up", near), ("down", far), ("nic_in", dst))


def crossing(network: Network, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Which messages `src[i] -> dst[i]` go from one leaf to another (False everywhere without leaves)."""
    if not has_leaves(network):
        return np.zeros(len(src), bool)
    return leaf_of(network, src) != leaf_of(network, dst)


def link_index(network: Network, link: tuple, devices: int) -> int:
    """The integer index of an uplink or downlink id."""
    return 4 * devices + KINDS.index(link[0]) * leaf_count(network, devices) + int(link[1])


def link_id(network: Network, index: int, devices: int) -> tuple:
    """The id of an uplink or downlink index (>= 4 x devices)."""
    kind, leaf = divmod(index - 4 * devices, leaf_count(network, devices))
    return (KINDS[kind], leaf)


def describe(network: Network) -> str:
    """The fabric in a few words, e.g. '; leaves of 32 nodes by rail, oversubscription 1:1'."""
    if not has_leaves(network):
        return ""
    rails = " by rail" if network.rails else ""
    text = f"; leaves of {network.leaf_size} nodes{rails}, oversubscription {network.oversubscription:g}:1"
    if network.spine_latency_s:
        text += f", spine latency {network.spine_latency_s * 1e6:g} us"
    return text
