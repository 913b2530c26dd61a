"""The cost model behind `algorithm='auto'`: each algorithm's steps, timed on the network's routes.

An algorithm is a schedule of steps; in a step every member sends one message (or a few) of a known size
by a known rule (`Pattern`: to the member `shift` positions on, to index XOR `xor`, to every member,
within the whole group or along one axis of the grid). A step costs the longest route's latency (the sum
of its links' latencies: messages are pipelined through their hops) plus the bytes of the most loaded link
over its bandwidth (messages that share a link share its bandwidth); a schedule costs the sum of its
steps. On the default fully connected network this is the alpha-beta model (`closed_form`, the forms of
Thakur, Rabenseifner and Gropp 2005); on a ring, torus or switch the routes add hops and shared links.

It is cheap at scale: a step over every pair of p members is timed from at most `_SAMPLED` of its p - 1
shifts, their link loads scaled up, so 1024 devices cost a few thousand routes per algorithm; each answer
is cached per (collective, members, grid, bytes, network).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

import sim
from collectives._algorithms import inner

_SAMPLED = 8  # shifts timed for an all-pairs step; the rest are assumed to load links alike
_CACHE: dict[tuple, tuple[object, float]] = {}
_CACHE_LIMIT = 4096


@dataclass(frozen=True)
class Pattern:
    """Who sends to whom in one step: `kind` 'shift' (to index + k), 'xor' (to index ^ k), 'pairs' (to every
    other member), 'bishift' (to index + k and index - k, half the bytes each way); along grid axis `axis`
    (None: over the whole group). 'shifts' stands for p - 1 steps, one per shift k = 1 .. p - 1 (pairwise
    exchange), timed from at most `_SAMPLED` of them."""

    kind: str
    k: int = 0
    axis: int | None = None


Step = tuple[Pattern, float, int]  # (pattern, bytes of each message, how many times the step repeats)


def _lg(p: int) -> int:
    return max(0, math.ceil(math.log2(p))) if p > 1 else 0


def schedule(op: str, algorithm: str, shape: tuple[int, ...], size_bytes: int) -> list[Step]:
    """The steps of `algorithm` for `op` on a group laid out as the grid `shape` whose members each hold
    `size_bytes` (the operand; for all_gather the block each member contributes)."""
    p, b = math.prod(shape), float(size_bytes)
    family, algorithm = _FAMILY.get(op, "direct"), inner(op, algorithm, shape)
    if family == "direct" or algorithm == "direct":
        return [(Pattern("pairs"), _direct_bytes(family, b, p), 1)]
    if algorithm == "per_axis" and len(shape) > 1:
        return _per_axis(family, shape, b)
    return _SCHEDULES[family, algorithm](p, b)


def _direct_bytes(family: str, b: float, p: int) -> float:
    """What one 'direct' message carries: a share of the operand (scatter, exchange) or all of it."""
    return b / p if family in ("scatter", "exchange") else b


def _per_axis(family: str, shape: tuple[int, ...], b: float) -> list[Step]:
    """One axis at a time, the minor axis first: rings (gather, reduce) or all pairs (exchange)."""
    steps, held = [], b
    for axis in reversed(range(len(shape))):
        s = shape[axis]
        if family == "gather":
            steps.append((Pattern("shift", 1, axis), held, s - 1))
            held *= s
        elif family == "reduce":
            steps.append((Pattern("shift", 1, axis), b / s, 2 * (s - 1)))
        else:
            steps.append((Pattern("pairs", 0, axis), b / s, 1))
    return steps


def _halving(p: int, b: float) -> list[Step]:
    """Recursive halving: distances p/2, p/4, ..., 1, each message half the last."""
    return [(Pattern("xor", p >> (k + 1)), b / (2 ** (k + 1)), 1) for k in range(_lg(p))]


def _doubling(p: int, b: float) -> list[Step]:
    """Recursive doubling of held blocks: distances 1, 2, ..., p/2, each message twice the last."""
    return [(Pattern("xor", 1 << k), b * (1 << k), 1) for k in range(_lg(p))]


def _bruck(p: int, b: float) -> list[Step]:
    """Bruck: step k sends the blocks whose index has bit k set, to index + 2^k."""
    return [(Pattern("shift", 1 << k), b / p * sum(1 for j in range(p) if j >> k & 1), 1) for k in range(_lg(p))]


_SCHEDULES = {
    ("gather", "ring"): lambda p, b: [(Pattern("shift", 1), b, p - 1)],
    ("gather", "bidirectional_ring"): lambda p, b: [(Pattern("bishift", 1), b, p - 1)],
    ("gather", "recursive_doubling"): _doubling,
    ("reduce", "ring"): lambda p, b: [(Pattern("shift", 1), b / p, 2 * (p - 1))],
    ("reduce", "bidirectional_ring"): lambda p, b: [(Pattern("bishift", 1), b / p, 2 * (p - 1))],
    ("reduce", "recursive_doubling"): lambda p, b: [(Pattern("xor", 1 << k), b, 1) for k in range(_lg(p))],
    ("reduce", "rabenseifner"): lambda p, b: _halving(p, b) + _doubling(p, b / p),
    ("scatter", "ring"): lambda p, b: [(Pattern("shift", 1), b / p, p - 1)],
    ("scatter", "recursive_halving"): _halving,
    ("exchange", "pairwise"): lambda p, b: [(Pattern("shifts"), b / p, 1)],
    ("exchange", "bruck"): _bruck,
}
_FAMILY = {"all_gather": "gather", "all_gather_invariant": "gather", "psum": "reduce", "pmean": "reduce",
           "pmax": "reduce", "pmin": "reduce", "psum_invariant": "reduce", "psum_scatter": "scatter",
           "all_to_all": "exchange", "ragged_all_to_all": "exchange"}


# ---------------------------------------------------------------------------------------------- timing


def step_s(pattern: Pattern, size_bytes: float, mesh: sim.Mesh, members: Sequence[int],
           shape: tuple[int, ...]) -> float:
    """Seconds one step takes on `mesh`'s network: longest route latency plus the most loaded link's bytes
    over its bandwidth."""
    network = mesh.network
    loads: dict = {}
    latency = 0.0
    for shifts, scale in _shift_sets(pattern, shape):
        for src, dst in _pairs(pattern, shifts, shape):
            route = mesh.route(members[src], members[dst])
            latency = max(latency, sum(network.link_latency_s(link) for link in route))
            for link in route:
                loads[link] = loads.get(link, 0.0) + size_bytes * scale
    if not loads:
        return latency
    return latency + max(load / network.link_bandwidth(link) for link, load in loads.items())


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


def estimate_s(op: str, algorithm: str, mesh: sim.Mesh, members: Sequence[int], shape: tuple[int, ...],
               size_bytes: int) -> float:
    """Seconds `algorithm` is expected to take for `op` on `members` (grid `shape`), `size_bytes` each."""
    total = 0.0
    for pattern, each, repeat in schedule(op, algorithm, shape, size_bytes):
        each = each / 2 if pattern.kind == "bishift" else each
        if pattern.kind == "shifts":  # one step per shift: the sampled ones stand for all
            offsets = list(range(1, math.prod(shape)))
            sampled = _sample(offsets)
            times = [step_s(Pattern("shift", k), each, mesh, members, shape) for k in sampled]
            total += repeat * sum(times) * len(offsets) / max(1, len(sampled))
            continue
        total += repeat * step_s(pattern, each, mesh, members, shape)
    return total


def fastest(op: str, candidates: Sequence[str], mesh: sim.Mesh, members: Sequence[int], shape: tuple[int, ...],
            size_bytes: int) -> str:
    """The candidate with the smallest `estimate_s` (the earlier one on a tie), cached per call shape."""
    network = mesh.network
    key = (op, tuple(candidates), tuple(members), shape, size_bytes, id(network))
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is network:
        return hit[1]
    times = [estimate_s(op, a, mesh, members, shape, size_bytes) for a in candidates]
    pick = candidates[int(np.argmin(times))]
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[key] = (network, pick)
    return pick


def closed_form(op: str, algorithm: str, p: int, size_bytes: float, alpha_s: float, beta_s: float) -> float:
    """The alpha-beta time of `algorithm` for `op` over p members (one port per device, MPICH's model).

    `size_bytes` is n in the forms: the whole gathered array (all_gather), the operand (all-reduce,
    reduce-scatter, all_to_all). AllGather ring (p-1)a + ((p-1)/p)nb, recursive doubling lg(p)a +
    ((p-1)/p)nb; ReduceScatter ring and recursive halving the same with p-1 or lg(p) steps; AllReduce ring
    2(p-1)a + 2((p-1)/p)nb, recursive doubling lg(p)(a + nb), Rabenseifner 2lg(p)a + 2((p-1)/p)nb;
    AllToAll pairwise (p-1)a + ((p-1)/p)nb, Bruck lg(p)a + (n/2)lg(p)b (p a power of two).
    """
    n, lg, share = size_bytes, _lg(p), (p - 1) / p
    family = _FAMILY.get(op, "direct")
    forms = {
        ("gather", "ring"): (p - 1) * alpha_s + share * n * beta_s,
        ("gather", "recursive_doubling"): lg * alpha_s + share * n * beta_s,
        ("scatter", "ring"): (p - 1) * alpha_s + share * n * beta_s,
        ("scatter", "recursive_halving"): lg * alpha_s + share * n * beta_s,
        ("reduce", "ring"): 2 * (p - 1) * alpha_s + 2 * share * n * beta_s,
        ("reduce", "recursive_doubling"): lg * (alpha_s + n * beta_s),
        ("reduce", "rabenseifner"): 2 * lg * alpha_s + 2 * share * n * beta_s,
        ("exchange", "pairwise"): (p - 1) * alpha_s + share * n * beta_s,
        ("exchange", "bruck"): lg * alpha_s + n / 2 * lg * beta_s,
    }
    if (family, algorithm) not in forms:
        raise sim.InvalidArgumentError(f"closed_form: op={op!r} with algorithm={algorithm!r} has no closed form; "
                                       f"those with one: {sorted(forms)}")
    return forms[family, algorithm]
