"""`sim.gc_paused`: the collector is off in the block; what a block that ends normally made and kept goes to the
oldest generation with no collection; a block that raises leaves its objects young; nesting restores once."""

from __future__ import annotations

import gc

import pytest

import sim


class _Made:
    """An object the collector tracks."""


def _generation(obj: object) -> int | None:
    return next((g for g in range(3) if any(o is obj for o in gc.get_objects(generation=g))), None)


@pytest.fixture
def collecting():
    enabled = gc.isenabled()
    gc.enable()
    yield
    if not enabled:
        gc.disable()


def test_a_normal_block_sends_what_it_kept_to_the_oldest_generation(collecting):
    with sim.gc_paused():
        assert not gc.isenabled()
        kept = [_Made() for _ in range(1000)]
    assert gc.isenabled()
    assert gc.get_count()[0] < 100  # no young collection is owed for the block's objects
    assert _generation(kept[0]) == 2 and _generation(kept) == 2


def test_a_block_that_raises_leaves_its_objects_young(collecting):
    gc.collect()
    kept: list = []
    with pytest.raises(ValueError), sim.gc_paused():
        kept.extend(_Made() for _ in range(10))
        raise ValueError("no")
    assert gc.isenabled()
    assert _generation(kept[0]) == 0


def test_nested_blocks_restore_once_and_an_off_collector_stays_off(collecting):
    with sim.gc_paused():
        with sim.gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    with sim.gc_paused():
        pass
    assert not gc.isenabled()


def test_cycles_made_in_blocks_are_freed_once_the_blocks_have_promoted_enough(collecting, monkeypatch):
    """A cycle made inside a block survives its end (sent to the oldest generation with the rest), and is freed
    by the full collection a later block's end makes once the blocks have promoted past the floor."""
    import weakref

    from sim import _gc

    monkeypatch.setattr(_gc, "FLOOR", 5_000)
    monkeypatch.setitem(_gc._since, "promoted", 0)
    monkeypatch.setitem(_gc._since, "tracked", 0)
    with sim.gc_paused():
        cycle = _Made()
        cycle.me = cycle
        alive = weakref.ref(cycle)
        del cycle
    assert alive() is not None  # a cycle: no young collection freed it
    for _ in range(10):
        with sim.gc_paused():
            kept = [_Made() for _ in range(1_000)]
        del kept
    assert alive() is None and _gc._since["tracked"] > 0  # a block's end collected fully
