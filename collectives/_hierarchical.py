"""Hierarchical algorithms: the group's nodes work inside themselves over the fast switch, and only one share of
the data per member crosses the slower fabric between nodes (NCCL's and Horovod's two-level all-reduce).

The group is laid out as the grid (N nodes, k members per node) of `collectives._nodes.node_grid`; the caller
sits at (u, j): its node team is row u (the k members of node u, local ranks 0 .. k-1) and its rank team is
column j (the N members of local rank j, one per node, in node order). Inside a node every phase is
'direct' (one step over the switch, each member to each other); across nodes a ring:

- all-reduce (psum, pmax, ...): the flattened operand is cut into k chunks; an intra-node reduce-scatter
  leaves local rank j with its node's sum of chunk j; a ring all-reduce of that chunk among the rank team
  (reduce-scatter then all-gather, 2(N - 1) steps of 1/(kN) of the operand) completes it; an intra-node
  all-gather gives every member every chunk. The slow fabric carries 2 (N - 1)/N of the operand / k per
  member, the fast one 2 (k - 1)/k of it.
- reduce-scatter (psum_scatter): member (v, t)'s chunk goes first to local rank t of the sender's node,
  which folds the node's terms of the N chunks of its rank team, then round the rank team's ring
  (N - 1 steps), which leaves each member its own chunk complete.
- all-gather: first round the rank team's ring (each member gathers the N blocks of its local rank), then
  inside the node, each member sending its N blocks to each other member of its node.

A sum is folded inside the node in local-rank order, then across nodes round the ring: n - 1 additions in
another binary tree than the group-order fold (`SUM_BOUND`).

Without nodes (a network without `node_size`, or a group spread over nodes unevenly) the whole group is one
node (`node_grid` gives (1, p)): the all-reduce is a direct reduce-scatter then a direct all-gather,
the other two their direct intra-node phase. 'auto' considers these records everywhere: within one node the
all-reduce's two direct steps are the fastest of mid-sized operands on a switch or dedicated links.

Closed forms on N nodes of k, intra-node switch (a, W) with one port per device, a NIC per device into the
slower fabric (A, W_net): all-reduce of n bytes
    2 a + 2 (N - 1) A + 2 ((k - 1)/k) n / W + 2 ((N - 1)/N) (n/k) / W_net;
reduce-scatter a + (N - 1) A + ((k - 1)/k) n / W + ((N - 1)/N) (n/k) / W_net; all-gather (n the gathered
array) the same. The records' `closed_form` is the one-node case on dedicated links.

Worked example, psum over 2 nodes of 2 (members 0, 1 | 2, 3), operands x0 .. x3 of 4 elements: member 0
sends x0[2:4] to member 1, member 1 sends x1[0:2] to member 0 (and members 2, 3 likewise); member 0 holds
x0[0:2] + x1[0:2], member 2 holds x2[0:2] + x3[0:2]; members 0 and 2 ring all-reduce that pair (one element
each way, then back), and member 0 sends the complete first half to member 1, which sends it the second.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence

import numpy as np

import sim
from collectives import _direct_steps as direct_steps
from collectives._algorithm import SUM_BOUND, Algorithm, Pattern, Step
from collectives._algorithms import Team
from collectives._arithmetic import combine, identity
from collectives._common import pack_slice, received, unpack_into
from collectives._direct_rows import Pieces
from collectives._joint import Cut
from collectives._nodes import node_grid
from layouts import Layout

__all__ = ["ALL_GATHER", "ALL_REDUCE", "REDUCE_SCATTER", "all_gather", "grid", "node_teams", "rank_pieces",
           "reduce_scatter"]


def grid(port: sim.Port) -> tuple[tuple[int, ...], tuple[int, int]]:
    """The call's group laid out node by node (`node_grid`, worked out once per call): group index
    `order[v * k + t]` is local rank t of node v."""
    return port.once("node grid", lambda: node_grid(port.mesh, port.group.members))


def node_teams(port: sim.Port) -> tuple[Team, Team]:
    """(the caller's node team, its rank team): row and column of the group's grid (`grid`); each team's
    `order` holds the group indices of its positions."""
    where, rows, columns = port.once("node teams", lambda: _lines(port))
    u, j = where[port.group.index]
    return Team(rows[u][0], j, rows[u][1]), Team(columns[j][0], u, columns[j][1])


def _lines(port: sim.Port) -> tuple[dict[int, tuple[int, int]], list[tuple], list[tuple]]:
    """Each group index's (node, local rank), and the grid's rows and columns as (device ids, group
    indices): worked out once per call, so a member's teams cost no walk over the group."""
    members = port.group.members
    order, (nodes, k) = grid(port)
    where = {g: divmod(i, k) for i, g in enumerate(order)}
    rows = [order[u * k:(u + 1) * k] for u in range(nodes)]
    columns = [order[j::k] for j in range(k)]
    return (where, [(tuple(members[g] for g in row), row) for row in rows],
            [(tuple(members[g] for g in column), column) for column in columns])


def reduce_scatter(port: sim.Port, team: Team, pieces: Sequence[Sequence[np.ndarray]], reduction: str,
                   phase: str) -> Generator:
    """Direct reduce-scatter inside `team`: `pieces[t]` are this member's terms (flat, row-major memory views)
    for team position t, one message each; position t folds every member's terms in team order into the
    identity. Returns the caller's folded pieces, each a new buffer of its memory. Runs as tables
    (`collectives._direct_steps`) where the call allows it."""
    if team.size > 1 and direct_steps.by_tables(port, phase, pieces):
        sums = yield from direct_steps.reduce_scatter(port, team, pieces, reduction, phase)
        return [_stored(port, total) for total in sums]
    me = team.index
    for t, dst in enumerate(team.members):
        for v, piece in enumerate(pieces[t] if t != me else ()):
            port.send(dst, piece, tag=(phase, v), header={}, phase=phase, piece=v)
    own, sums = pieces[me], [None] * len(pieces[me])
    for t, src in enumerate(team.members):
        for v, piece in enumerate(own):
            values = piece if t == me else received((yield port.recv(src, tag=(phase, v))))
            sums[v] = combine(reduction, identity(reduction, piece.dtype) if t == 0 else sums[v], values)
    return [_stored(port, total) for total in sums]


def rank_pieces(port: sim.Port, parts: Sequence[np.ndarray], order: Sequence[int], nodes: int, k: int) -> Generator:
    """A reduce-scatter's chunks as flat row-major pieces by local rank: `pieces[t][v]` is chunk
    `order[v * k + t]`, packed where it is not one row-major run. Chunks cut from one flat buffer (`Cut`) are
    such runs already: they are taken as they lie, with no walk over them."""
    if isinstance(parts, Cut):
        index = np.asarray(order, np.int64).reshape(nodes, k).T.reshape(-1)  # q = t * nodes + v
        return Pieces(parts.flat, parts.at[index], parts.sizes[index], nodes)
    flat = []
    for c, part in enumerate(parts):
        values, _ = yield from pack_slice(port, part, Layout.row_major(part.ndim), chunk=c)
        flat.append(values.reshape(-1))
    return [[flat[order[v * k + t]] for v in range(nodes)] for t in range(k)]


def _stored(port: sim.Port, values: np.ndarray) -> np.ndarray:
    """`values` written into a new flat buffer of this member's memory."""
    out = port.memory.view(port.memory.alloc(values.dtype, (values.size,)))
    out[...] = values.reshape(-1)
    return out


def all_gather(port: sim.Port, team: Team, units: Sequence[Sequence[np.ndarray]], phase: str) -> Generator:
    """Direct all-gather inside `team`: `units[t]` are the places (contiguous memory views) of team position
    t's pieces, the caller's own filled; each goes to every other member in one message. Runs as tables
    (`collectives._direct_steps`) where the call allows it."""
    if team.size > 1 and direct_steps.by_tables(port, phase, units):
        yield from direct_steps.all_gather(port, team, units, phase)
        return
    me = team.index
    for t, dst in enumerate(team.members):
        for v, unit in enumerate(units[me] if t != me else ()):
            port.send(dst, unit, tag=(phase, v), header={}, phase=phase, piece=v)
    for t, src in enumerate(team.members):
        for v, unit in enumerate(units[t] if t != me else ()):
            message = yield port.recv(src, tag=(phase, v))
            yield from unpack_into(port, message, unit, piece=v)


# ---------------------------------------------------------------------------------------------- the records


def _grid(shape: tuple[int, ...]) -> tuple[int, int]:
    """(nodes, members per node): the cost model passes the node grid; any other shape is one node."""
    return (shape[0], shape[1]) if len(shape) == 2 else (1, math.prod(shape))


def _intra(k: int, size: float) -> list[Step]:
    return [(Pattern("pairs", 0, 1), size, 1)] if k > 1 else []


def _inter(nodes: int, size: float, count: int) -> list[Step]:
    return [(Pattern("shift", 1, 0), size, count)] if nodes > 1 and count else []


def _all_reduce_steps(shape: tuple[int, ...], b: float) -> list[Step]:
    nodes, k = _grid(shape)
    return _intra(k, b / k) + _inter(nodes, b / (k * nodes), 2 * (nodes - 1)) + _intra(k, b / k)


def _reduce_scatter_steps(shape: tuple[int, ...], b: float) -> list[Step]:
    nodes, k = _grid(shape)
    return _intra(k, b / k) + _inter(nodes, b / (k * nodes), nodes - 1)


def _all_gather_steps(shape: tuple[int, ...], b: float) -> list[Step]:
    nodes, k = _grid(shape)
    return _inter(nodes, b, nodes - 1) + _intra(k, nodes * b)


def _all_reduce_messages(shape: tuple[int, ...]) -> int:
    """2 (k - 1) inside the node (reduce-scatter, all-gather), 2 (N - 1) round the rank team's ring."""
    nodes, k = _grid(shape)
    return 2 * (k - 1) + 2 * (nodes - 1)


def _one_way_messages(shape: tuple[int, ...]) -> int:
    """N to each of the k - 1 node peers (a piece per node), N - 1 round the rank team's ring: p - 1."""
    nodes, k = _grid(shape)
    return nodes * (k - 1) + nodes - 1


ALL_REDUCE = Algorithm(
    "hierarchical", "hierarchical: the operand is cut into k chunks (k members per node); inside each node a direct "
                    "reduce-scatter leaves local rank j its node's sum of chunk j; the members of local rank j, one "
                    "per node, ring all-reduce it over the slower fabric between nodes; a direct all-gather inside "
                    "the node hands every member every chunk. Without nodes: a direct reduce-scatter, then a "
                    "direct all-gather.",
    _all_reduce_steps, _all_reduce_messages, 2, reorders=True, bound=SUM_BOUND,
    closed_form=lambda p, n, a, b: 2 * a + 2 * n / p * b if p > 1 else 0.0, nodes=True)
REDUCE_SCATTER = Algorithm(
    "hierarchical", "hierarchical: inside each node a direct reduce-scatter leaves local rank j its node's sum of "
                    "the chunks of every member of local rank j (one per node); those members fold them round a "
                    "ring over the slower fabric between nodes, each ending with its own chunk. Without nodes: "
                    "'direct' in group order.",
    _reduce_scatter_steps, _one_way_messages, 2, reorders=True, bound=SUM_BOUND,
    closed_form=lambda p, n, a, b: a + n / p * b if p > 1 else 0.0, nodes=True)
ALL_GATHER = Algorithm(
    "hierarchical", "hierarchical: the members of local rank j, one per node, pass their blocks round a ring over "
                    "the slower fabric between nodes; then inside each node every member sends the blocks it "
                    "holds to every other member in one direct step. Without nodes: 'direct'.",
    _all_gather_steps, _one_way_messages, 2, reorders=False,
    closed_form=lambda p, n, a, b: a + n / p * b if p > 1 else 0.0, nodes=True)
