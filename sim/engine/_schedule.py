"""Closed-form times of a `sim.engine.Steps` loop whose links carry one message at a time.

When every member of a `Steps` loop joins at one instant t0 and nothing else runs on the clock or the
network until the loop's members are done, the loop's times follow a recurrence over its steps that numpy
evaluates for all members at once, exactly as the per-event loop would make them:

- member j posts step 0 at t0, and step s + 1 when its last message of step s is taken (its wake);
- a message of S > 0 wire bytes posted at P alone on its route's links (checked: no two messages share a
  link at overlapping times) runs at its route's narrowest capacity c (the max-min fair rate of a flow
  alone): it ends at F = P + S / c, where the network's step at F reports it, and arrives at A = F + its
  route's latency. An empty message is reported at P and arrives at P + latency (`sim.network._uncontended`,
  whose float operations are those of the flow model);
- a receiver takes its messages in order. Message q is reported at R (F, or P when empty); if the receiver
  was already waiting for it (R >= the wake W' of its message q - 1), the network's step at R schedules the
  wake, else the receiver's own wake W' does; either way the wake is at `base + (A - base)` (or `base` when
  A <= base), the clock's own sum, so the floats are those of the event path bit for bit.

Which members post at one instant, and in which order, is the order of their wake events in the clock:
by time, then by the moment each was scheduled (a wake scheduled by a receiver's earlier wake, or by the
network's step, which runs after an instant's other events and reports its ended flows, then the empty
messages, each in posting order). `plan` follows those chains back to a post or a report and sorts on them;
where a tie is left, or an assumption does not hold (a shared link, a network step whose time the clock
could round, members' steps that interleave, messages still unreported when the first member is done), it
returns None and the loop runs event by event.

Worked example: a bidirectional ring of 4 members on a switch (latency 1 us, 10 GB/s), one 4-byte chunk:
step 0 posts 8 messages at 0; member 2's 4-byte message to member 3 ends at 0.4 ns and arrives at 1.0004 us,
the empty ones at 1 us; member 3 posts step 1 at 1.0004 us, the others at 1 us.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.network._uncontended import Routes, alone_s, clock_s, routes_alone, woken_s

if TYPE_CHECKING:
    from sim.engine._group import Steps

__all__ = ["ENABLED", "Plan", "plan"]

ENABLED = True  # whether `Steps` loops try the closed form (tests compare it with the event path)
_BIG = 1 << 40  # a report's class (ended flows, then empty messages) ahead of its row
_CANDIDATES = 64  # network steps a low flow's end could be scheduled from, at most, before giving up


@dataclass(frozen=True)
class Plan:
    """A loop's schedule: `post_s[s, j]` when member j posts step s; `arrival_s[m * n + j]` when member j's
    message m arrives (`finish_s` when its flow ends, NaN for an empty one; `sizes` its bytes); `order[s -
    1]` the members in the order they post step s (s >= 1); `done_s[j]` when
    member j takes its last message; `wakes_s[k, j]` the wake k messages before that one along the chain
    of wakes that scheduled it, `depth[j]` how far back along that chain is the first wake (or the end
    itself, depth 0) scheduled before any member ends, and `wake_order` the order those are scheduled in
    (each, when it runs, schedules the next along its chain, as the event path does); `last_s[j]` the
    latest arrival of member j's messages; `horizon_s` the last instant the loop does anything but wake."""

    post_s: np.ndarray
    arrival_s: np.ndarray
    finish_s: np.ndarray
    sizes: np.ndarray
    order: list[np.ndarray]
    done_s: np.ndarray
    wakes_s: np.ndarray
    depth: np.ndarray
    wake_order: np.ndarray
    last_s: np.ndarray
    horizon_s: float


def plan(loop: Steps, start_s: np.ndarray, joined: np.ndarray, sizes: np.ndarray, next_row: int) -> Plan | None:
    """The closed-form schedule of `loop` (member j joined at `start_s[j]`, in the order `joined`; `sizes[m
    * n + j]` the bytes of member j's message m; the trace's next record is `next_row`), or None where it
    may differ from the event path."""
    network = loop.transport.links.network
    if loop.as_received is not None or network.store_and_forward or network.multipath:
        return None
    routes = _routes(loop, sizes)
    if routes is None:
        return None
    return _recur(loop, start_s, joined, next_row, routes)


@dataclass(frozen=True)
class _Routes:
    """Each message's wire bytes and route (`pair`; `tiled` where every step's routes are the first step's);
    each route's latency, rate alone on it and links (`alone`)."""

    sizes: np.ndarray
    wire: np.ndarray
    tiled: bool
    pair: np.ndarray
    alone: Routes


def _routes(loop: Steps, sizes: np.ndarray) -> _Routes | None:
    """The messages' routes (None where rates could depend on which flows run together, or a message stays
    on its device)."""
    transport, n = loop.transport, len(loop.members)
    links = transport.links
    wire = np.asarray(transport.wire(sizes), np.float64)
    block = loop.ways * n  # a step's messages: where every step goes to the same members, routes of one step
    to = loop.to[:loop.ways] if np.array_equal(loop.to.reshape(loop.count, block), np.broadcast_to(
        loop.to[:loop.ways].reshape(1, block), (loop.count, block))) else loop.to
    senders = np.tile(np.arange(n), len(to))
    src, dst = loop.members[senders], loop.members[to.reshape(-1)]
    if links.placement is not None:
        src, dst = links.placement[src], links.placement[dst]
    if np.any(src == dst):
        return None
    devices = links.devices
    pairs, inverse = np.unique(src * devices + dst, return_inverse=True)
    if len(to) < len(loop.to):
        inverse = np.tile(inverse, loop.count)
    alone = routes_alone(links, pairs // devices, pairs % devices)
    if alone is None:
        return None
    return _Routes(sizes, wire, len(to) < len(loop.to), inverse, alone)


def _recur(loop: Steps, start_s: np.ndarray, joined: np.ndarray, next_row: int, routes: _Routes) -> Plan | None:
    """Evaluate the recurrence step by step (see the module docstring)."""
    n, count, ways = len(loop.members), loop.count, loop.ways
    wire, latency, rate, pair = routes.wire, routes.alone.latency, routes.alone.rate, routes.pair
    empty = wire == 0
    post = np.empty((count, n))
    post[0] = start_s
    report, arrival, finish = np.empty(len(wire)), np.empty(len(wire)), np.full(len(wire), np.nan)
    row = np.empty(len(wire), np.int64)
    row[:ways * n] = loop.first_rows.reshape(-1)
    rank = np.empty(n, np.int64)
    rank[joined] = np.arange(n)
    order, members = [], np.arange(n)
    wake, keys = np.asarray(start_s, np.float64), []
    for s in range(count):
        if s:
            if post[s].min() <= post[s - 1].max():  # steps interleave: so would their records
                return None
            by = np.lexsort(keys[::-1])
            if _tied(keys, by):
                return None
            order.append(by)
            rank = np.empty(n, np.int64)
            rank[by] = members
            for w in range(ways):
                row[(s * ways + w) * n + members] = next_row + rank * ways + w
            next_row += n * ways
        block = slice(s * ways * n, (s + 1) * ways * n)
        posted = np.repeat(post[s][None, :], ways, 0).reshape(-1)
        finish[block], report[block], arrival[block] = alone_s(posted, wire[block], rate[pair[block]],
                                                               latency[pair[block]])
        keys, wake = _receive(loop, s, wake, report, arrival, empty, row, rank)
        if s + 1 < count:
            post[s + 1] = wake
    found = _horizon(loop, routes, post, report, finish, empty, keys)
    if found is None:
        return None
    horizon, depth = found
    wake_order = _first_wakes(keys, depth)
    if wake_order is None:
        return None
    times = np.array([keys[0]] + keys[1::3])  # each member's wakes back along its chain, from its end
    last = np.full(n, -np.inf)
    np.maximum.at(last, np.tile(members, count * ways), arrival)
    return Plan(post, arrival, finish, routes.sizes, order, wake, times, depth, wake_order, last, horizon)


def _receive(loop: Steps, s: int, wake: np.ndarray, report: np.ndarray, arrival: np.ndarray, empty: np.ndarray,
             row: np.ndarray, rank: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Every receiver's wakes for its messages of step s (from its wake before them, `wake`), and the keys
    that order the wakes of its step's last message: its time, then the chain of moments it was
    scheduled at (time, network or not, and the report's class and row or the post's rank)."""
    n, ways = len(loop.members), loop.ways
    receivers = np.arange(n)
    levels, before = [], wake
    for w in range(ways):
        q = s * ways + w
        at = q * n + loop.sender[q, receivers]
        reported = report[at]
        waiting = reported >= before
        now = woken_s(before, reported, arrival[at])
        term = np.where(empty[at], _BIG, 0) + row[at]
        levels.append((waiting, reported, term, before))
        before = now
    keys = [before]
    alive = np.ones(n, bool)
    for w in range(ways - 1, -1, -1):
        waiting, reported, term, before = levels[w]
        time = np.where(waiting, reported, before)
        late = waiting.astype(np.int64)
        tail = np.where(waiting, term, rank if w == 0 else 0)
        keys += [np.where(alive, time, 0.0), np.where(alive, late, 0), np.where(alive, tail, 0)]
        alive &= ~waiting
    return keys, keys[0]


def _first_wakes(keys: list[np.ndarray], depth: np.ndarray) -> np.ndarray | None:
    """The order in which the event path schedules each member's wake `depth[j]` back along the chain from
    its end (its end itself at depth 0); None where two are left tied."""
    n = len(depth)
    padded = keys + [np.zeros(n)] * (3 * int(depth.max(initial=0)) + 3)
    pushed = [np.empty(n) for _ in range(len(keys))]
    for k in np.unique(depth).tolist():
        at = depth == k
        own = [keys[0]] if k == 0 else [padded[3 * k - 2]]  # the wake's own time, then the moments before it
        for key, value in zip(pushed, own + padded[3 * k + 1:]):
            key[at] = value[at]
    order = np.lexsort(pushed[::-1])
    return None if _tied(pushed, order) else order


def _tied(keys: list[np.ndarray], order: np.ndarray) -> bool:
    """Whether two members are left in a tie by `keys` (sorted by `order`)."""
    if len(order) < 2:
        return False
    same = np.ones(len(order) - 1, bool)
    for key in keys:
        ordered = key[order]
        same &= ordered[1:] == ordered[:-1]
    return bool(same.any())


def _horizon(loop: Steps, routes: _Routes, post: np.ndarray, report: np.ndarray, finish: np.ndarray,
             empty: np.ndarray, keys: list[np.ndarray]) -> tuple[float, np.ndarray] | None:
    """The last instant the loop posts, carries or reports a message or schedules a member's last wake
    before the first of those wakes (`keys[0]`); None where one is scheduled later (a wake at that instant
    may schedule it, the network's step may not), where two messages share a link, or where the clock
    could round a network step's time."""
    done = keys[0]
    first = float(done.min())
    scheduled = np.full(len(done), -np.inf)
    settled, late = np.zeros(len(done), bool), np.zeros(len(done), bool)
    depth = np.zeros(len(done), np.int64)
    for level in range(1, len(keys), 3):  # (time, by the network, tie) of each moment back along the chain
        time, network = keys[level], keys[level + 1]
        before = time < first
        scheduled[before & ~settled] = time[before & ~settled]
        late |= ~settled & ~before & (network == 1)
        depth[~settled & ~before] += 1
        settled |= before
    flowing = ~empty
    horizon = max(float(post.max()), float(report.max()), float(scheduled.max()),
                  float(np.nanmax(finish)) if flowing.any() else -np.inf)
    if not (settled.all() and not late.any() and horizon < first):
        return None
    if flowing.any() and not _alone(loop, routes, post, finish, flowing):
        return None
    return horizon, depth


def _alone(loop: Steps, routes: _Routes, post: np.ndarray, finish: np.ndarray, flowing: np.ndarray) -> bool:
    """Whether no two flows share a link at overlapping times, and every network step at a flow's end runs
    exactly then (its delay, scheduled from an earlier network step, adds back to the end bit for bit)."""
    posted = np.repeat(post, loop.ways, 0).reshape(-1)
    return _apart(loop, routes, post, posted, finish, flowing) and _exact(posted, finish, flowing)


def _apart(loop: Steps, routes: _Routes, post: np.ndarray, posted: np.ndarray, finish: np.ndarray,
           flowing: np.ndarray) -> bool:
    """Whether no two flows share a link at overlapping times [post, end)."""
    block = loop.ways * len(loop.members)
    alike = routes.tiled and len(np.unique(routes.pair[:block])) == block
    if alike and len(np.unique(routes.alone.link)) == len(routes.alone.link):
        # no link on two routes, each route once a step: a route's flow ends before its next step's starts
        return not np.any(np.tile(post[1:], (1, loop.ways)) < finish.reshape(loop.count, block)[:-1])
    inverse, pair_of, link = routes.pair, routes.alone.route_of, routes.alone.link
    messages = np.flatnonzero(flowing)
    by_pair = np.argsort(pair_of, kind="stable")
    counts = np.bincount(pair_of, minlength=int(inverse.max()) + 1)
    starts = np.cumsum(counts) - counts
    hops = counts[inverse[messages]]
    on = np.repeat(messages, hops)
    first = np.repeat(starts[inverse[messages]], hops)
    used = link[by_pair][first + np.arange(len(on)) - np.repeat(np.cumsum(hops) - hops, hops)]
    begin, end = posted[on], finish[on]
    by = np.lexsort((begin, used))
    same = used[by][1:] == used[by][:-1]
    return not np.any(same & (begin[by][1:] < end[by][:-1]))


def _exact(posted: np.ndarray, finish: np.ndarray, flowing: np.ndarray) -> bool:
    """Whether each flow's end, scheduled from any network step since its post, lands on the end exactly:
    always where the post is at least half the end (the difference is exact); else checked against every
    instant a network step may run at in between (a post or a flow's end)."""
    messages = np.flatnonzero(flowing)
    low = messages[posted[messages] < finish[messages] / 2]
    if not len(low):
        return True
    reach = float(finish[low].max())
    instants = np.concatenate([posted[posted < reach], finish[messages][finish[messages] < reach]])
    instants = np.unique(instants)
    lo, hi = np.searchsorted(instants, posted[low]), np.searchsorted(instants, finish[low])
    if np.any(hi - lo > _CANDIDATES):
        return False
    ends = finish[low]
    for k in range(int((hi - lo).max(initial=0))):
        inside = lo + k < hi
        froms = instants[np.minimum(lo + k, len(instants) - 1)]
        if np.any(inside & (clock_s(froms, ends) != ends)):
            return False
    return True
