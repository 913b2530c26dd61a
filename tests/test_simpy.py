"""SimPy's private fields, as `sim._simpy` (the one module that touches them) expects them: a change of
their shape in a new SimPy release fails here, not as a wrong run."""

from __future__ import annotations

import itertools
from importlib.metadata import version

import simpy

from sim import _simpy


def test_simpy_is_the_major_version_the_helper_was_written_for():
    """The installed SimPy is a 4.x release, the one `sim._simpy` reads (pyproject pins `simpy>=4.1,<5`)."""
    assert version("simpy").split(".")[0] == "4"


def test_events_keep_their_outcome_in_ok_and_value():
    """An event fired by `fire` after a delay runs its callbacks at that time with the value given, as a
    `Timeout` would; `fire_after` treats a negative delay as none."""
    env = simpy.Environment()
    seen = []
    late, early = env.event(), env.event()
    late.callbacks.append(lambda event: seen.append((env.now, event.ok, event.value)))
    early.callbacks.append(lambda event: seen.append((env.now, event.ok, event.value)))
    _simpy.fire(env, late, "late", 2.5)
    _simpy.fire_after(env, early, "early", -1.0)
    env.run()
    assert seen == [(0.0, True, "early"), (2.5, True, "late")]


def test_priority_orders_the_events_of_one_instant():
    """`fire` at a later priority runs after an event of the same instant at SimPy's normal priority."""
    env = simpy.Environment()
    order = []
    for name, priority in (("late", _simpy.NORMAL + 1), ("normal", _simpy.NORMAL)):
        event = env.event()
        event.callbacks.append(lambda _, name=name: order.append(name))
        _simpy.fire(env, event, None, 1.0, priority)
    env.run()
    assert order == ["normal", "late"]


def test_the_clock_is_a_heap_of_time_priority_id_event():
    """The environment's queue holds (time, priority, event id, event) tuples, its ids come from an
    itertools counter, and its time is `_now`: what `push` writes."""
    env = simpy.Environment(initial_time=1.0)
    timeout = env.timeout(2.0)
    assert isinstance(env._queue, list) and isinstance(env._eid, itertools.count) and env._now == 1.0
    (when, priority, eid, event), = env._queue
    assert (when, priority, event) == (3.0, _simpy.NORMAL, timeout) and isinstance(eid, int)


def test_push_orders_simultaneous_events_by_the_tie_given():
    """Events pushed for one instant run in the order of their ties, not the order they were scheduled."""
    env = simpy.Environment()
    order = []
    for name, tie in (("b", 0.7), ("a", 0.2), ("c", 0.9)):
        event = env.event()
        event._ok, event._value = True, None  # triggered, as `Environment.schedule` expects of its events
        event.callbacks.append(lambda _, name=name: order.append(name))
        _simpy.push(env, event, _simpy.NORMAL, 1.0, tie)
    env.run()
    assert order == ["a", "b", "c"] and env.now == 1.0


def test_release_lets_a_finished_clock_go_by_reference_counting():
    """`release` empties the heap (an event still queued after an error) and drops the event classes SimPy binds
    to the clock, the cycle that kept a finished run's clock (and what its queue held) for the collector."""
    import gc
    import weakref

    env = simpy.Environment()
    env.timeout(1.0)
    env.run(until=0.5)  # a timeout still queued, as a run ended by an error leaves it
    held = weakref.ref(env)
    enabled = gc.isenabled()
    gc.disable()
    try:
        _simpy.release(env)
        del env
        assert held() is None
    finally:
        if enabled:
            gc.enable()
