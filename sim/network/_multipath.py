"""Multipath routing on a ring or torus: the minimal paths a transfer is split over, and each one's share.

A message from a to b crosses, in each dimension it moves along, the shorter way round (a line has one way).
On a multipath network (`Network(multipath=True)`) it is split in equal shares over every minimal path that
differs in

- the order of the dimensions it moves along (XY and YX on a 2-D torus, the 3! orders on a 3-D one; orders
  that differ only in dimensions it does not move along are the same path, counted once), and
- the direction round each ring where the destination is exactly half way round (both ways are minimal),

so a transfer that moves along m dimensions, t of them half way round a ring, goes over m! 2^t paths, each
carrying 1/(m! 2^t) of its bytes, as TPU ICI spreads a transfer over the torus's minimal paths.

Paths are described as a dimension order and, for the tied dimensions, a direction (True: the positive way,
towards increasing coordinates); `sim.network._topology` turns them into links.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np


def moves(shape: tuple[int, ...], wraparound: tuple[bool, ...], at: int, to: int, k: int) -> tuple[int, bool]:
    """How many hops dimension `k` takes from coordinate `at` to `to`, and whether it is a half-way tie."""
    size = shape[k]
    forward = (to - at) % size
    if wraparound[k] and size > 2:  # a ring of two is one link each way: a line
        return min(forward, size - forward), 2 * forward == size
    return abs(to - at), False


def choices(shape: tuple[int, ...], wraparound: tuple[bool, ...], src: int, dst: int
            ) -> list[tuple[tuple[int, ...], dict[int, bool]]]:
    """Every minimal path from topology device `src` to `dst` as (dimension order, {tied dimension: positive
    way}); each carries an equal share."""
    here, there = np.unravel_index(src, shape), np.unravel_index(dst, shape)
    steps = [moves(shape, wraparound, int(here[k]), int(there[k]), k) for k in range(len(shape))]
    movers = [k for k, (hops, _) in enumerate(steps) if hops]
    tied = [k for k, (_, tie) in enumerate(steps) if tie]
    return [(order, dict(zip(tied, ways))) for order in itertools.permutations(movers)
            for ways in itertools.product((True, False), repeat=len(tied))]


def groups(shape: tuple[int, ...], wraparound: tuple[bool, ...], src: np.ndarray, dst: np.ndarray
           ) -> Iterator[tuple[np.ndarray, tuple[int, ...], np.ndarray, float]]:
    """The paths of messages `src[i] -> dst[i]`, vectorised: for each set of messages that move along the same
    dimensions with the same ties, and each of their paths, (their indices, the dimension order, a (messages,
    dimensions) array of the positive way at ties, the share each path carries)."""
    rank = len(shape)
    code = np.zeros(len(src), np.int64)
    for k, size in enumerate(shape):
        stride = math.prod(shape[k + 1:])
        at, to = (src // stride) % size, (dst // stride) % size
        forward = (to - at) % size
        tie = (2 * forward == size) & bool(wraparound[k] and size > 2)
        code |= (forward != 0).astype(np.int64) << k
        code |= tie.astype(np.int64) << (rank + k)
    for value in np.unique(code).tolist():
        members = np.flatnonzero(code == value)
        movers = [k for k in range(rank) if value >> k & 1]
        tied = [k for k in range(rank) if value >> (rank + k) & 1]
        orders = list(itertools.permutations(movers))
        ways = list(itertools.product((True, False), repeat=len(tied)))
        share = 1.0 / (len(orders) * len(ways))
        for order in orders:
            for way in ways:
                up = np.zeros((len(members), rank), bool)
                up[:, tied] = way
                yield members, order, up, share
