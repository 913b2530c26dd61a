"""NCCL's tree all-reduce, simplified: a chain inside each node, a double binary tree across nodes.

NCCL runs its tree algorithm as a reduce up to a root, then a broadcast down, with the tree only between nodes
and a chain inside each node ("The tree is only between nodes. Within a single node, it is indeed just a
chain": NVIDIA/nccl#919; a node's head receives its chain and its two tree children: nccl#372), over two
complementary binary trees that each carry half of the data, so that a node that is interior in one tree is a
leaf in the other (the double binary tree of NCCL 2.4: J. Jeaugey, "Massively Scale Your Deep Learning
Training with NCCL 2.4", NVIDIA developer blog, 2019; nccl#545). Its latency grows with log2 of the node count,
where a ring's grows linearly.

Here, on the group's grid of N nodes of k members (`collectives._nodes.node_grid`), member (u, j):

- the operand is cut into two halves, one per tree; tree 0 over the nodes is the binary heap (node v's parent
  (v - 1) // 2, root node 0), tree 1 its mirror image (node v in heap position N - 1 - v, root node N - 1);
- reduce: inside each node both halves go down a chain from local rank k - 1 to local rank 0, each member
  adding its own term to what it received; local rank 0 (the node's head) then adds what its children in
  each tree send and passes the half on to its parent in that tree, as soon as its subtree is complete;
- broadcast: each tree's root holds its half of the sum and sends it to its children, which pass it on; once
  a head holds both halves it sends them back up the chain, local rank 0 to k - 1.

Simplifications, each stated: the halves travel whole (NCCL pipelines them in chunks, which this does not
model, so the bandwidth term grows with the chain's length and the trees' height); one head per node
carries both trees (NCCL builds a tree pair per NIC and channel); the reduce ends before the broadcast starts
and a chain forwards both halves together. Closed form on N nodes of k, intra-node (a, b) with one port per
device, between nodes (A, b_net), n bytes:
    2 (k - 1)(a + n b) + sum over the trees' up and down steps of (A + (heaviest port's halves) (n/2) b_net);
2 nodes: 2 (k - 1)(a + n b) + 2 (A + (n/2) b_net). Without nodes the group is one chain of p:
2 (p - 1)(a + n b) on dedicated links (the record's `closed_form`).

Worked example, 2 nodes of 2 (devices 0, 1 | 2, 3), operands x0 .. x3 of 4 elements, halves [:2] and [2:]:
device 1 sends x1[:2] and x1[2:] to device 0, device 3 likewise to device 2; tree 0 (root node 0): device 2
sends x2[:2] + x3[:2] to device 0, which adds it to x0[:2] + x1[:2]; tree 1 (root node 1): device 0 sends
x0[2:] + x1[2:] to device 2. Each root sends its complete half to the other node's head (device 0 -> 2 the
first half, device 2 -> 0 the second), and each head sends both halves to its chain (0 -> 1, 2 -> 3).

>>> double_tree(4)
((None, 0, 0, 1), (2, 3, 3, None))
>>> up_steps(4)
(((2, 0), (3, 1), (0, 2), (1, 3)), ((1, 0), (2, 3)))
>>> down_steps(4)
(((0, 1), (0, 2), (3, 1), (3, 2)), ((1, 3), (2, 0)))
"""

from __future__ import annotations

from collections.abc import Generator
from functools import lru_cache

import numpy as np

import sim
from collectives import _ring_steps as ring_steps
from collectives._algorithm import SUM_BOUND, Algorithm, Pattern, Step
from collectives._arithmetic import combine, started
from collectives._common import received, unpack_into
from collectives._hierarchical import grid, node_teams
from collectives._tree_chain import Chain, chain_fits
from collectives._tree_steps import Do, Programs, Receive, Send

__all__ = ["ALL_REDUCE", "all_reduce", "double_tree", "down_steps", "up_steps"]

Parents = tuple[int | None, ...]


@lru_cache(maxsize=64)
def double_tree(nodes: int) -> tuple[Parents, Parents]:
    """Each node's parent in the two trees (None at a root): the binary heap and its mirror image."""
    heap = tuple(None if v == 0 else (v - 1) // 2 for v in range(nodes))
    mirror = tuple(None if heap[nodes - 1 - v] is None else nodes - 1 - heap[nodes - 1 - v] for v in range(nodes))
    return heap, mirror


@lru_cache(maxsize=4096)
def _children(parents: Parents, v: int) -> tuple[int, ...]:
    return tuple(c for c, p in enumerate(parents) if p == v)


@lru_cache(maxsize=4096)
def _height(parents: Parents, v: int) -> int:
    """Steps before node v's subtree is reduced (0 for a leaf)."""
    return max((1 + _height(parents, c) for c in _children(parents, v)), default=0)


@lru_cache(maxsize=4096)
def _depth(parents: Parents, v: int) -> int:
    return 0 if parents[v] is None else 1 + _depth(parents, parents[v])


@lru_cache(maxsize=64)
def up_steps(nodes: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """The reduce's messages between nodes, (child, parent) in both trees, by the step they go in: a node
    sends as soon as its subtree is reduced, at step height + 1."""
    steps: list[list[tuple[int, int]]] = []
    for parents in double_tree(nodes):
        for v, p in enumerate(parents):
            if p is not None:
                h = _height(parents, v)
                steps += [[] for _ in range(h + 1 - len(steps))]
                steps[h].append((v, p))
    return tuple(tuple(step) for step in steps)


@lru_cache(maxsize=64)
def down_steps(nodes: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """The broadcast's messages between nodes, (parent, child) in both trees, a child at depth d at step d."""
    steps: list[list[tuple[int, int]]] = []
    for parents in double_tree(nodes):
        for v, p in enumerate(parents):
            if p is not None:
                d = _depth(parents, v)
                steps += [[] for _ in range(d - len(steps))]
                steps[d - 1].append((p, v))
    return tuple(tuple(step) for step in steps)


def all_reduce(port: sim.Port, terms: np.ndarray, reduction: str) -> Generator:
    """The tree all-reduce of this member's flat row-major `terms`; returns a new flat buffer with the result.
    Runs as tables for all members (`collectives._tree_steps`) where the call allows it, its times worked out
    ahead where the group is one chain with links of its own (`collectives._tree_chain`)."""
    _, (nodes, _) = grid(port)
    node, across = node_teams(port)
    j, k = node.index, node.size
    memory = port.memory
    out = memory.view(memory.alloc(terms.dtype, terms.shape))
    halves, own = _halves(out), _halves(terms)
    if ring_steps.by_tables(port, "tree", out):
        programs = port.once(("programs", "tree"), lambda: Chain(port) if chain_fits(port, nodes) else Programs(port))
        program = _program(node, across, nodes, _Partial(reduction, own), halves, reduction)
        if isinstance(programs, Chain):
            yield from programs.join(port, program, (own, halves, reduction))
        else:
            yield from programs.join(port, program)
        return out
    partial = [started(reduction, t) for t in own]
    if j < k - 1:
        for t in (0, 1):
            message = yield port.recv(node.members[j + 1], tag=("chain up", t))
            partial[t] = combine(reduction, partial[t], received(message))
    if j > 0:
        for t in (0, 1):
            halves[t][...] = partial[t]
            port.send(node.members[j - 1], halves[t], tag=("chain up", t), header={}, phase="chain reduce", tree=t)
        for t in (0, 1):
            message = yield port.recv(node.members[j - 1], tag=("chain down", t))
            yield from unpack_into(port, message, halves[t], tree=t)
    else:
        yield from _across(port, across, nodes, partial, halves, reduction)
    if j < k - 1:
        for t in (0, 1):
            port.send(node.members[j + 1], halves[t], tag=("chain down", t), header={}, phase="chain broadcast",
                      tree=t)
    return out


def _halves(flat: np.ndarray) -> list[np.ndarray]:
    """`numpy.array_split(flat, 2)` of a 1-D array (the same views, the first half the longer)."""
    cut = (len(flat) + 1) // 2
    return [flat[:cut], flat[cut:]]


class _Partial:
    """A member's running results of its two halves, `own` folded into the identity when first read (the
    same values as folded at once, not worked out where the chain folds every member's at once)."""

    __slots__ = ("own", "reduction", "values")

    def __init__(self, reduction: str, own: list[np.ndarray]) -> None:
        self.reduction, self.own, self.values = reduction, own, [None, None]

    def __getitem__(self, t: int) -> np.ndarray:
        if self.values[t] is None:
            self.values[t] = started(self.reduction, self.own[t])
        return self.values[t]

    def __setitem__(self, t: int, values: np.ndarray) -> None:
        self.values[t] = values


def _program(node, across, nodes: int, partial: list, halves: list, reduction: str) -> list:
    """`all_reduce`'s member-by-member protocol as a `Programs` program (peers by group index): the same
    messages, folds and writes in the same order."""
    j, k = node.index, node.size

    def fold(t: int):
        return lambda payload: partial.__setitem__(t, combine(reduction, partial[t], payload))

    def write(t: int) -> Do:
        return Do(lambda: halves[t].__setitem__(Ellipsis, partial[t]))

    def store(t: int):
        return lambda payload: halves[t].__setitem__(Ellipsis, payload)

    def send(to: int, key: str, phase: str, t: int) -> Send:
        return Send(to, (key, t), lambda: halves[t], {"phase": phase, "tree": t})

    ops: list = []
    if j < k - 1:
        ops += [Receive(node.order[j + 1], ("chain up", t), fold(t)) for t in (0, 1)]
    if j > 0:
        for t in (0, 1):
            ops += [write(t), send(node.order[j - 1], "chain up", "chain reduce", t)]
        ops += [Receive(node.order[j - 1], ("chain down", t), store(t)) for t in (0, 1)]
    else:
        u, trees = across.index, double_tree(nodes)
        for t in sorted((0, 1), key=lambda t: _height(trees[t], u)):
            ops += [Receive(across.order[c], ("tree up", t), fold(t)) for c in _children(trees[t], u)]
            ops.append(write(t))
            if trees[t][u] is not None:
                ops.append(send(across.order[trees[t][u]], "tree up", "tree reduce", t))
        for t in sorted((0, 1), key=lambda t: _depth(trees[t], u)):
            if trees[t][u] is not None:
                ops.append(Receive(across.order[trees[t][u]], ("tree down", t), store(t)))
            ops += [send(across.order[c], "tree down", "tree broadcast", t) for c in _children(trees[t], u)]
    if j < k - 1:
        ops += [send(node.order[j + 1], "chain down", "chain broadcast", t) for t in (0, 1)]
    return ops


def _across(port: sim.Port, team, nodes: int, partial: list, halves: list, reduction: str) -> Generator:
    """A head's part in both trees: its subtree's halves up (the tree where it is lower first), the sums down."""
    u, trees = team.index, double_tree(nodes)
    for t in sorted((0, 1), key=lambda t: _height(trees[t], u)):
        for c in _children(trees[t], u):
            message = yield port.recv(team.members[c], tag=("tree up", t))
            partial[t] = combine(reduction, partial[t], received(message))
        halves[t][...] = partial[t]
        if trees[t][u] is not None:
            port.send(team.members[trees[t][u]], halves[t], tag=("tree up", t), header={}, phase="tree reduce",
                      tree=t)
    for t in sorted((0, 1), key=lambda t: _depth(trees[t], u)):
        if trees[t][u] is not None:
            message = yield port.recv(team.members[trees[t][u]], tag=("tree down", t))
            yield from unpack_into(port, message, halves[t], tree=t)
        for c in _children(trees[t], u):
            port.send(team.members[c], halves[t], tag=("tree down", t), header={}, phase="tree broadcast", tree=t)


# ---------------------------------------------------------------------------------------------- the record


def _steps(shape: tuple[int, ...], b: float) -> list[Step]:
    """Chain up, the trees' up steps, their down steps, chain down; on the grid (nodes, k) (else one node)."""
    nodes, k = (shape[0], shape[1]) if len(shape) == 2 else (1, int(np.prod(shape)))
    chain = [(Pattern("shift", 1, 1), b, k - 1)] if k > 1 else []
    up = [(Pattern("tree up", s, 0), b / 2, 1) for s in range(len(up_steps(nodes)))]
    down = [(Pattern("tree down", s, 0), b / 2, 1) for s in range(len(down_steps(nodes)))]
    return chain + up + down + chain


ALL_REDUCE = Algorithm(
    "tree", "tree (NCCL's, simplified): the operand is cut into two halves, one per tree. Inside each node both "
            "halves are summed down a chain from the last local rank to the first (the node's head); the heads "
            "sum them up two binary trees across nodes (the heap over the nodes and its mirror image, so a node "
            "interior in one is mostly a leaf in the other), each half up its own tree; each root sends its half "
            "of the sum back down its tree, and the heads back along the chain. Latency grows with log2 of the "
            "node count; the halves are not pipelined. Without nodes: one chain over the group.",
    _steps, None, 4, reorders=True, bound=SUM_BOUND,
    closed_form=lambda p, n, a, b: 2 * (p - 1) * (a + n * b), nodes=True)
