"""The one place that reaches into SimPy's private fields, for the engine's speed and its shuffled clock.

Written for SimPy 4 (pyproject pins `simpy>=4.1,<5`); `tests/test_simpy.py` fails if these fields change
shape. Three uses:

- `fire` / `fire_after` trigger an event already handed out, after a delay, the way SimPy's own `Timeout`
  triggers itself (`_ok`, `_value`, then `schedule`), without making one more event per message;
- `fire_at` triggers an event at an exact time, and `quiet` reads what the clock's heap holds, for a loop
  that works out its own times (`sim.engine._closed`);
- `push` puts an event in the clock's heap with a chosen tie-breaker before SimPy's monotonic event id
  (`_queue`, `_now`, `_eid`), for a perturbed run that orders simultaneous events at random;
- `release` empties a finished run's clock and drops the event classes SimPy binds to it (a reference cycle),
  so the clock is freed by reference counting.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappush
from typing import Any

import simpy
from simpy.core import NORMAL, URGENT

__all__ = ["NORMAL", "URGENT", "fire", "fire_after", "fire_at", "idle_since", "push", "quiet", "release", "ticket"]

_BOUND = ("process", "timeout", "event", "all_of", "any_of")  # what `simpy.Environment` binds to itself


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


def fire_at(env: simpy.Environment, event: simpy.Event, value: Any, when_s: float, priority: int = NORMAL) -> None:
    """Trigger `event` with `value` at the instant `when_s` itself (not at `now + (when_s - now)`, which
    rounding may move by a unit in the last place): for times worked out ahead as the clock would reach them."""
    event._ok = True
    event._value = value
    heappush(env._queue, (when_s, priority, next(env._eid), event))


def quiet(env: simpy.Environment, until_s: float, priority: int, ignored: set[int]) -> bool:
    """Whether nothing is scheduled at or before `until_s` but events of `priority` and events whose `id` is
    in `ignored`."""
    return all(when > until_s or rank == priority or id(event) in ignored for when, rank, _, event in env._queue)


def push(env: simpy.Environment, event: simpy.Event, priority: int, delay_s: float, tie: float) -> None:
    """Schedule `event` after `delay_s` like `Environment.schedule`, ordered by `tie` before the event id
    among the events of the same time and priority."""
    heappush(env._queue, (env._now + delay_s, priority, (tie, next(env._eid)), event))


def release(env: simpy.Environment) -> None:
    """A finished run's clock let go: whatever it still holds queued (after an error) dropped, and the event
    classes SimPy binds to it (each holding the clock: a cycle) removed; it schedules nothing after this."""
    env._queue.clear()
    for name in _BOUND:
        env.__dict__.pop(name, None)


def ticket(env: simpy.Environment) -> int:
    """The event id the clock gives the next event it schedules (read without taking it): equal before and
    after some code when that code scheduled nothing."""
    return env._eid.__reduce__()[1][0]


def idle_since(env: simpy.Environment, first: int) -> bool:
    """Whether every event the clock holds that was scheduled from event id `first` on (`ticket`) changes
    nothing when it fires: a process that ended, which nothing waits on."""
    return all(isinstance(event, simpy.Process) and not event.callbacks
               for _, _, eid, event in env._queue if not isinstance(eid, int) or eid >= first)


class WakeRuns:
    """Wakes batched by instant: `at(delay, item)` joins `item` to the last wake event scheduled when that is
    at the same instant and nothing was scheduled since (so the clock's order is kept), else schedules a new
    one that calls `step(run)` with its items in the order they joined. `step` calls `started(run)` first.
    With `kept`, the events are kept in `events` (until `cancel`)."""

    def __init__(self, env: simpy.Environment, step: Callable[[list], None], kept: bool = False) -> None:
        self.env, self.step = env, step
        self.open: tuple[float, list, int] | None = None  # the last wake event scheduled: (time, run, ticket)
        self.events: list[simpy.Event] | None = [] if kept else None

    def cancel(self) -> None:
        """Every kept wake not yet run does nothing when its time comes; no more are kept."""
        for event in self.events or ():
            if event.callbacks is not None:
                event.callbacks.clear()
        self.events, self.open = None, None

    def at(self, delay: float, item: Any) -> None:
        env = self.env
        when = env.now + delay
        open_run = self.open
        if open_run is not None and open_run[0] == when and open_run[2] == ticket(env):
            open_run[1].append(item)
            return
        run = [item]
        event = env.event()
        event.callbacks.append(lambda _: self.step(run))
        if self.events is not None:
            self.events.append(event)
        fire_after(env, event, None, delay)
        self.open = (when, run, ticket(env))

    def started(self, run: list) -> None:
        """`run`'s event fired: no later wake joins it."""
        if self.open is not None and self.open[1] is run:
            self.open = None
