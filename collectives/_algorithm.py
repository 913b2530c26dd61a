"""`Algorithm`: one message pattern of a collective, the record written beside its protocol.

A collective's `Definition.algorithms` holds its records, in the order 'auto' considers them (the earlier
wins a tie). A record says everything the other layers need about the pattern: which group sizes it runs
on, its steps for the cost model (`collectives._cost` times them on the network's routes), how many
messages a member sends, whether it folds a float sum in another order than the group-order fold (and the
bound it keeps then), what `meshsim explain` says about it, and its alpha-beta closed form where the
literature gives one. The user still names an algorithm by a string (`algorithm='ring'`); the definition
looks it up among its records (`Definition.algorithm(name)`).

A step is `(Pattern, bytes of each message, how many times it repeats)`; a `Pattern` says who sends to whom:
'shift' (to index + k), 'xor' (to index ^ k), 'pairs' (to every other member), 'bishift' (to index + k and
index - k, a message of the step's bytes each way), 'shifts' (p - 1 steps, one per shift k = 1 .. p - 1),
along grid axis `axis` (None: over the whole group); 'multicast' and 'reduce' (every member's n shards into
a switch that adds them, each sum to every member, or shard j's to member j: `collectives._in_network`); and,
for a collective rooted at group index 0 (a broadcast, whose members the caller lists from its source on),
'fan' (index 0 to every other), 'tree' (every index below k to index + k), 'chain' (index r to r + 1). A
pattern's `alongside` lists other (pattern, bytes of each message) whose messages run in the same step, at the
same time (a multi-axis algorithm's lanes on other axes): the step costs the longest route of any of them plus
the most loaded link under all of them together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import sim

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Pattern:
    """Who sends to whom in one step (see the module docstring)."""

    kind: str
    k: int = 0
    axis: int | None = None
    alongside: tuple[tuple[Pattern, float], ...] = ()


Step = tuple[Pattern, float, int]  # (pattern, bytes of each message, how many times the step repeats)
Schedule = Callable[[Shape, float], list[Step]]
ClosedForm = Callable[[int, float, float, float], float]

# The bound every reordering algorithm keeps; `oracles._reordered` checks it.
SUM_BOUND = ("within (n-1) eps sum|x_i| of the exact sum (n-1 additions in another binary tree, each rounding "
             "by at most eps/2 of a partial sum no larger than sum|x_i|); pmax and pmin pick the same value in any "
             "order but the sign of a tied zero")


@dataclass(frozen=True, eq=False)
class Algorithm:
    """One algorithm of a collective. Records compare and hash by identity (tables may be keyed by them).

    Attributes:
        name: what a user passes as `algorithm=` and what `sim.CallRecord.algorithm` records.
        text: the paragraph `meshsim explain` prints, true for the collective this record belongs to.
        schedule: `schedule(shape, size_bytes)`, the steps for the cost model on a group laid out as the
            grid `shape` whose members each hold `size_bytes` (None for 'auto', which runs another's).
        messages: `messages(shape)`, how many messages each member sends to other members (None where the
            call's arguments decide, as ppermute's `perm` or ragged's sizes do).
        messages_per_peer: at most how many messages a member sends per member of its group, for memory
            budgets (a ring all-reduce sends 2(n - 1), 'auto' as many as its costliest choice).
        reorders: whether a float reduction may round differently from the group-order fold.
        bound: the bound a reordered result keeps ('' when `reorders` is False).
        closed_form: `closed_form(p, n, alpha_s, beta_s)`, the alpha-beta time on p members with one
            dedicated link per pair; n is MPICH's: the larger of a member's operand and result (the gathered
            array for a gather). None where no closed form is stated.
        power_of_two: runs only on groups whose size is a power of two.
        grid: works one named mesh axis at a time: 'auto' considers it only over several axes.
        inner: what it runs over a grid of one axis (with one axis name, or with axis_index_groups).
        auto: picks the fastest of the others by the cost model.
        nodes: works node by node (`collectives._nodes`): the cost model times its schedule over the grid
            (nodes, members per node) of the group (one node where the network has none).
        in_network: the switch does the reduction (`collectives._in_network`): runs only where the network's
            switch reduces (`sim.Network.switch_reduces`), and 'auto' considers it only there.
        adds: `adds(shape, size_bytes)`, the bytes of received data a member adds on the grid `shape` (a
            reduction's arithmetic, timed at `sim.Costs.reduce_bytes_per_s`); None where it adds nothing.
    """

    name: str
    text: str
    schedule: Schedule | None
    messages: Callable[[Shape], int] | None
    messages_per_peer: int
    reorders: bool
    bound: str = ""
    closed_form: ClosedForm | None = None
    power_of_two: bool = False
    grid: bool = False
    inner: Algorithm | None = None
    auto: bool = False
    nodes: bool = False
    in_network: bool = False
    adds: Callable[[Shape, float], float] | None = None

    def __repr__(self) -> str:
        return f"Algorithm({self.name!r})"

    def fits(self, group_size: int) -> bool:
        """Whether it runs on a group of `group_size` members (powers of two where it needs them)."""
        return not self.power_of_two or group_size & (group_size - 1) == 0

    def over(self, shape: Shape) -> Algorithm:
        """What runs over the grid `shape`: this record, or `inner` when a grid algorithm has one axis."""
        return self.inner if self.grid and len(shape) < 2 and self.inner is not None else self

    def steps(self, shape: Shape, size_bytes: float) -> list[Step]:
        """The cost model's steps over the grid `shape` (a grid algorithm over one axis: its inner one's)."""
        ran = self.over(shape)
        if ran.schedule is None:
            raise sim.InvalidArgumentError(f"algorithm={self.name!r} has no schedule of its own: the cost model "
                                           f"times the algorithm it picks")
        return ran.schedule(shape, float(size_bytes))


def lg(p: int) -> int:
    """ceil(log2(p)), 0 for p <= 1."""
    return max(0, math.ceil(math.log2(p))) if p > 1 else 0


def pairs(share: Callable[[float, int], float]) -> Schedule:
    """One step, every member to every member, each message `share(size_bytes, p)` bytes ('direct')."""
    return lambda shape, b: [(Pattern("pairs"), share(b, math.prod(shape)), 1)]


def whole(b: float, p: int) -> float:
    """A message carries the whole operand."""
    return b


def part(b: float, p: int) -> float:
    """A message carries one member's share of the operand."""
    return b / p


def halving(p: int, b: float) -> list[Step]:
    """Recursive halving: distances p/2, p/4, ..., 1, each message half the last."""
    return [(Pattern("xor", p >> (k + 1)), b / (2 ** (k + 1)), 1) for k in range(lg(p))]


def doubling(p: int, b: float) -> list[Step]:
    """Recursive doubling of held blocks: distances 1, 2, ..., p/2, each message twice the last."""
    return [(Pattern("xor", 1 << k), b * (1 << k), 1) for k in range(lg(p))]


def bidirectional_steps(p: int, b: float, half_first: bool = False) -> list[Step]:
    """A bidirectional ring's phase on p members (`collectives._bidirectional`), blocks of b bytes: p // 2 steps
    of a block each way, the last (the first with `half_first`, a reduce-scatter) of half a block for even p."""
    full = [(Pattern("bishift", 1), b, p // 2 - 1 + p % 2)] if p // 2 - 1 + p % 2 else []
    half = [(Pattern("bishift", 1), b / 2, 1)] if p % 2 == 0 and p > 1 else []
    return half + full if half_first else full + half


def bidirectional_messages(p: int) -> int:
    """Messages a member sends in one phase of a bidirectional ring of p: one each way per step."""
    return 2 * (p // 2)


def bidirectional_form(p: int, block: float, a: float, b: float) -> float:
    """One phase of a bidirectional ring with dedicated links: (p // 2) a + ((p - 1)/2) block b, each direction
    carrying (p - 1)/2 blocks (the opposite member's half each way for even p); for p = 2 both halves take the
    one link to the other member."""
    return p // 2 * a + ((p - 1) / 2 if p > 2 else p - 1) * block * b


def added(share: Callable[[int], float]) -> Callable[[Shape, float], float]:
    """The bytes a member adds over a group of p, `share(p)` times the operand's: e.g. (p - 1)/p for a
    reduce-scatter, p - 1 for folding every other member's whole operand."""
    return lambda shape, b: share(math.prod(shape)) * b


def scattered(p: int) -> float:
    """(p - 1)/p: the share of the operand a member adds in a reduce-scatter (every other member's chunk)."""
    return (p - 1) / p


def on_group(steps: Callable[[int, float], list[Step]]) -> Schedule:
    """A schedule over the whole group from one of its size p and the operand's bytes."""
    return lambda shape, b: steps(math.prod(shape), b)


def direct_only(text: str, messages: Callable[[Shape], int] | None = None) -> tuple[Algorithm, Algorithm]:
    """'direct' and 'auto' for a collective with one message pattern (or none); `text` says what 'direct' does."""
    direct = Algorithm("direct", text, pairs(whole), messages, 1, reorders=False)
    return direct, auto_of((direct,), "auto: there is one algorithm, so it runs 'direct'.")


def auto_of(candidates: tuple[Algorithm, ...], text: str = "") -> Algorithm:
    """The 'auto' record over `candidates`: it reorders if any of them does, and the memory budget counts 4
    messages per peer (a bidirectional ring's, the most any algorithm sends) when it has a choice."""
    reorders = any(a.reorders for a in candidates)
    per_peer = max(4, *(a.messages_per_peer for a in candidates)) if len(candidates) > 1 else 1
    return Algorithm(
        "auto", text or "auto: the fastest algorithm for the call's bytes, group and network by the cost model "
                        "(collectives._cost); the run records its pick.",
        None, None, per_peer, reorders=reorders, bound=SUM_BOUND if reorders else "", auto=True)
