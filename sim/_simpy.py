"""The one place that reaches into SimPy's private fields, for the engine's speed and its shuffled clock.

Written for SimPy 4 (pyproject pins `simpy>=4.1,<5`); `tests/test_simpy.py` fails if these fields change
shape. Two uses:

- `fire` / `fire_after` trigger an event already handed out, after a delay, the way SimPy's own `Timeout`
  triggers itself (`_ok`, `_value`, then `schedule`), without making one more event per message;
- `push` puts an event in the clock's heap with a chosen tie-breaker before SimPy's monotonic event id
  (`_queue`, `_now`, `_eid`), for a perturbed run that orders simultaneous events at random.
"""

from __future__ import annotations

from heapq import heappush
from typing import Any

import simpy
from simpy.core import NORMAL

__all__ = ["NORMAL", "fire", "fire_after", "push", "ticket"]


def fire(env: simpy.Environment, event: simpy.Event, value: Any, delay_s: float, priority: int = NORMAL) -> None:
    """Trigger `event` with `value` after `delay_s`, at `priority` among the events of that instant."""
    event._ok = True
    event._value = value
    env.schedule(event, priority, delay_s)


def fire_after(env: simpy.Environment, event: simpy.Event, value: Any, delay_s: float) -> None:
    """Trigger `event` with `value` after `delay_s`, now when `delay_s` is not positive."""
    event._ok = True
    event._value = value
    env.schedule(event, delay=delay_s if delay_s > 0 else 0)


def push(env: simpy.Environment, event: simpy.Event, priority: int, delay_s: float, tie: float) -> None:
    """Schedule `event` after `delay_s` like `Environment.schedule`, ordered by `tie` before the event id
    among the events of the same time and priority."""
    heappush(env._queue, (env._now + delay_s, priority, (tie, next(env._eid)), event))


def ticket(env: simpy.Environment) -> int:
    """The event id the clock gives the next event it schedules (read without taking it): equal before and
    after some code when that code scheduled nothing."""
    return env._eid.__reduce__()[1][0]
