"""ppermute's messages posted as one batch per call (`sim.engine._pairs`) equal the same messages posted one
by one (`Port.send` / `Port.recv`): result bytes, every trace column, end time and call records. A batch
forced onto calls whose messages are issued one by one is told apart, to show the comparison can fail.
Every member runs its own protocol here (calls run as one, `sim.engine._together`, are
`tests/test_joint_calls.py`'s)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from row_programs import PERMUTE_NETWORKS, drawn_block, ppermute_run, ring_shift_program, run_perturbed_and_sanitized

import collectives._ppermute
import sim
from sim.engine import _pairs
from sim.engine._port import Port


@pytest.fixture(autouse=True)
def _members_run_their_own_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collectives._ppermute, "_together", lambda gathering: None)


def _batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the batches posted (one entry per batch, its messages)."""
    posted: list[int] = []
    post = _pairs.PairTable._post
    monkeypatch.setattr(_pairs.PairTable, "_post", lambda table: (posted.append(len(table.dsts)), post(table)))
    return posted


@st.composite
def _cases(draw):
    n = draw(st.integers(1, 8))
    axes, axis = ({"x": n}, "x") if draw(st.booleans()) or n < 2 else ({"y": 2, "x": n}, "x")
    size = axes[axis]
    perms = []
    for _ in range(draw(st.integers(1, 3))):
        sources = draw(st.lists(st.integers(0, size - 1), unique=True, max_size=size))
        targets = draw(st.permutations(range(size)))[: len(sources)]
        perms.append(list(zip(sources, targets)))
    x = drawn_block(draw, int(np.prod(list(axes.values()))))
    return axes, axis, perms, x, draw(st.sampled_from(PERMUTE_NETWORKS))


@given(case=_cases())
def test_batched_pairs_equal_messages_one_by_one(case):
    """Programs of several ppermutes (partial permutations, empty and self messages, any dtype, links
    shared on a ring or a switch, protocol overheads, store-and-forward rings, calls over a whole mesh or
    over one axis of two, whose groups post in the same instant) give the same bytes, trace, end time and
    call records whether each group's messages go as one batch or one by one."""
    with pytest.MonkeyPatch.context() as patch:
        posted = _batches(patch)
        fast = ppermute_run(*case)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Port, "pairs_apply", lambda port: False)
        slow = ppermute_run(*case)
    assert fast == slow
    axes, _, perms = case[:3]
    groups = axes.get("y", 1)  # one batch per group of each call: the whole mesh, or one per index along y
    assert posted == [len(perm) for perm in perms if perm for _ in range(groups)]


def test_each_group_posts_one_batch(monkeypatch):
    """A call over one axis of a 4 x 2 mesh posts one batch per group, each as the group's members post:
    two batches of four messages for each ring shift."""
    posted = _batches(monkeypatch)
    ring = [(i, (i + 1) % 4) for i in range(4)]
    ppermute_run({"x": 4}, "x", [ring, ring], np.arange(8.0), None)
    assert posted == [4, 4]
    ppermute_run({"x": 4, "y": 2}, "x", [ring], np.arange(8.0), None)
    assert posted == [4, 4, 4, 4]


def test_batched_pairs_comparison_can_fail(monkeypatch):
    """Batches forced onto calls whose messages are issued one after another (`Costs.per_message_s`), which a
    batch posts at once, are told apart from the messages one by one: same bytes, other times."""
    ring = [(i, (i + 1) % 4) for i in range(4)]
    case = ({"x": 4}, "x", [ring, ring], np.arange(4.0), sim.Network(1e-6, 1e9, costs=sim.Costs(per_message_s=1e-6)))
    honest = ppermute_run(*case)
    monkeypatch.setattr(Port, "pairs_apply", lambda port: True)
    forced = ppermute_run(*case)
    assert forced[0] == honest[0]
    assert forced[2]["src"] == honest[2]["src"]
    assert forced[2]["start_time_s"] != honest[2]["start_time_s"]
    assert forced[3] != honest[3]


def test_perturbed_and_sanitized_runs_send_one_by_one(monkeypatch):
    """A perturbed run (its own arrival draws per message) and a sanitized run post no batch."""
    posted = _batches(monkeypatch)
    run_perturbed_and_sanitized(4)
    assert posted == []
    ring_shift_program(4).run(np.arange(4.0))
    assert posted == [4]
