"""The mesh and the network under it: axes, device groups, topologies and their presets, routes, and the
links' state (flows sharing links max-min fairly)."""

from sim.network._costs import Costs
from sim.network._fair import max_min_rates
from sim.network._flows import LinkState
from sim.network._in_network import in_network_s
from sim.network._mesh import Group, Mesh, check_axis_index_groups
from sim.network._network import DEFAULT_COPY_COST, TOPOLOGIES, CopyCost, Network
from sim.network._presets import CALIBRATIONS, PRESETS, ROOFLINES
from sim.network._roofline import Roofline

__all__ = [
    "CALIBRATIONS",
    "DEFAULT_COPY_COST",
    "PRESETS",
    "ROOFLINES",
    "TOPOLOGIES",
    "CopyCost",
    "Costs",
    "Group",
    "LinkState",
    "Mesh",
    "Network",
    "Roofline",
    "check_axis_index_groups",
    "in_network_s",
    "max_min_rates",
]
