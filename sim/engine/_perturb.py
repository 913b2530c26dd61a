"""`Perturbation`: one seeded order of a run, for exploring whether a program's result depends on it.

A perturbed run differs from the default one in two ways, both within what the protocols allow (a
protocol matches each message by sender, call and tag, never by when it arrives):

- every message's flight (latency plus transfer, from posting to arrival) is stretched by a random factor
  in [1, 1 + spread), so messages from different senders arrive in other orders; link bookings are not
  changed (the extra time is spent in flight, not on the link), and a device's message to itself, which
  takes no time, stays instantaneous;
- events due at the same simulated time with the same priority are processed in a random order instead of
  the order they were scheduled in (SimPy's tie-breaker), so devices start, meet and resume in other orders.

The default run has no perturbation and takes none of these paths, so its trace is unchanged.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import simpy

from sim._errors import InvalidArgumentError, InvalidTypeError
from sim._simpy import NORMAL, push


@dataclass(frozen=True)
class Perturbation:
    """A seeded perturbation of message timing and event order; the same seed gives the same run.

    Args:
        seed: a non-negative integer.
        spread: how much longer a message may take: its flight is multiplied by a factor drawn from
            [1, 1 + spread). 0 keeps the timing and shuffles only simultaneous events.

    >>> Perturbation(3).seed
    3
    """

    seed: int
    spread: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise InvalidTypeError(f"seed={self.seed!r} must be an integer")
        if self.seed < 0:
            raise InvalidArgumentError(f"seed={self.seed} must be >= 0")
        if not isinstance(self.spread, (int, float)) or not math.isfinite(self.spread) or self.spread < 0:
            raise InvalidArgumentError(f"spread={self.spread!r} must be a finite number >= 0")

    def start(self) -> Order:
        """The random source of one run under this perturbation."""
        return Order(random.Random(self.seed), float(self.spread))


class Order:
    """The random draws of one perturbed run, in the order the run asks for them (deterministic per seed)."""

    __slots__ = ("rng", "spread")

    def __init__(self, rng: random.Random, spread: float) -> None:
        self.rng, self.spread = rng, spread

    def arrival(self, sent_s: float, arrival_s: float) -> float:
        """`arrival_s` of a message posted at `sent_s`, its flight stretched by a random factor."""
        return sent_s + (arrival_s - sent_s) * (1.0 + self.spread * self.rng.random())

    def rank(self) -> float:
        """A random rank that orders messages arriving at the same time."""
        return self.rng.random()

    def environment(self) -> simpy.Environment:
        """A SimPy clock that breaks ties between simultaneous events at random."""
        return _ShuffledEnvironment(self.rng)


class _ShuffledEnvironment(simpy.Environment):
    """SimPy's environment with a random tie-breaker before its monotonic event id."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__(initial_time=0.0)
        self._rng = rng

    def schedule(self, event: simpy.Event, priority: int = NORMAL, delay: float = 0) -> None:
        """Schedule `event` like SimPy does, ordered among events of the same time and priority at random."""
        push(self, event, priority, delay, self._rng.random())
