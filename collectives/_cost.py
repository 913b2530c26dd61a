"""The cost model behind `algorithm='auto'`: each algorithm's steps, timed on the network's routes.

An algorithm's record holds its schedule of steps (`Algorithm.schedule`); in a step every member sends one
message (or a few) of a known size by a known rule (`Pattern`: to the member `shift` positions on, to index
XOR `xor`, to every member, within the whole group or along one axis of the grid; or a step of a tree's
edges). A step costs the longest
route's latency (the sum of its links' latencies: messages are pipelined through their hops) plus the bytes
of the most loaded link over its bandwidth (messages that share a link share its bandwidth; on a multipath
torus each path of a message loads its links with its share, `sim.Mesh.routes`); a schedule costs
the sum of its steps. On the default fully connected network this is the alpha-beta model (`closed_form`, the
forms of Thakur, Rabenseifner and Gropp 2005); on a ring, torus or switch the routes add hops and shared links.

It is cheap at scale: a step over every pair of p members is timed from at most `_SAMPLED` of its p - 1
shifts, their link loads scaled up, so 1024 devices cost a few thousand routes per algorithm; each answer
is cached per (candidates, members, grid, bytes, network).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

import sim
from collectives._algorithm import Algorithm, Pattern
from collectives._hop_order import cyclic_order, rooted_order
from collectives._nodes import node_grid
from collectives._ring_order import RINGS, ring_order
from collectives._tree import down_steps, up_steps

_SAMPLED = 8  # shifts timed for an all-pairs step; the rest are assumed to load links alike
_CACHE: dict[tuple, tuple[object, float]] = {}
_CACHE_LIMIT = 4096


# ---------------------------------------------------------------------------------------------- timing


def step_s(pattern: Pattern, size_bytes: float, mesh: sim.Mesh, members: Sequence[int],
           shape: tuple[int, ...]) -> float:
    """Seconds one step takes on `mesh`'s network: longest route latency plus the most loaded link's bytes
    over its bandwidth. The messages of `pattern.alongside` run in the same step and load the links too. On a
    multipath torus a message's paths carry shares of it (`sim.Mesh.routes`); parts of each share are timed
    apart (`_drained_s`), since small parts of far messages drain first."""
    network = mesh.network
    if pattern.kind in ("multicast", "reduce"):  # the switch adds (`sim.network._in_network`)
        return sim.in_network_s(mesh, members, len(members), size_bytes, pattern.kind == "multicast")
    loads: dict[float, dict] = {}  # share of a message -> link -> bytes of parts of that share
    latency: dict[float, float] = {}  # share -> the longest latency of a path carrying it
    parts = ((pattern, size_bytes), *pattern.alongside)
    for part, each in parts:
        _load(part, each, mesh, members, shape, loads, latency)
    costs = costs_of(network)
    issue = costs.issue_s(sum(_sent(part, shape) for part, _ in parts))
    if not any(loads.values()):
        return issue + max(latency.values(), default=0.0)
    wire = costs.wire_bytes(size_bytes) / size_bytes if size_bytes > 0 else 1.0
    return issue + max(latency[share] + wire * _drained_s(loads, share, network) for share in loads)


def _load(pattern: Pattern, size_bytes: float, mesh: sim.Mesh, members: Sequence[int], shape: tuple[int, ...],
          loads: dict[float, dict], latency: dict[float, float]) -> None:
    """Add the bytes of `pattern`'s messages to `loads` and its routes' latencies to `latency` (per share)."""
    for shifts, scale in _shift_sets(pattern, shape):
        for src, dst in _pairs(pattern, shifts, shape):
            _route(mesh, members[src], members[dst], size_bytes * scale, loads, latency)
    if pattern.kind == "pairs":  # the sampled shifts may miss the farthest pair: every route from a few sources
        for src, dst in _farthest_pairs(pattern, shape):
            _route(mesh, members[src], members[dst], 0.0, loads, latency)


def _route(mesh: sim.Mesh, src: int, dst: int, size_bytes: float, loads: dict[float, dict],
           latency: dict[float, float]) -> None:
    """Load every path from `src` to `dst` with its share of `size_bytes`; note each path's latency."""
    network = mesh.network
    for route, share in mesh.routes(src, dst):
        latency[share] = max(latency.get(share, 0.0), sum(network.link_latency_s(link) for link in route))
        on = loads.setdefault(share, {})
        for link in route:
            on[link] = on.get(link, 0.0) + size_bytes * share


def _farthest_pairs(pattern: Pattern, shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """(source, destination) of an all-pairs step from up to `_SAMPLED` sources to every other member (along
    `pattern.axis`, or over the whole group): among them the step's longest route."""
    index, found = np.arange(math.prod(shape)).reshape(shape), []
    for src in _sample(list(range(index.size))):
        if pattern.axis is None:
            targets = range(index.size)
        else:
            coords = list(np.unravel_index(src, shape))
            targets = (int(index[(*coords[:pattern.axis], t, *coords[pattern.axis + 1:])])
                       for t in range(shape[pattern.axis]))
        found += [(src, dst) for dst in targets if dst != src]
    return found


def _drained_s(loads: dict[float, dict], share: float, network: sim.Network) -> float:
    """When the parts of `share` have drained from the most loaded link, every flow on a link at an equal
    rate: each part of a larger share has sent as many bytes by then, each smaller part all of its own."""
    links = {link for on in loads.values() for link in on}
    return max(sum(on.get(link, 0.0) * min(1.0, share / other) for other, on in loads.items())
               / network.link_bandwidth(link) for link in links)


def _sent(pattern: Pattern, shape: tuple[int, ...]) -> int:
    """Messages the busiest member sends in one step of `pattern` (what it spends issuing them)."""
    if pattern.kind == "pairs":
        return (shape[pattern.axis] if pattern.axis is not None else math.prod(shape)) - 1
    if pattern.kind == "fan":
        return math.prod(shape) - 1
    return 2 if pattern.kind == "bishift" else 1


def _shift_sets(pattern: Pattern, shape: tuple[int, ...]) -> list[tuple[list[int], float]]:
    """The offsets a step's messages go by, with the factor each sampled offset's load stands for."""
    if pattern.kind != "pairs":
        return [([pattern.k], 1.0)]
    s = shape[pattern.axis] if pattern.axis is not None else math.prod(shape)
    offsets = list(range(1, s))
    sampled = _sample(offsets)
    return [(sampled, len(offsets) / len(sampled))] if sampled else []


def _sample(offsets: list[int]) -> list[int]:
    """At most `_SAMPLED` of `offsets`, evenly spread, the first and last included."""
    if len(offsets) <= _SAMPLED:
        return offsets
    return sorted({offsets[round(i * (len(offsets) - 1) / (_SAMPLED - 1))] for i in range(_SAMPLED)})


def _pairs(pattern: Pattern, shifts: list[int], shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """(source, destination) group indices of a step's messages."""
    p = math.prod(shape)
    if pattern.kind in _ROOTED:
        return _ROOTED[pattern.kind](p, pattern.k)
    if pattern.kind in _TREE_STEPS:
        return _along(shape, pattern.axis or 0, _TREE_STEPS[pattern.kind](shape[pattern.axis or 0])[pattern.k])
    index = np.arange(p).reshape(shape)
    if pattern.axis is None:
        index, axis = index.reshape(-1), 0
    else:
        axis = pattern.axis
    found = []
    for k in shifts:
        if pattern.kind == "xor":
            targets = np.take(index, np.arange(index.shape[axis]) ^ k, axis=axis)
        else:
            targets = np.roll(index, -k, axis=axis)
        found += zip(index.reshape(-1).tolist(), targets.reshape(-1).tolist())
        if pattern.kind == "bishift":
            found += zip(index.reshape(-1).tolist(), np.roll(index, k, axis=axis).reshape(-1).tolist())
    return [(s, d) for s, d in found if s != d]


# Steps of a collective rooted at group index 0 (a broadcast from its source): 'fan' (index 0 to every other),
# 'tree' (every index below k to index + k), 'chain' (index r to r + 1).
_ROOTED = {
    "fan": lambda p, k: [(0, d) for d in range(1, p)],
    "tree": lambda p, k: [(r, r + k) for r in range(k) if r + k < p],
    "chain": lambda p, k: [(r, r + 1) for r in range(p - 1)],
}


# The steps of NCCL's double binary tree across the grid axis of nodes (`collectives._tree`), step k of each.
_TREE_STEPS = {"tree up": up_steps, "tree down": down_steps}


def _along(shape: tuple[int, ...], axis: int, edges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """(source, destination) group indices of `edges` between positions along grid axis `axis`, in every line
    of the grid along it."""
    index = np.arange(math.prod(shape)).reshape(shape)
    found = []
    for a, b in edges:
        found += zip(np.take(index, a, axis).reshape(-1).tolist(), np.take(index, b, axis).reshape(-1).tolist())
    return found


def cost_s(algorithm: Algorithm, mesh: sim.Mesh, members: Sequence[int], shape: tuple[int, ...],
           size_bytes: int) -> float:
    """Seconds `algorithm`'s schedule is expected to take on `members` (grid `shape`), `size_bytes` each: its
    launch (`sim.Costs.launch_s`, where members send to each other) and its steps."""
    total, ring = (costs_of(mesh.network).launch_s if len(members) > 1 else 0.0), None
    if algorithm.nodes:  # its steps run over the grid (nodes, members per node)
        order, shape = node_grid(mesh, members)
        members = tuple(members[g] for g in order)
    members = _hop_ordered(algorithm, mesh, members)
    around: list = [None, 0]  # the edges of the ring steps run so far back to back, and how many
    for pattern, each, repeat in algorithm.steps(shape, size_bytes):
        if algorithm.name in RINGS and pattern.k == 1 and pattern.axis is None:  # round the ring's own order
            ring = ring or tuple(members[g] for g in ring_order(mesh, members))
            edges = _edges_s(pattern, each, mesh, ring, shape)
            if edges is None:  # every edge alike: the steps one after another
                total += repeat * step_s(pattern, each, mesh, ring, shape)
                continue
            if around[0] is not None and around[0] != edges:
                total += _longest_run_s(*around)
                around[1] = 0
            around = [edges, around[1] + repeat]
            continue
        if around[0] is not None:
            total += _longest_run_s(*around)
            around = [None, 0]
        if pattern.kind == "shifts":  # one step per shift: the sampled ones stand for all
            offsets = list(range(1, math.prod(shape)))
            sampled = _sample(offsets)
            times = [step_s(Pattern("shift", k), each, mesh, members, shape) for k in sampled]
            total += repeat * sum(times) * len(offsets) / max(1, len(sampled))
            continue
        total += repeat * step_s(pattern, each, mesh, members, shape)
    if around[0] is not None:
        total += _longest_run_s(*around)
    return total + _adding_s(algorithm.over(shape), mesh, shape, size_bytes)


def _edges_s(pattern: Pattern, size_bytes: float, mesh: sim.Mesh, ring: Sequence[int], shape: tuple[int, ...]
             ) -> list[float] | None:
    """Seconds each message of a one-way ring step takes (edge i from `ring[i]` to `ring[i + 1]`) when every
    member sends at once: its route's latency plus its busiest link's bytes over that link's bandwidth; None
    where the edges are alike (the step's time is every edge's) or a message takes several paths."""
    if pattern.kind != "shift" or pattern.alongside:
        return None
    loads: dict[float, dict] = {}
    _load(pattern, size_bytes, mesh, ring, shape, loads, {})
    if len(loads) != 1:
        return None
    on, network, costs = next(iter(loads.values())), mesh.network, costs_of(mesh.network)
    issue = costs.issue_s(_sent(pattern, shape))
    wire = costs.wire_bytes(size_bytes) / size_bytes if size_bytes > 0 else 1.0
    edges = []
    for src, dst in sorted(_pairs(pattern, [pattern.k], shape)):
        (route, _), = mesh.routes(ring[src], ring[dst])
        drained = max((on.get(link, 0.0) / network.link_bandwidth(link) for link in route), default=0.0)
        edges.append(issue + sum(network.link_latency_s(link) for link in route) + wire * drained)
    return None if max(edges) == min(edges) else edges


def _longest_run_s(edges: list[float], steps: int) -> float:
    """Seconds `steps` ring steps take when each member sends on as soon as it has received (as the simulated
    rings run): the longest run of `steps` consecutive edges round the ring, a slow edge (a line's wrap-round
    route) met once per lap rather than at every step."""
    laps, rest = divmod(steps, len(edges))
    doubled = np.cumsum([0.0, *edges, *edges])
    return laps * float(doubled[len(edges)]) + max(float(doubled[s + rest] - doubled[s]) for s in range(len(edges)))


def _adding_s(algorithm: Algorithm, mesh: sim.Mesh, shape: tuple[int, ...], size_bytes: int) -> float:
    """Seconds a member spends adding what it receives (`Algorithm.adds` at `sim.Costs.reduce_bytes_per_s`)."""
    if algorithm.adds is None:
        return 0.0
    return costs_of(mesh.network).reduce_s(algorithm.adds(shape, size_bytes))


def costs_of(network: object) -> sim.Costs:
    """The network's costs besides the wire; none for a network that states none (a duck-typed one)."""
    return getattr(network, "costs", _NO_COSTS)


_NO_COSTS = sim.Costs()


def _hop_ordered(algorithm: Algorithm, mesh: sim.Mesh, members: Sequence[int]) -> tuple[int, ...]:
    """`members` in the order `algorithm` sends round (`collectives._hop_order`): a broadcast's tree or chain
    (members listed from the source on) and Bruck's all_to_all follow the topology where that is fewer hops."""
    members = tuple(members)
    if not isinstance(mesh, sim.Mesh) or len(members) < 3:
        return members
    if algorithm.name == "bruck":
        order = cyclic_order(mesh, members)
    elif algorithm.name in ("tree", "ring") and any(p.kind in ("tree", "chain") for p, _, _ in
                                                      algorithm.steps((len(members),), 1)):
        order = rooted_order(mesh, members, "chain" if algorithm.name == "ring" else "tree")
    else:
        return members
    return tuple(members[i] for i in order)


def fastest(candidates: Sequence[Algorithm], mesh: sim.Mesh, members: Sequence[int], shape: tuple[int, ...],
            size_bytes: int) -> Algorithm:
    """The candidate with the smallest `cost_s` (the earlier one on a tie), cached per call shape."""
    network = mesh.network
    key = (tuple(candidates), tuple(members), shape, size_bytes, id(network))
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is network:
        return hit[1]
    times = [cost_s(a, mesh, members, shape, size_bytes) for a in candidates]
    pick = candidates[int(np.argmin(times))]
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[key] = (network, pick)
    return pick


def _record(op: str, algorithm: str) -> Algorithm:
    """The record of `op`'s algorithm called `algorithm` (names as a user gives them)."""
    from collectives._registry import definition  # the registry imports every collective, which import this
    return definition(op).algorithm(algorithm)


def estimate_s(op: str, algorithm: str, mesh: sim.Mesh, members: Sequence[int], shape: tuple[int, ...],
               size_bytes: int) -> float:
    """Seconds `algorithm` is expected to take for `op` on `members` (grid `shape`), `size_bytes` each (the
    operand; for all_gather the block each member contributes)."""
    return cost_s(_record(op, algorithm), mesh, members, shape, size_bytes)


def closed_form(op: str, algorithm: str, p: int, size_bytes: float, alpha_s: float, beta_s: float) -> float:
    """The alpha-beta time of `algorithm` for `op` over p members (one port per device, MPICH's model).

    `size_bytes` is n in the forms: the whole gathered array (all_gather), the operand (all-reduce,
    reduce-scatter, all_to_all). AllGather ring (p-1)a + ((p-1)/p)nb, recursive doubling lg(p)a +
    ((p-1)/p)nb; ReduceScatter ring and recursive halving the same with p-1 or lg(p) steps; AllReduce ring
    2(p-1)a + 2((p-1)/p)nb, recursive doubling lg(p)(a + nb), Rabenseifner 2lg(p)a + 2((p-1)/p)nb;
    AllToAll pairwise (p-1)a + ((p-1)/p)nb, Bruck lg(p)a + (n/2)lg(p)b for p a power of two, and for any p
    lg(p)a + (n/p)(c_0 + ... + c_{lg(p)-1})b, c_k the slots among 0 .. p-1 with bit k set. Each form is its
    `Algorithm` record's `closed_form`.
    """
    record = _record(op, algorithm)
    if record.closed_form is None:
        from collectives._registry import definition
        stated = [a.name for a in definition(op).algorithms if a.closed_form is not None]
        raise sim.InvalidArgumentError(f"closed_form: op={op!r} with algorithm={algorithm!r} has no closed form; "
                                       f"those of {op} with one: {stated}")
    return record.closed_form(p, size_bytes, alpha_s, beta_s)
