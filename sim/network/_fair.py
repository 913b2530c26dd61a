"""Max-min fair rates of flows over intervals of links (progressive filling, as SimGrid computes them).

Progressive filling runs on all flows in flight at once, in numpy. A route is a few intervals of
consecutive link indices (`sim.network._topology.segments`: on a torus, one run of links per dimension), so each
round counts the unfrozen flows on every link with a difference array and a prefix sum, finds the links of
the smallest fair share (to within a relative 1e-9, so links equal up to rounding fill together), and
freezes every flow with an interval over one of them (a prefix sum over the full links): the same rates
as progressive filling over explicit link lists, in time linear in the number of messages, not of hops. A
link's used capacity is kept as integer counts of frozen flows times the rounds' levels, so the rates do
not depend on the order flows were posted in.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TOLERANCE", "max_min_rates", "on_links"]

TOLERANCE = 1e-9  # links whose fair shares agree to within this (relative) fill together


def max_min_rates(flow_of: np.ndarray, start: np.ndarray, stop: np.ndarray, capacity: np.ndarray,
                  flows: int) -> np.ndarray:
    """Max-min fair rates (progressive filling) of `flows` flows; flow `flow_of[j]` crosses links
    `start[j] .. stop[j] - 1` (0 <= link < len(capacity); every flow crosses at least one link), and link l
    carries `capacity[l]` in all.

    >>> max_min_rates(np.array([0, 1]), np.array([0, 0]), np.array([1, 2]), np.array([2.0, 0.5]), 2).tolist()
    [1.5, 0.5]
    """
    links = len(capacity)
    rate, used = np.zeros(flows), np.zeros(links)
    while len(flow_of):
        count = on_links(start, stop, links)
        busy = np.flatnonzero(count)
        share = (capacity[busy] - used[busy]) / count[busy]
        level = max(float(share.min()), 0.0)
        full = np.zeros(links + 1, np.int64)
        full[1:][busy[share <= level * (1 + TOLERANCE)]] = 1
        np.cumsum(full, out=full)
        frozen = np.zeros(flows, bool)
        frozen[flow_of[full[stop] > full[start]]] = True
        drop = frozen[flow_of]
        used += on_links(start[drop], stop[drop], links) * level
        rate[frozen] = level
        keep = ~drop
        flow_of, start, stop = flow_of[keep], start[keep], stop[keep]
    return rate


def on_links(start: np.ndarray, stop: np.ndarray, links: int, weights: np.ndarray | None = None) -> np.ndarray:
    """How many intervals [start, stop) cover each link (each counted with its weight, if given)."""
    edges = np.bincount(start, weights, links + 1) - np.bincount(stop, weights, links + 1)
    return np.cumsum(edges[:links])
