"""What moving bytes costs: `Network` (a topology of links, each with a latency and a bandwidth per direction,
and the route a message takes) and `CopyCost` (a device's local copies).

How messages share links over time is `sim.network._flows` (flow-level, max-min fair); where the links are and which
ones a route crosses is `sim.network._topology`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sim._errors import InvalidArgumentError, InvalidTypeError
from sim.network import _fabric, _topology
from sim.network._costs import FREE, Costs
from sim.network._roofline import Roofline

TOPOLOGIES = ("fully_connected", "switch", "ring", "torus", "hierarchical")


@dataclass(frozen=True)
class Network:
    """Links with a latency (alpha) and a bandwidth (1 / beta, bytes per second in each direction), in one of
    five topologies (see `sim.network._topology` for link ids and routes):

    - `fully_connected`: a dedicated link per ordered pair of devices (the default);
    - `switch`: every device has one egress and one ingress port into a non-blocking switch; all of a
      device's messages share its ports (an NVSwitch node);
    - `ring` and `torus`: 1-, 2- or 3-D, a bidirectional link between neighbours, `wraparound` per dimension;
      dimension-order routing, the shorter way round each ring; with `multipath`, a transfer is split in
      equal shares over all its minimal paths (dimension orders, both ways at a half-way tie: see
      `sim.network._multipath` and `routes`);
    - `hierarchical`: nodes of `node_size` devices on a fast switch (`latency_s`, `bandwidth_bytes_per_s`),
      every device also with its own NIC port pair on a slower switch joining the nodes
      (`inter_latency_s`, `inter_bandwidth_bytes_per_s`); with `leaf_size`, that switch is a leaf/spine
      fabric: leaves of `leaf_size` nodes (one per rail with `rails`), each with an uplink to the spines of
      its NICs' bandwidth over `oversubscription`, `spine_latency_s` more between leaves (`sim.network._fabric`).

    `shape` is the topology's device shape (a torus's dimensions; `(nodes, node_size)` for hierarchical);
    None for fully_connected and switch (any number of devices) and, for ring and hierarchical, until a mesh
    sizes it. A multi-hop message is pipelined (cut-through) unless `store_and_forward`. `costs` adds what
    a call costs besides the wire (launch, per-message issue, protocol efficiency, reduction arithmetic:
    `sim.Costs`); by default nothing.

    `switch_reduces`: the switch adds what its ports take in (NVLink SHARP on an NVSwitch, SHARP on an
    InfiniBand switch), so psum and psum_scatter may run `algorithm='in_network'`
    (`sim.network._in_network`); each port's reduction takes in at most `switch_reduction_bytes_per_s`
    (None: the port rate, the ideal).

    `roofline`: each device's peak FLOP/s and memory bandwidth (`sim.Roofline`), what local work charged with
    `sim.compute` takes; None (the default, as for a network that is not a preset): work given by its counts
    cannot be timed, only work given in seconds.

    >>> Network.torus((4, 4), wraparound=(True, False)).route(0, 7)
    ((0, 4), (4, 5), (5, 6), (6, 7))
    """

    latency_s: float = 1e-6
    bandwidth_bytes_per_s: float = 100e9
    topology: str = "fully_connected"
    shape: tuple[int, ...] | None = None
    wraparound: tuple[bool, ...] | None = None
    node_size: int | None = None
    inter_latency_s: float | None = None
    inter_bandwidth_bytes_per_s: float | None = None
    store_and_forward: bool = False
    preset_name: str | None = None
    switch_reduces: bool = False
    switch_reduction_bytes_per_s: float | None = None
    multipath: bool = False
    leaf_size: int | None = None
    rails: bool = False
    oversubscription: float = 1.0
    spine_latency_s: float = 0.0
    costs: Costs = FREE
    roofline: Roofline | None = None

    def __post_init__(self) -> None:
        _check_link("", self.latency_s, self.bandwidth_bytes_per_s)
        if self.roofline is not None and not isinstance(self.roofline, Roofline):
            raise InvalidTypeError(f"roofline={self.roofline!r} must be a sim.Roofline (peak FLOP/s and memory "
                                   f"bandwidth of a device) or None")
        if not isinstance(self.costs, Costs):
            raise InvalidTypeError(f"costs={self.costs!r} must be a sim.Costs (launch, per-message, protocol "
                                   f"efficiency and reduction costs)")
        if self.topology not in TOPOLOGIES:
            raise InvalidArgumentError(f"topology={self.topology!r} must be one of {', '.join(TOPOLOGIES)}")
        if self.shape is not None:
            object.__setattr__(self, "shape", _check_shape(self.shape, self.topology))
        if self.topology in ("ring", "torus"):
            if self.topology == "torus" and self.shape is None:
                raise InvalidArgumentError("topology='torus' needs shape=, e.g. shape=(4, 4)")
            object.__setattr__(self, "wraparound", _check_wraparound(self.wraparound, self.shape))
        if self.topology == "hierarchical":
            _check_hierarchical(self)
        if not isinstance(self.store_and_forward, bool):
            raise InvalidTypeError(f"store_and_forward={self.store_and_forward!r} must be True or False")
        _check_reduction(self)
        _check_multipath(self)
        _check_fabric(self)

    @classmethod
    def fully_connected(cls, latency_s: float = 1e-6, bandwidth_bytes_per_s: float = 100e9,
                        store_and_forward: bool = False) -> Network:
        """Every device has a direct link to every other."""
        return cls(latency_s, bandwidth_bytes_per_s, "fully_connected", store_and_forward=store_and_forward)

    @classmethod
    def switch(cls, latency_s: float = 1e-6, bandwidth_bytes_per_s: float = 100e9,
               store_and_forward: bool = False) -> Network:
        """Every device has one egress and one ingress port of `bandwidth_bytes_per_s` on a non-blocking switch;
        a message crosses its sender's egress port and its receiver's ingress port, for one latency."""
        return cls(latency_s, bandwidth_bytes_per_s, "switch", store_and_forward=store_and_forward)

    @classmethod
    def ring(cls, latency_s: float = 1e-6, bandwidth_bytes_per_s: float = 100e9, devices: int | None = None,
             wraparound: bool = True, store_and_forward: bool = False, multipath: bool = False) -> Network:
        """A bidirectional ring over `devices` devices (None: as many as the mesh has), in device id order;
        `multipath` sends a transfer to the device half way round half each way."""
        shape = None if devices is None else (devices,)
        return cls(latency_s, bandwidth_bytes_per_s, "ring", shape, (wraparound,), store_and_forward=store_and_forward,
                   multipath=multipath)

    @classmethod
    def torus(cls, shape: tuple[int, ...], wraparound: bool | tuple[bool, ...] = True, latency_s: float = 1e-6,
              bandwidth_bytes_per_s: float = 100e9, store_and_forward: bool = False,
              multipath: bool = False) -> Network:
        """A 1-, 2- or 3-D torus of `shape`; `wraparound` for every dimension or one per dimension; `multipath`
        splits each transfer over its minimal paths instead of one dimension-ordered route."""
        return cls(latency_s, bandwidth_bytes_per_s, "torus", shape, wraparound, store_and_forward=store_and_forward,
                   multipath=multipath)

    @classmethod
    def hierarchical(cls, node_size: int, nodes: int | None = None, latency_s: float = 1e-6,
                     bandwidth_bytes_per_s: float = 450e9, inter_latency_s: float = 5e-6,
                     inter_bandwidth_bytes_per_s: float = 50e9, store_and_forward: bool = False,
                     leaf_size: int | None = None, rails: bool = False, oversubscription: float = 1.0,
                     spine_latency_s: float = 0.0) -> Network:
        """Nodes of `node_size` devices (consecutive ids) on a fast switch; each device's NIC on a slow one:
        one non-blocking switch, or with `leaf_size` a leaf/spine fabric (see the class docstring)."""
        shape = None if nodes is None else (nodes, node_size)
        return cls(latency_s, bandwidth_bytes_per_s, "hierarchical", shape, None, node_size, inter_latency_s,
                   inter_bandwidth_bytes_per_s, store_and_forward, leaf_size=leaf_size, rails=rails,
                   oversubscription=oversubscription, spine_latency_s=spine_latency_s)

    @classmethod
    def preset(cls, name: str, shape: tuple[int, ...] | None = None, calibration: str = "measured") -> Network:
        """A real system's network (see `sim.network._presets` for each one's figures and sources):
        `calibration='measured'` fits published measurements (protocol efficiency, launch and per-message
        costs), `'ideal'` is the hardware's link rates with no cost besides the wire."""
        from sim.network._presets import preset

        return preset(name, shape, calibration)

    @property
    def devices(self) -> int | None:
        """How many devices the topology holds (None: any number)."""
        return None if self.shape is None else math.prod(self.shape)

    def sized(self, devices: int) -> Network:
        """This network holding exactly `devices` devices: a ring or hierarchical network without a size gets
        one; any other size mismatch is an error naming both and the rule."""
        if self.topology in ("fully_connected", "switch") and self.shape is None:
            return self
        if self.shape is None and self.topology == "ring":
            return replace(self, shape=(devices,))
        if self.shape is None:  # hierarchical
            if devices % self.node_size:
                raise InvalidArgumentError(f"a mesh of {devices} devices does not fit hierarchical node_size="
                                           f"{self.node_size}: the device count must be a multiple of node_size")
            return replace(self, shape=(devices // self.node_size, self.node_size))
        if self.devices != devices:
            fix = "" if self.preset_name is None else (
                f"; give preset {self.preset_name!r} the shape of a system of {devices} devices "
                f"(Network.preset({self.preset_name!r}, shape); in a scenario, [network] shape = [...]), or a mesh of "
                f"its shape")
            raise InvalidArgumentError(f"a mesh of {devices} devices does not fit {self.topology} shape={self.shape} "
                                       f"({self.devices} devices): a mesh must have exactly as many devices as "
                                       f"its topology{fix}")
        return self

    def route(self, src: int, dst: int) -> tuple:
        """The links (hashable ids, see `sim.network._topology`) a message from topology device `src` to `dst`
        crosses, in order."""
        if self.topology in ("ring", "torus", "hierarchical") and self.shape is None and src != dst:
            raise InvalidArgumentError(f"a {self.topology} network without shape= has no routes until a mesh sizes "
                                       f"it: ask sim.Mesh(..., network=...).route(src, dst)")
        return _topology.route(self, src, dst)

    def routes(self, src: int, dst: int) -> tuple[tuple[tuple, float], ...]:
        """Every path a message from topology device `src` to `dst` is split over, as (links, share of its
        bytes): `((route(src, dst), 1.0),)` unless the network is multipath.

        >>> [(len(path), share) for path, share in Network.ring(devices=4, multipath=True).routes(0, 2)]
        [(2, 0.5), (2, 0.5)]
        """
        if not self.multipath:
            return ((self.route(src, dst), 1.0),)
        return _topology.routes(self, src, dst)

    def link_latency_s(self, link: tuple) -> float:
        """The latency of `link` (a link id from `route`); a switch's ingress ports have none."""
        if self.topology == "switch":
            return self.latency_s if link[0] == "out" else 0.0
        if self.topology == "hierarchical":
            return {"out": self.latency_s, "nic_out": self.inter_latency_s,
                    "up": self.spine_latency_s}.get(link[0], 0.0)
        return self.latency_s

    def link_bandwidth(self, link: tuple) -> float:
        """The bandwidth of `link` in bytes per second, per direction."""
        if self.topology == "hierarchical" and link[0] in ("nic_out", "nic_in"):
            return self.inter_bandwidth_bytes_per_s
        if self.topology == "hierarchical" and link[0] in _fabric.KINDS:
            return _fabric.uplink_bandwidth(self)
        return self.bandwidth_bytes_per_s

    def transfer_s(self, size_bytes: int) -> float:
        """Time one link needs to push `size_bytes` onto the wire."""
        return size_bytes / self.bandwidth_bytes_per_s

    def describe(self) -> str:
        """The topology in a few words, e.g. 'torus 4x4 (wraparound: no, no)' or 'preset tpu-v5e: torus 4x4'."""
        text = self.topology
        if self.shape is not None and self.topology != "hierarchical":
            text += " " + "x".join(map(str, self.shape))
        if self.wraparound is not None and self.shape is not None and len(self.shape) > 1:
            text += " (wraparound: " + ", ".join("yes" if w else "no" for w in self.wraparound) + ")"
        elif self.wraparound == (False,):
            text += " (no wraparound)"
        if self.topology == "hierarchical":
            nodes = "" if self.shape is None else f"{self.shape[0]} nodes of "
            text += (f" ({nodes}{self.node_size} devices; between nodes latency {self.inter_latency_s * 1e6:g} us, "
                     f"bandwidth {self.inter_bandwidth_bytes_per_s / 1e9:g} GB/s{_fabric.describe(self)})")
        if self.multipath:
            text += ", multipath"
        if self.store_and_forward:
            text += ", store-and-forward"
        if self.switch_reduces:
            rate = self.switch_reduction_bytes_per_s
            text += ", the switch reduces" + ("" if rate is None else f" ({rate / 1e9:g} GB/s per port)")
        if not self.costs.free:
            text += f"; costs: {self.costs.describe()}"
        return text if self.preset_name is None else f"preset {self.preset_name}: {text}"


def _check_link(prefix: str, latency_s: object, bandwidth: object) -> None:
    """A latency >= 0 and a bandwidth > 0, both finite numbers."""
    for name, value, ok, rule in ((f"{prefix}latency_s", latency_s, lambda v: v >= 0, ">= 0"),
                                  (f"{prefix}bandwidth_bytes_per_s", bandwidth, lambda v: v > 0, "> 0")):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidTypeError(f"{name}={value!r} must be a number")
        if not math.isfinite(value) or not ok(value):
            raise InvalidArgumentError(f"{name}={value} must be a finite number {rule}")


def _check_shape(shape: object, topology: str) -> tuple[int, ...]:
    """A tuple of 1 to 3 positive ints (2 for hierarchical: nodes, node_size)."""
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    ok = isinstance(shape, (tuple, list)) and all(isinstance(s, int) and not isinstance(s, bool) for s in shape)
    if not ok or not all(s >= 1 for s in shape):
        raise InvalidArgumentError(f"shape={shape!r} must be a tuple of positive integers")
    rank = {"ring": (1,), "torus": (1, 2, 3), "hierarchical": (2,)}.get(topology, (1,))
    if len(shape) not in rank:
        rule = "of 1 to 3 dimensions" if topology == "torus" else f"of {rank[0]} dimension(s)"
        raise InvalidArgumentError(f"shape={tuple(shape)} must be {rule} for topology={topology!r}")
    return tuple(shape)


def _check_wraparound(wraparound: object, shape: tuple[int, ...] | None) -> tuple[bool, ...]:
    """One bool per dimension (a single bool applies to all)."""
    rank = 1 if shape is None else len(shape)
    if wraparound is None or isinstance(wraparound, bool):
        return (True if wraparound is None else wraparound,) * rank
    if not isinstance(wraparound, (tuple, list)) or not all(isinstance(w, bool) for w in wraparound):
        raise InvalidTypeError(f"wraparound={wraparound!r} must be a bool or a tuple of bools, one per dimension")
    if len(wraparound) != rank:
        raise InvalidArgumentError(f"wraparound={tuple(wraparound)} must have one entry per dimension of "
                                   f"shape={shape} ({rank})")
    return tuple(wraparound)


def _check_multipath(network: Network) -> None:
    """`multipath` is a bool, only on a ring or torus, and not with store-and-forward hops."""
    if not isinstance(network.multipath, bool):
        raise InvalidTypeError(f"multipath={network.multipath!r} must be True or False")
    if network.multipath and network.topology not in ("ring", "torus"):
        raise InvalidArgumentError(f"multipath=True needs topology='ring' or 'torus', not topology="
                                   f"{network.topology!r}: only a ring or torus has several minimal paths")
    if network.multipath and network.store_and_forward:
        raise InvalidArgumentError("multipath=True with store_and_forward=True: a message split over several "
                                   "paths is modelled cut-through only; drop one of them")


def _check_fabric(network: Network) -> None:
    """Leaf/spine fields: only on a hierarchical network with `leaf_size`, each of the right type and range."""
    if network.leaf_size is None:
        changed = [f"{name}={value!r}" for name, value, default in (
            ("rails", network.rails, False), ("oversubscription", network.oversubscription, 1.0),
            ("spine_latency_s", network.spine_latency_s, 0.0)) if value != default]
        if changed:
            raise InvalidArgumentError(f"{', '.join(changed)} needs a leaf/spine fabric: give leaf_size= (nodes "
                                       f"per leaf) on a hierarchical network")
        return
    if network.topology != "hierarchical":
        raise InvalidArgumentError(f"leaf_size={network.leaf_size!r} needs topology='hierarchical', not "
                                   f"topology={network.topology!r}: leaves join the nodes of a hierarchical network")
    size = network.leaf_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidArgumentError(f"leaf_size={size!r} must be a positive integer (nodes per leaf)")
    if not isinstance(network.rails, bool):
        raise InvalidTypeError(f"rails={network.rails!r} must be True or False")
    _check_link("spine_", network.spine_latency_s, 1.0)
    over = network.oversubscription
    if isinstance(over, bool) or not isinstance(over, (int, float)) or not math.isfinite(over) or not over > 0:
        raise InvalidArgumentError(f"oversubscription={over!r} must be a finite number > 0 (a leaf's NIC bandwidth "
                                   f"over its uplink bandwidth; 1 is non-blocking)")


def _check_hierarchical(network: Network) -> None:
    """A positive node size matching the shape, and the between-node link figures."""
    size = network.node_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidArgumentError(f"node_size={size!r} must be a positive integer")
    if network.shape is not None and network.shape[1] != size:
        raise InvalidArgumentError(f"shape={network.shape} must be (nodes, node_size={size})")
    _check_link("inter_", network.inter_latency_s, network.inter_bandwidth_bytes_per_s)


def _check_reduction(network: Network) -> None:
    """A switch that reduces is a switch (or a hierarchical network's switches); its rate a positive number."""
    if not isinstance(network.switch_reduces, bool):
        raise InvalidTypeError(f"switch_reduces={network.switch_reduces!r} must be True or False")
    if network.switch_reduces and network.topology not in ("switch", "hierarchical"):
        raise InvalidArgumentError(f"switch_reduces=True needs a switch: topology={network.topology!r} has none "
                                   f"(use topology='switch' or 'hierarchical')")
    rate = network.switch_reduction_bytes_per_s
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))):
        raise InvalidTypeError(f"switch_reduction_bytes_per_s={rate!r} must be a number or None")
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise InvalidArgumentError(f"switch_reduction_bytes_per_s={rate} must be a finite number > 0 (None: the "
                                   f"port rate)")


@dataclass(frozen=True)
class CopyCost:
    """What a local copy costs: `run_overhead_s` per contiguous run touched plus bytes over bandwidth.

    The defaults model an accelerator's copy engine: 200 GB/s and one 2 ns descriptor per run.

    >>> round(CopyCost().time_s(size_bytes=4096, runs=64) * 1e9, 2)   # 64 runs * 2 ns + 4096 B / 200 GB/s
    148.48
    """

    bandwidth_bytes_per_s: float = 200e9
    run_overhead_s: float = 2e-9

    def __post_init__(self) -> None:
        if not self.bandwidth_bytes_per_s > 0:
            raise InvalidArgumentError(f"bandwidth_bytes_per_s={self.bandwidth_bytes_per_s} must be > 0")
        if not self.run_overhead_s >= 0:
            raise InvalidArgumentError(f"run_overhead_s={self.run_overhead_s} must be >= 0")

    def time_s(self, size_bytes: int, runs: int) -> float:
        """Seconds to copy `size_bytes` spread over `runs` contiguous runs (0 when `runs` <= 1)."""
        return 0.0 if runs <= 1 else runs * self.run_overhead_s + size_bytes / self.bandwidth_bytes_per_s


DEFAULT_COPY_COST = CopyCost()
