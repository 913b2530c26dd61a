"""What each collective's algorithm should cost on each topology, worked out by hand, not by the simulator.

Every case is one collective call over p devices, each holding an operand of `s` bytes, on a network with
a per-hop latency `a` and a one-way link bandwidth `w`. A case gives two answers:

- `exact(s)`: the alpha-beta time of the algorithm's steps under the model docs/concepts/network.md states (a step
  costs the hops of its longest route times `a` plus the bytes of its most loaded link over `w`; every
  flow on that link gets an equal share), as (alpha seconds, beta seconds). The cases are chosen so that
  every flow of a step is limited by equally loaded links, where max-min fair sharing gives exactly this.
- `textbook(s)`: the published bandwidth-only form the row quotes (`source`): nccl-tests, Thakur,
  Rabenseifner and Gropp (2005), and How to Scale Your Model's ICI forms (V the bytes of the gathered or
  exchanged array, N devices, W one-way, W_bidi = 2W). Large messages must come within 2% of it.

The link loads behind the ring and torus rows: on a ring of N (even) with ties split by the source's
parity, an all-pairs exchange puts sum(d, d < N/2) + N/4 = N^2/8 chunks on every link, so
T = (N/2) a + (N^2/8)(s/N)/w = V/(8w) = V/(4 W_bidi); on an A x B torus (dimension-order routes) a link of
dimension 0 carries (A^2/8) B chunks of s/(AB), one of dimension 1 A (B^2/8), so the busiest carries
max(A, B) s/8 bytes, V max(A, B)/(4 N W_bidi); without wraparound the middle link of a line of A carries
(A/2)^2 B chunks: twice the time.

With multipath routing (`_multipath_and_fabric`) a message is split over its minimal paths: on a ring of A a
transfer half way round sends half each way, so a directed link carries sum(d, d < A/2) + (A/2)(1/2) = A^2/8
chunks of an all-pairs exchange, as the parity rule gives; on an A x B torus a message moving along both
dimensions sends half XY (dimension 0 in its source's row) and half YX (dimension 0 in its destination's
row), so a dimension-0 link of row y carries A^2/8 chunks from row y's own messages, (B - 1)(A^2/8)/2 from
row y's sources bound elsewhere and as many from other rows' sources bound for row y: (A^2/8) B in all, the
dimension-order load again. The parts are of unequal sizes, though: on a 4 x 4 torus a source's 15 messages
are 4 of one hop (whole), 2 + 4 of two hops (halves: half way along one dimension, or XY/YX), 4 of three
hops (quarters: two orders, both ways at the tie) and 1 of four (eighths), so by symmetry every directed link
carries 27 parts: 1 whole, 6 halves, 12 quarters and 8 eighths of a chunk c (8 chunks in all). Every part on
a link runs at the same rate, so the parts of share t have all arrived after (sum over parts p of
min(size p, t c)) / w plus their hops' latency: 4a + 27c/(8w) for the eighths, 3a + 46c/(8w) for the quarters,
2a + 60c/(8w) for the halves, a + 8c/w for the wholes; the exchange ends with the latest of these (the eighths
for tiny blocks, the wholes for large ones).

A leaf/spine fabric of 4 nodes of 2 devices, leaves of 2 nodes joined at oversubscription 2:1 (uplink 2 NICs
x 2 nodes x w / 2 = 2w), carries all 16 cross-leaf messages of an all-pairs exchange from one leaf on its
uplink: they share it (w/8 each), the slowest of the exchange.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import collectives
import sim

LATENCY_S = 1e-6  # a: one hop
BANDWIDTH = 10e9  # w: bytes per second, one direction of one link or port
INTER_LATENCY_S = 3e-6  # A: one hop between nodes of the hierarchical topology
INTER_BANDWIDTH = 2.5e9  # w_net: bytes per second, one direction of a device's port between nodes
NIC_SWITCH_LATENCY_S = 5e-6  # the in-network rows' switch between nodes (its latency)
NODE_SIZE = 4  # devices per node of the in-network rows: 8 devices, 2 nodes


@dataclass(frozen=True)
class Case:
    """One row of the validation table: a call, a topology, and the two answers it should give."""

    collective: str
    algorithm: str
    topology: str  # "fully_connected" | "switch" | "ring" | "torus" | "torus_open" | "torus_multipath" |
    # "hierarchical" | "leaf_spine" | "switch_reduces" | "hierarchical_reduces"
    axes: tuple[tuple[str, int], ...]
    exact: Callable[[int], tuple[float, float]]
    textbook: Callable[[int], float]
    source: str
    costs: sim.Costs | None = None  # costs besides the wire the table's network carries (None: none)
    most_bytes: int = 0  # the largest operand the row runs with (0: any), where bigger results would not fit
    least_bytes: int = 0  # the smallest (a chunk for each of many devices)

    def sized(self, size_bytes: int) -> int:
        """The operand bytes this row runs with when the table asks for `size_bytes`."""
        return max(self.least_bytes, min(size_bytes, self.most_bytes) if self.most_bytes else size_bytes)

    @property
    def devices(self) -> int:
        return math.prod(size for _, size in self.axes)

    @property
    def name(self) -> str:
        name = f"{self.collective}/{self.algorithm} on {self.topology} ({'x'.join(str(n) for _, n in self.axes)})"
        return name if self.costs is None else name + " with costs"


def _lg(p: int) -> int:
    return int(math.log2(p))


def _steps(count: int, hops: int, step_bytes: float) -> tuple[float, float]:
    """`count` steps of `hops` hops each carrying `step_bytes` on its most loaded link."""
    return count * hops * LATENCY_S, count * step_bytes / BANDWIDTH


def _add(*terms: tuple[float, float]) -> tuple[float, float]:
    return sum(t[0] for t in terms), sum(t[1] for t in terms)


def _bidirectional(p: int, block: float, share: int) -> tuple[float, float]:
    """One phase of a bidirectional ring on p (even) members, one hop a step: p/2 steps, each direction
    carrying a block at each step but one, where it carries half (the opposite member's block, half each way):
    (p - 1)/2 blocks; `share` of a member's messages of a step go through one link (2 through a switch port)."""
    return p // 2 * LATENCY_S, (p - 1) / 2 * block * share / BANDWIDTH


def _form(collective: str, algorithm: str, p: int) -> Callable[[int], float]:
    """The bandwidth term of the algorithm record's alpha-beta closed form (`Algorithm.closed_form`, MPICH's
    n: the gathered array for a gather, the operand otherwise), for operands of s bytes."""
    definition = collectives.definition(collective)
    form = definition.algorithm(algorithm).closed_form
    return lambda s: form(p, definition.sizes.result_bytes(s, p), 0.0, 1 / BANDWIDTH)


def _one_axis(p: int, switch: bool) -> list[Case]:
    """The algorithms on p devices of a fully connected network (dedicated links) or a switch (one egress
    and one ingress port per device, so a member's messages of one step share its egress)."""
    topology, axes, w = ("switch" if switch else "fully_connected"), (("x", p),), BANDWIDTH
    fan = p - 1 if switch else 1  # how many of a member's same-step messages share one of its links
    port = 2 if switch else 1  # how many of a bidirectional ring's messages of a step share one
    ring_ag = lambda s: (p - 1) / p * (p * s) / w
    rs = lambda s: (p - 1) / p * s / w
    thakur = "Thakur et al. 2005"
    return [
        Case("all_gather", "direct", topology, axes, lambda s: _steps(1, 1, fan * s), ring_ag if switch else
             (lambda s: s / w), "nccl-tests (n-1)/n busbw" if switch else "one step, a + (n/p)b"),
        Case("all_gather", "ring", topology, axes, lambda s: _steps(p - 1, 1, s), _form("all_gather", "ring", p),
             f"{thakur}: (p-1)a + ((p-1)/p)nb"),
        Case("all_gather", "bidirectional_ring", topology, axes, lambda s: _bidirectional(p, s, port),
             ring_ag if switch else (lambda s: ring_ag(s) / 2),
             "V/W (N-1)/N (both directions share one port)" if switch else "V/W_bidi (N-1)/N"),
        Case("all_gather", "recursive_doubling", topology, axes, lambda s: (_lg(p) * LATENCY_S, (p - 1) * s / w),
             _form("all_gather", "recursive_doubling", p), f"{thakur}: lg(p)a + ((p-1)/p)nb"),
        Case("psum_scatter", "direct", topology, axes, lambda s: _steps(1, 1, fan * s / p),
             rs if switch else (lambda s: s / p / w), "nccl-tests (n-1)/n busbw" if switch else "a + (n/p)b"),
        Case("psum_scatter", "ring", topology, axes, lambda s: _steps(p - 1, 1, s / p),
             _form("psum_scatter", "ring", p),
             f"{thakur}: (p-1)a + ((p-1)/p)nb"),
        Case("psum_scatter", "bidirectional_ring", topology, axes, lambda s: _bidirectional(p, s / p, port),
             rs if switch else (lambda s: rs(s) / 2),
             "V/W (N-1)/N (both directions share one port)" if switch else "V/W_bidi (N-1)/N"),
        Case("psum_scatter", "recursive_halving", topology, axes,
             lambda s: (_lg(p) * LATENCY_S, (p - 1) / p * s / w), _form("psum_scatter", "recursive_halving", p),
             f"{thakur}: lg(p)a + ((p-1)/p)nb"),
        Case("psum", "direct", topology, axes, lambda s: _steps(1, 1, fan * s),
             (lambda s: (p - 1) * s / w) if switch else (lambda s: s / w), "a + (p-1)nb (one port)" if switch
             else "a + nb"),
        Case("psum", "ring", topology, axes, lambda s: _steps(2 * (p - 1), 1, s / p), _form("psum", "ring", p),
             f"{thakur}: 2(p-1)a + 2((p-1)/p)nb"),
        Case("psum", "bidirectional_ring", topology, axes,
             lambda s: _add(_bidirectional(p, s / p, port), _bidirectional(p, s / p, port)),
             (lambda s: 2 * rs(s)) if switch else rs, "2 ReduceScatter, both directions"),
        Case("psum", "recursive_doubling", topology, axes, lambda s: _steps(_lg(p), 1, s),
             _form("psum", "recursive_doubling", p), f"{thakur}: lg(p)(a + nb)"),
        Case("psum", "rabenseifner", topology, axes,
             lambda s: (2 * _lg(p) * LATENCY_S, 2 * (p - 1) / p * s / w), _form("psum", "rabenseifner", p),
             f"{thakur}: 2lg(p)a + 2((p-1)/p)nb"),
        Case("all_to_all", "direct", topology, axes, lambda s: _steps(1, 1, fan * s / p),
             rs if switch else (lambda s: s / p / w), "nccl-tests (n-1)/n busbw" if switch else "a + (n/p)b"),
        Case("all_to_all", "pairwise", topology, axes, lambda s: _steps(p - 1, 1, s / p),
             _form("all_to_all", "pairwise", p),
             f"{thakur}: (p-1)a + nb"),
        Case("all_to_all", "bruck", topology, axes, lambda s: _steps(_lg(p), 1, s / 2),
             _form("all_to_all", "bruck", p), f"{thakur}: lg(p)a + (n/2)lg(p)b"),
        Case("ragged_all_to_all", "direct", topology, axes, lambda s: _steps(1, 1, fan * s / p),
             rs if switch else (lambda s: s / p / w), "as all_to_all, equal slices"),
        Case("ragged_all_to_all", "pairwise", topology, axes, lambda s: _steps(p - 1, 1, s / p),
             _form("ragged_all_to_all", "pairwise", p),
             "as all_to_all pairwise, equal slices"),
    ]


def _ring(p: int) -> list[Case]:
    """A bidirectional ring of p (even) devices with wraparound."""
    axes, w = (("x", p),), BANDWIDTH
    one_way = lambda s: (p - 1) / p * (p * s) / w
    return [
        Case("all_gather", "ring", "ring", axes, lambda s: _steps(p - 1, 1, s), one_way, "(V/W)(N-1)/N"),
        Case("all_gather", "bidirectional_ring", "ring", axes, lambda s: _bidirectional(p, s, 1),
             lambda s: one_way(s) / 2, "(V/W_bidi)(N-1)/N"),
        Case("psum_scatter", "ring", "ring", axes, lambda s: _steps(p - 1, 1, s / p),
             lambda s: (p - 1) / p * s / w, "(V/W)(N-1)/N"),
        Case("psum_scatter", "bidirectional_ring", "ring", axes, lambda s: _bidirectional(p, s / p, 1),
             lambda s: (p - 1) / p * s / (2 * w), "(V/W_bidi)(N-1)/N"),
        Case("psum", "ring", "ring", axes, lambda s: _steps(2 * (p - 1), 1, s / p),
             lambda s: 2 * (p - 1) / p * s / w, "2 x ReduceScatter"),
        Case("psum", "bidirectional_ring", "ring", axes,
             lambda s: _add(_bidirectional(p, s / p, 1), _bidirectional(p, s / p, 1)),
             lambda s: (p - 1) / p * s / w, "2 x ReduceScatter over W_bidi"),
        Case("all_to_all", "direct", "ring", axes, lambda s: _steps(1, p // 2, p * p / 8 * s / p),
             lambda s: p * s / (4 * 2 * w), "V/(4 W_bidi) (exact for even N)"),
    ]


def _torus(a: int, b: int) -> list[Case]:
    """An a x b torus (mesh axes x, y on its dimensions), with wraparound and, for one row, without."""
    axes, w, n = (("x", a), ("y", b)), BANDWIDTH, a * b
    per_axis_ag = lambda s: _add(_steps(b - 1, 1, s), _steps(a - 1, 1, b * s))
    return [
        Case("all_to_all", "direct", "torus", axes, lambda s: _steps(1, a // 2 + b // 2, max(a, b) * s / 8),
             lambda s: n * s * max(a, b) / (4 * n * 2 * w), "V max(A,B)/(4 N W_bidi)"),
        Case("all_to_all", "direct", "torus_open", axes,
             lambda s: _steps(1, a + b - 2, max(a, b) * s / 4),
             lambda s: 2 * n * s * max(a, b) / (4 * n * 2 * w), "no wraparound doubles the time"),
        Case("all_gather", "per_axis", "torus", axes, per_axis_ag,
             lambda s: ((b - 1) / b * b * s + (a - 1) / a * n * s) / w, "ring over y, then over x"),
        Case("psum", "per_axis", "torus", axes,
             lambda s: _add(_steps(2 * (b - 1), 1, s / b), _steps(2 * (a - 1), 1, s / a)),
             lambda s: (2 * (b - 1) / b + 2 * (a - 1) / a) * s / w, "ring all-reduce over y, then over x"),
    ]


def _nodes(nodes: int, k: int) -> list[Case]:
    """`nodes` nodes of k devices (mesh axes node, local; the call over both): inside a node a switch (a, w,
    one port per device and direction), between nodes a port per device (A, w_net). The hierarchical
    algorithms (`collectives._hierarchical`) work inside the node in one direct step, whose k - 1 messages
    share the sender's port, and across nodes round a ring of the N devices of each local rank, one message
    per port and step. Their bandwidth forms are the two-level all-reduce of NCCL's and Horovod's
    hierarchical modes: 2 ((k-1)/k) s/w + 2 ((N-1)/N)(s/k)/w_net for an all-reduce of s bytes, half that
    for a reduce-scatter, and for an all-gather of V = p s bytes ((k-1)/k) V/w + ((N-1)/N)(V/k)/w_net."""
    axes, w, wn, p = (("node", nodes), ("local", k)), BANDWIDTH, INTER_BANDWIDTH, nodes * k
    inside = lambda size: (LATENCY_S, (k - 1) * size / w)  # one direct step, k - 1 messages of `size`
    across = lambda count, size: (count * INTER_LATENCY_S, count * size / wn)  # ring steps, `size` each
    source = "two-level all-reduce (NCCL/Horovod hierarchical)"
    return [
        Case("psum", "hierarchical", "hierarchical", axes,
             lambda s: _add(inside(s / k), across(2 * (nodes - 1), s / p), inside(s / k)),
             lambda s: 2 * (k - 1) / k * s / w + 2 * (nodes - 1) / nodes * (s / k) / wn, source),
        Case("psum_scatter", "hierarchical", "hierarchical", axes,
             lambda s: _add(inside(s / k), across(nodes - 1, s / p)),
             lambda s: (k - 1) / k * s / w + (nodes - 1) / nodes * (s / k) / wn, source + ", its first half"),
        Case("all_gather", "hierarchical", "hierarchical", axes,
             lambda s: _add(across(nodes - 1, s), inside(nodes * s)),
             lambda s: (k - 1) / k * p * s / w + (nodes - 1) / nodes * s * nodes / wn, source + ", its last half"),
        Case("psum", "tree", "hierarchical", axes,
             lambda s: _add(_steps(2 * (k - 1), 1, s), *(across(1, load * s / 2) for load in _TREE_LOADS[nodes])),
             lambda s: 2 * (k - 1) * s / w + sum(_TREE_LOADS[nodes]) * s / 2 / wn,
             "NCCL tree, unpipelined: 2(k-1) s/w + the tree steps' heaviest ports"),
    ]


# The double binary tree's steps between nodes (`collectives._tree`: the heap over the nodes and its mirror
# image), up then down, each as the most halves one port carries in it. 2 nodes: node 1 -> 0 in one tree and
# 0 -> 1 in the other, one half per port each way, up and down. 4 nodes (heap 0 <- 1, 2; 1 <- 3; mirror
# 3 <- 2, 1; 2 <- 0): up, the leaves 2, 3 of the heap and 0, 1 of the mirror send first (one half per port),
# then 1 -> 0 and 2 -> 3; down, the roots 0 and 3 send to both their children at once (two halves through
# each root's port and into each of 1 and 2), then 1 -> 3 and 2 -> 0.
_TREE_LOADS = {2: (1, 1), 4: (1, 1, 2, 1)}


def _in_network(p: int, node_size: int) -> list[Case]:
    """'in_network' on a switch that reduces (NVLS) and across the nodes of a hierarchical network, on the
    switch joining their NICs (SHARP): every member's p shards of s/p cross its egress port (s bytes), each sum
    crosses every receiver's ingress port once (s bytes for psum, s/p for psum_scatter), all at once: one
    switch latency plus s/w. The published NVLS form is t = n/W (busbw 2(p-1)/p n/t = 2(p-1)/p W, above the
    port rate); psum_scatter's is the same n/W, every member's whole operand going into the switch."""
    axes, w = (("x", p),), BANDWIDTH
    nvls = "NVLS: n/W (busbw 2(p-1)/p W)"
    rows = []
    for topology, latency in (("switch_reduces", LATENCY_S), ("hierarchical_reduces", NIC_SWITCH_LATENCY_S)):
        where = "" if topology == "switch_reduces" else f" (SHARP on the NIC switch, nodes of {node_size})"
        rows += [
            Case("psum", "in_network", topology, axes, lambda s, a=latency: (a, s / w), lambda s: s / w,
                 (nvls if not where else "n/W_nic") + where),
            Case("psum_scatter", "in_network", topology, axes, lambda s, a=latency: (a, s / w), lambda s: s / w,
                 "switch reduce-scatter: n/W" + where),
        ]
    return rows


# the parts on every directed link of a 4 x 4 multipath torus in an all-pairs exchange, by share of a chunk:
# (hops of the messages split so, share, parts per link) (see the module docstring)
_PARTS_4X4 = ((1, 1.0, 1), (2, 0.5, 6), (3, 0.25, 12), (4, 0.125, 8))


def _parts(chunk: float) -> tuple[float, float]:
    """An all-pairs exchange of `chunk`-byte messages on a 4 x 4 multipath torus: the last share to arrive."""
    arrivals = [(hops * LATENCY_S, sum(n * min(part, share) for _, part, n in _PARTS_4X4) * chunk / BANDWIDTH)
                for hops, share, _ in _PARTS_4X4]
    return max(arrivals, key=sum)


def _multipath_and_fabric() -> list[Case]:
    """Multipath routing on a 4 x 4 torus (wraparound), and an oversubscribed leaf/spine fabric between nodes
    (topology "leaf_spine": 4 nodes of 2 devices, 2 nodes per leaf)."""
    axes, w, n = (("x", 4), ("y", 4)), BANDWIDTH, 16
    fabric = (("x", 8),)
    return [
        Case("all_to_all", "direct", "torus_multipath", axes, lambda s: _parts(s / n),
             lambda s: n * s * 4 / (4 * n * 2 * w), "V max(A,B)/(4 N W_bidi), split over XY and YX"),
        Case("all_gather", "direct", "torus_multipath", axes, lambda s: _parts(s),
             lambda s: n * s * 4 / (4 * 2 * w), "N V max(A,B)/(4 N W_bidi): all_to_all of N blocks"),
        Case("all_to_all", "direct", "leaf_spine", fabric, lambda s: _steps(1, 2, 16 * s / 8 / 2),
             lambda s: 16 * (s / 8) / (2 * w), "16 cross-leaf blocks of s/8 over a 2w uplink (2:1)"),
        Case("all_gather", "direct", "leaf_spine", fabric, lambda s: _steps(1, 2, 16 * s / 2),
             lambda s: 16 * s / (2 * w), "16 cross-leaf blocks of s over a 2w uplink (2:1)"),
    ]


COSTS = sim.Costs(launch_s=0.5e-6, per_message_s=0.1e-6, efficiency=0.8, overhead_bytes=1024,
                  reduce_bytes_per_s=40e9)


def _with_costs(p: int) -> list[Case]:
    """Dedicated links carrying every cost besides the wire (`COSTS`): a call pays its launch once, a step the
    issue of each message a member sends in it, a message of m bytes (m / efficiency + overhead) / w on the
    wire, a reduction the bytes it adds over the rate. The textbook form is the bandwidth-only one at the
    effective bandwidth efficiency x w (LogGP's G = 1 / (e w), Alexandrov et al. 1995) plus the adds."""
    c, e, f, r, w = COSTS.per_message_s, COSTS.efficiency, COSTS.overhead_bytes, COSTS.reduce_bytes_per_s, BANDWIDTH
    axes, launch, share = (("x", p),), (COSTS.launch_s, 0.0), (p - 1) / p

    def steps(count: int, sent: int, message: float, added: float = 0.0) -> tuple[float, float]:
        return _add(launch, (count * (sent * c + LATENCY_S), count * (message / e + f) / w + added / r))

    source = "bandwidth form at e w (LogGP) + adds"
    rows = [
        ("all_gather", "direct", lambda s: steps(1, p - 1, s), lambda s: s / (e * w)),
        ("all_gather", "ring", lambda s: steps(p - 1, 1, s), lambda s: (p - 1) * s / (e * w)),
        ("psum_scatter", "ring", lambda s: steps(p - 1, 1, s / p, share * s),
         lambda s: share * s / (e * w) + share * s / r),
        ("psum", "direct", lambda s: steps(1, p - 1, s, (p - 1) * s), lambda s: s / (e * w) + (p - 1) * s / r),
        ("psum", "ring", lambda s: steps(2 * (p - 1), 1, s / p, share * s),
         lambda s: 2 * share * s / (e * w) + share * s / r),
        ("all_to_all", "direct", lambda s: steps(1, p - 1, s / p), lambda s: s / p / (e * w)),
    ]
    return [Case(op, name, "fully_connected", axes, exact, textbook, source, COSTS)
            for op, name, exact, textbook in rows]
def _bi(s: int, u: int, half_first: bool) -> list[int]:
    """The elements on the busiest link at each step of a bidirectional ring phase on 4 members with units of u
    elements: a whole unit, and a half (the clockwise half, the larger, of the unit of the member opposite), in
    that order for a gather, reversed for a reduce-scatter."""
    steps = [u, -(-u // 2)]
    return steps[::-1] if half_first else steps


def _split(e: int, d: int) -> list[int]:
    """numpy.array_split's part sizes of e elements in d parts."""
    return [e // d + (r < e % d) for r in range(d)]


def _lanes(s: int, phases: list[list[int]], half_first: bool) -> tuple[float, float]:
    """Phases of lanes running together (units in elements of 4 bytes): each step costs one hop and its
    largest lane's busiest link."""
    alpha = beta = 0.0
    for lanes in phases:
        for step in zip(*(_bi(s, u, half_first) for u in lanes)):
            alpha, beta = alpha + LATENCY_S, beta + 4 * max(step) / BANDWIDTH
    return alpha, beta


def _multi_gather(s: int, d: int, block: int) -> tuple[float, float]:
    """Multi-axis all-gather of blocks of `block` elements: part r's unit is s^i parts in phase i."""
    return _lanes(s, [[p * s ** i for p in _split(block, d)] for i in range(d)], False)


def _multi_scatter(s: int, d: int, chunk: int) -> tuple[float, float]:
    """Multi-axis reduce-scatter of s^d chunks of `chunk` elements: s^(d-1-i) parts a unit in phase i."""
    return _lanes(s, [[p * s ** (d - 1 - i) for p in _split(chunk, d)] for i in range(d)], True)


def _multi_exchange(s: int, d: int, chunk: int) -> tuple[float, float]:
    """Multi-axis all_to_all (s = 4) of chunks of `chunk` elements: in each phase every part goes directly to the s - 1
    others along one axis, s^(d-1) chunks' part a message; on a ring of 4 the busiest link carries 2 messages
    (s^2/8, ties split by the source's parity) over 2 hops."""
    n, load = s ** d, s * s // 8
    return d * (s // 2) * LATENCY_S, d * load * 4 * max(_split(chunk, d)) * n // s / BANDWIDTH


def _multi_axis(s: int, d: int) -> list[Case]:
    """'multi_axis' on an s^d torus (s = 4: a ring of 4 links each way per axis): d parts at once, one per axis."""
    axes, n, w = tuple(zip("xyz", (s,) * d)), s ** d, BANDWIDTH
    bidi = 2 * w  # the bandwidth an axis gives one part, both ways round
    hops = d * (s // 2) * LATENCY_S  # a gather's or reduce-scatter's steps: s // 2 an axis
    e = lambda b: b // 4  # float32 elements of b bytes
    padded = lambda b: d * -(-e(b) // (n * d))  # psum's chunk: d parts of ceil(elements / (n d)) each
    source = f"How to Scale Your Model: V/(W_bidi d) (N-1)/N, d = {d} axes"
    most, least = (0, 0) if d < 3 else (2 << 20, 4 * n)
    gathered = 1 << 20 if d < 3 else 64 << 10  # a gather's result is n times its operand
    return [
        Case("all_gather", "multi_axis", "torus", axes, lambda b: _multi_gather(s, d, e(b)),
             lambda b: hops + n * b * (n - 1) / n / (bidi * d), source + " + d (s/2) a",
             most_bytes=gathered, least_bytes=least),
        Case("psum_scatter", "multi_axis", "torus", axes, lambda b: _multi_scatter(s, d, e(b) // n),
             lambda b: hops + b * (n - 1) / n / (bidi * d), source + " + d (s/2) a",
             most_bytes=most, least_bytes=least),
        Case("psum", "multi_axis", "torus", axes,
             lambda b: _add(_multi_scatter(s, d, padded(b)), _multi_gather(s, d, padded(b))),
             lambda b: 2 * hops + 2 * b * (n - 1) / n / (bidi * d), "2 x ReduceScatter, " + source,
             most_bytes=most, least_bytes=least),
        Case("all_to_all", "multi_axis", "torus", axes, lambda b: _multi_exchange(s, d, e(b) // n),
             lambda b: d * (s // 2) * LATENCY_S + b * s / 8 / w,
             "V s/(4 N W_bidi) on a ring of s per axis, all at once", most_bytes=most, least_bytes=least),
    ]


def multi_axis_cases() -> list[Case]:
    """The multi-axis rows: a 2-D torus of 4 x 4 and a 3-D one of 4 x 4 x 4."""
    return _multi_axis(4, 2) + _multi_axis(4, 3)


def cases() -> list[Case]:
    """Every row of the validation table."""
    return (_one_axis(8, switch=False) + _one_axis(8, switch=True) + _ring(8) + _torus(4, 4)
            + multi_axis_cases() + _multipath_and_fabric() + _nodes(2, 4) + _nodes(4, 2) + _in_network(8, NODE_SIZE)
            + _with_costs(8))


def busbw_factor(collective: str, p: int) -> float:
    """nccl-tests' bus bandwidth factor: busbw = algbw x factor (the collective's `Sweep` record)."""
    return collectives.definition(collective).sweep.busbw_factor(p)


def nccl_size(collective: str, s: int, p: int) -> int:
    """The `size` nccl-tests reports for a call where every member holds `s` bytes: the gathered buffer for
    AllGather, the input buffer for ReduceScatter, AllReduce and AllToAll (the collective's `Sweep` record)."""
    return p * s if collectives.definition(collective).sweep.blocks == "gathered" else s
