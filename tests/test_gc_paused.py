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
