"""A `Steps` loop run in closed form: its records, bytes and members' ends made at once when it starts.

When the last member of a loop marked `timed` joins and the loop has the clock and the network to itself
until its members are done (nothing else scheduled before its horizon, no
flow in flight, nothing posted but its own first step), `sim.engine._schedule.plan` works out every time the
event path would give. Then, at once:

- the first step's messages (already recorded by the members' joins) are taken back from the network and
  get their arrival times; the later steps' messages are recorded, step by step in the order the members'
  posts would have run, with their post and arrival times;
- what each receiver takes is written, a step at a time for all members at once, in step order (each
  message carries what its sender held when it posted it, written by an earlier step's moves);
- each member's end (the event its program waits on) is scheduled at its exact time, in the order the
  event path would schedule them, and the member's port gets its accounts as it would.

Nothing is left for the network or the clock to do for the loop but those ends, so everything that happens
after them (the members' programs going on) sees what it would have seen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim._simpy import NORMAL, fire_at, quiet
from sim.engine import _schedule

if TYPE_CHECKING:
    from sim.engine._group import Steps

__all__ = ["run"]

_LATE = NORMAL + 1  # the network's steps (`sim.network._flows`)
runs = {"closed": 0, "events": 0}  # how many loops ran each way (read by tests)


def run(loop: Steps) -> bool:
    """Run `loop` in closed form if it may (see the module docstring); whether it did."""
    plan = _planned(loop)
    if plan is None:
        runs["events"] += 1
        loop.wakes.events = None  # the loop goes on event by event: its wakes need not be kept
        return False
    runs["closed"] += 1
    loop.transport.links.withdraw()
    loop.wakes.cancel()
    _record(loop, plan, plan.sizes)
    n, ways = len(loop.members), loop.ways
    receivers = np.tile(np.arange(n), ways)
    for s in range(loop.count):  # a step's messages read what earlier steps wrote, and write apart
        loop._move(receivers, np.repeat(np.arange(s * ways, (s + 1) * ways), n))
    loop.moved[:] = True
    loop.in_flight[:] = 0
    loop.last[:] = plan.last_s
    loop.waiting[:] = -1
    loop.posted[:] = loop.count
    loop.ends[:] = plan.done_s
    for r in plan.wake_order.tolist():
        _chain(loop, r, plan.wakes_s[:int(plan.depth[r]) + 1, r].tolist())
    return True


def _chain(loop: Steps, r: int, times: list[float]) -> None:
    """Member r's end at `times[0]`, scheduled by a wake at `times[1]`, itself scheduled by one at
    `times[2]` and so on: the last is scheduled now, and each schedules the one before when it runs."""
    env = loop.env
    if len(times) == 1:
        fire_at(env, loop.done[r], None, times[0])  # type: ignore[arg-type]
        return
    event = env.event()
    event.callbacks.append(lambda _: _chain(loop, r, times[:-1]))
    fire_at(env, event, None, times[-1])


def _planned(loop: Steps) -> _schedule.Plan | None:
    """The loop's plan, where nothing it has done yet or anything else scheduled keeps it from running so."""
    transport, env = loop.transport, loop.env
    if transport._ready or transport._drained or loop.stepped or any(done.triggered for done in loop.done):
        return None
    held = transport.links.held(lambda sink: getattr(sink, "steps_of", None) is loop)
    ours = {id(event) for event in loop.wakes.events or ()} | ({id(loop.flush)} if loop.flush is not None else set())
    if held is None or not quiet(env, env.now, _LATE, ours):  # others at work this instant: no plan to make
        return None
    n, total = len(loop.members), loop.count * loop.ways
    senders = np.tile(np.arange(n), total)
    steps = np.repeat(np.arange(loop.count), loop.ways * n)
    ways = np.tile(np.repeat(np.arange(loop.ways), n), loop.count)
    sizes = np.asarray(loop.sizes(senders, steps, ways), np.int64)
    plan = _schedule.plan(loop, loop.join_s, np.array(loop.joined), sizes, len(transport.trace))
    if plan is None or not quiet(env, plan.horizon_s, _LATE, ours):
        return None
    tables, slots, finish_s = held
    if tables:  # the first step's flows in flight end when the plan says (no other flow slowed them)
        rows = np.array([table.first for table in tables]) + slots
        flat = np.full(int(loop.first_rows.max()) + 1, -1, np.int64)
        flat[loop.first_rows.reshape(-1)] = np.arange(loop.ways * n)
        if not np.array_equal(plan.finish_s[flat[rows]], finish_s):
            return None
    return plan


def _record(loop: Steps, plan: _schedule.Plan, sizes: np.ndarray) -> None:
    """Arrivals of the first step's records; the later steps' records, in posting order."""
    trace, n, ways = loop.transport.trace, len(loop.members), loop.ways
    first = loop.first_rows.reshape(-1)
    trace.set_arrivals(first, plan.arrival_s[:ways * n])
    if loop.count < 2:
        return
    order = np.concatenate(plan.order)
    senders = np.repeat(order, ways)
    steps = np.repeat(np.arange(1, loop.count), n * ways)
    way = np.tile(np.arange(ways), n * (loop.count - 1))
    at = (steps * ways + way) * n + senders
    receivers = loop.to[steps * ways + way, senders]
    posted = plan.post_s[steps, senders]
    columns = {"src": loop.members[senders], "dst": loop.members[receivers], "size_bytes": sizes[at],
               "send_time_s": posted, "start_time_s": posted, "arrival_time_s": plan.arrival_s[at],
               "collective": [loop.collective] * len(at), "call": np.full(len(at), loop.call, np.int64),
               "kind": ["message"] * len(at)}
    trace.extend_columns(columns, loop.details(loop.positions[senders], steps, way))
    loop.transport._posted += len(at)
