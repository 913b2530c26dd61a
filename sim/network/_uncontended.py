"""The times of messages whose flows have their links to themselves, worked out ahead: the flow model of
`sim.network._flows.LinkState` and the clock's sums in closed form, for the loops that time many messages at
once (`sim.engine._schedule`, `collectives._tree_chain`).

Invariant: every time here is made by the float operations, in the order, that `LinkState` and the SimPy
clock make it event by event, so a closed form agrees with the run it stands for to the last bit:

- a flow rated at `now` with `left` bytes to go ends at `now + left / rate` (`end_s`; `LinkState` rates a flow
  at its post, all its bytes left, and again whenever its rate changes, the bytes sent at the old rate taken
  off first: `left_bytes`). Alone on its route a flow gets its narrowest link's capacity (progressive filling
  of one flow: `routes_alone`); c flows alone on one link get capacity / c each (`one_link_s`);
- the network's step for the instant t, scheduled by its step at s, runs when the clock reads `s + (t - s)`
  (an event set `t - s` ahead: `clock_s`, which rounding may move off t), and reports there every flow
  ended by t; a message arrives at its flow's end plus its route's latency, an empty one at its post plus
  the latency (`alone_s`);
- a receiver that reaches its receive at `ready` and takes a message reported at `report` and arriving at
  `arrival` is woken when the clock reads `clock_s(then, arrival)`, `then` the later of `ready` and
  `report` (or at `then` when the message is already there: `woken_s`).

Worked example: 8 bytes and an empty message posted together at 0 on a link of 4 bytes/s and latency 1 s:
the 8 bytes end at 2 s (reported then) and arrive at 3 s, the empty message arrives at 1 s.

>>> one_link_s(0.0, [8.0, 0.0], 1.0, 4.0)
[(2.0, 3.0), (0.0, 1.0)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from sim.network import _topology
from sim.network._fair import TOLERANCE

if TYPE_CHECKING:
    from sim.network._flows import LinkState

__all__ = ["Routes", "alone_s", "clock_s", "end_s", "left_bytes", "one_link_s", "routes_alone", "woken_s"]

Times = TypeVar("Times", float, np.ndarray)  # one time, or many elementwise


def left_bytes(left: Times, rate: Times, t0_s: Times, now_s: float) -> Times:
    """The bytes a flow has still to send at `now_s`, having had `left` at `t0_s` and sent at `rate` since
    (never below 0)."""
    rest = left - rate * (now_s - t0_s)
    return np.maximum(rest, 0.0) if isinstance(rest, np.ndarray) else max(rest, 0.0)


def end_s(now_s: Times, left: Times, rate: Times) -> Times:
    """When a flow rated at `now_s` with `left` bytes to go at `rate` ends."""
    return now_s + left / rate


def clock_s(from_s: Times, at_s: Times) -> Times:
    """The instant the clock reads for an event set `at_s - from_s` ahead of `from_s`."""
    return from_s + (at_s - from_s)


def woken_s(ready_s: Times, report_s: Times, arrival_s: Times) -> Times:
    """When a receiver that reaches its receive at `ready_s` is woken for a message the network reports at
    `report_s`, arriving at `arrival_s`: `arrival - then` after `then`, the later of the two, or at `then`
    when the message is there by then."""
    then = _pick(report_s >= ready_s, report_s, ready_s)
    return _pick(arrival_s > then, clock_s(then, arrival_s), then)


def _pick(condition, yes: Times, no: Times) -> Times:
    """`yes` where `condition` holds, else `no` (elementwise for arrays)."""
    if isinstance(condition, np.ndarray):
        return np.where(condition, yes, no)
    return yes if condition else no


def alone_s(post_s: np.ndarray, wire: np.ndarray, rate: np.ndarray,
            latency_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(end, report, arrival) of messages of `wire` bytes posted at `post_s`, each flow alone at `rate` on a
    route of `latency_s`: the end NaN and the report at the post for an empty message. The report is the
    clock's reading of the network step scheduled at the post; where the step that reports a flow is
    scheduled at another instant, the caller checks that its clock reads the same."""
    empty = wire == 0
    ends = end_s(post_s, wire, rate)
    report = np.where(empty, post_s, clock_s(post_s, ends))
    return np.where(empty, np.nan, ends), report, report + latency_s


def one_link_s(post_s: float, wires: list[float], latency_s: float, bandwidth: float) -> list[tuple[float, float]]:
    """(report, arrival) of messages of `wires` bytes posted together at `post_s` on one link of `bandwidth`
    and `latency_s` that nothing else uses: the empty ones reported at once; the others share the link max-min
    fairly, rerated at each network step (bytes left, then the end), the next step at the earliest end."""
    reports: list[tuple[float, float]] = [(post_s, post_s + latency_s)] * len(wires)
    flows = [[i, w, post_s, 0.0, math.inf] for i, w in enumerate(wires) if w > 0]  # index, left, t0, rate, end
    now = clock = post_s  # the network's step time, and the clock's reading at that step
    while flows:
        rate = bandwidth / len(flows)
        for flow in flows:
            if flow[3] != rate:
                flow[1] = left_bytes(flow[1], flow[3], flow[2], now)
                flow[2], flow[3], flow[4] = now, rate, end_s(now, flow[1], rate)
        now = min(flow[4] for flow in flows)
        clock = clock_s(clock, now)
        for flow in flows:
            if flow[4] <= now:
                reports[flow[0]] = (clock, flow[4] + latency_s)
        flows = [flow for flow in flows if flow[4] > now]
    return reports


@dataclass(frozen=True)
class Routes:
    """Routes and what a flow alone on each gets: route p's `latency[p]` and `rate[p]` (its narrowest link's
    capacity), its links `link[route_of == p]`."""

    latency: np.ndarray
    rate: np.ndarray
    route_of: np.ndarray
    link: np.ndarray


def routes_alone(links: LinkState, src: np.ndarray, dst: np.ndarray) -> Routes | None:
    """Route p, from topology device `src[p]` to `dst[p]` (never the same), on the network of `links`; None
    where a flow with its links to itself could yet get another rate than its narrowest capacity: where two
    distinct capacities lie within twice progressive filling's tolerance, so that the links of two flows
    in flight at once could fill at one level."""
    network, devices = links.network, links.devices
    flow_of, start, stop, hops = _topology.segments(network, src, dst, devices)
    latency = _topology.route_latency(network, src, dst, hops)
    lengths = stop - start
    link = np.repeat(start, lengths) + (np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths,
                                                                                   lengths))
    capacity = (links._capacity[link] if links._dense
                else _topology.capacities(network, link, devices)).astype(np.float64)
    distinct = np.unique(capacity)
    if len(distinct) > 1 and np.any(distinct[1:] <= distinct[:-1] * (1 + 2 * TOLERANCE)):
        return None
    rate = np.full(len(src), np.inf)
    route_of = np.repeat(flow_of, lengths)
    np.minimum.at(rate, route_of, capacity)
    return Routes(latency, rate, route_of, link)
