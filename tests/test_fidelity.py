"""The validation table's checks: every collective x algorithm x topology against its closed form, 'auto' within
1% of the fastest algorithm in every group of rows, and the presets against published measurements
(benchmarks/fidelity.py prints the same table)."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.closed_forms import cases
from benchmarks.fidelity import (
    AUTO_BYTES,
    PUBLISHED,
    TINY_BYTES,
    Pick,
    auto_picks,
    measure,
    measure_published,
    pick,
    run_published,
)

CASES = cases()
MID_BYTES = 256 << 10
LARGE_BYTES = 8 << 20


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_simulated_time_is_the_alpha_beta_form(case):
    """Tiny operands (latency-bound) and 256 KiB ones both take exactly the alpha-beta time of the
    algorithm's steps on the topology: the latency terms and the busiest link's bytes."""
    for size in (TINY_BYTES, MID_BYTES):
        expected = sum(case.exact(case.sized(size)))
        assert measure(case, size) == pytest.approx(expected, rel=1e-9), size


# one row per topology and family of form: the rest differ from these only in their (exact) alpha-beta terms
LARGE = [c for c in CASES if (c.collective, c.algorithm) in (("all_gather", "ring"), ("all_to_all", "direct"))
         or c.topology.startswith("torus") or (c.algorithm == "bidirectional_ring" and c.topology == "ring")]


@pytest.mark.parametrize("case", LARGE, ids=[case.name for case in LARGE])
def test_large_messages_come_within_two_percent_of_the_textbook_form(case):
    """With 8 MiB per device the published bandwidth-only form (nccl-tests, Thakur et al., the ICI forms)
    is within 2% of the simulated time."""
    simulated, form = measure(case, LARGE_BYTES), case.textbook(case.sized(LARGE_BYTES))
    assert abs(simulated / form - 1) <= 0.02


def test_the_closed_forms_can_fail():
    """A closed form that forgets the wraparound's second direction is caught: the comparison is not
    vacuous."""
    torus = next(c for c in CASES if c.collective == "all_to_all" and c.topology == "torus")
    wrong = sum(torus.exact(MID_BYTES)) + torus.exact(MID_BYTES)[1]  # twice the bandwidth term
    assert measure(torus, MID_BYTES) != pytest.approx(wrong, rel=0.02)


@pytest.mark.parametrize("case", PUBLISHED, ids=[case.preset + "-" + case.collective for case in PUBLISHED])
def test_presets_against_published_measurements(case):
    """Each preset comes within 15% of its published measurement, or the table says why it misses and the
    miss is pinned (so a change of the model is noticed)."""
    error = measure_published(case) / case.published_s - 1
    if case.why:
        assert error == pytest.approx(case.pinned, abs=0.01)
    else:
        assert abs(error) <= 0.15


@pytest.mark.parametrize("topology", ["switch", "ring", "torus"])
@pytest.mark.parametrize("size", [TINY_BYTES, MID_BYTES])
def test_auto_picks_the_fastest_simulated_algorithm(topology, size):
    """'auto' on psum picks an algorithm whose simulated time is the least of all psum algorithms on that
    topology (within 1%), for tiny and for large operands; the picks differ between the two sizes."""
    base = next(c for c in CASES if c.collective == "psum" and c.topology == topology)
    rows = [dataclasses.replace(base, algorithm=name) for name in
            ("direct", "ring", "bidirectional_ring", "recursive_doubling", "rabenseifner", "per_axis")]
    best = min(measure(c, size) for c in rows)
    auto = dataclasses.replace(rows[0], algorithm="auto")
    assert measure(auto, size) <= best * 1.01


def test_auto_changes_its_pick_with_the_message_size():
    """On a switch, 'auto' psum takes the one-step 'direct' for 64 bytes and a bandwidth-optimal algorithm for
    256 KiB, and the run records both picks."""
    switch = next(c for c in CASES if c.collective == "psum" and c.topology == "switch")
    picks = {size: pick(dataclasses.replace(switch, algorithm="auto"), size) for size in (TINY_BYTES, MID_BYTES)}
    assert picks[TINY_BYTES] == "direct" and picks[MID_BYTES] in ("ring", "rabenseifner", "bidirectional_ring")


@pytest.mark.parametrize("size", AUTO_BYTES)
def test_auto_picks_within_one_percent_of_the_fastest_in_every_group_of_rows(size):
    """For each collective on each topology and grid of the table, 'auto''s simulated time is within 1% of
    the fastest algorithm simulated there, for tiny and for mid-sized operands."""
    picks = auto_picks(size)
    assert picks and all(p.fastest_s > 0 for p in picks)
    assert [p.group for p in picks if not p.ok] == []


def test_the_auto_check_can_fail():
    """A pick slower than the fastest by more than 1% is flagged: the check is not vacuous."""
    slow = Pick("psum on torus (4x4)", MID_BYTES, "ring", 1.02e-5, "multi_axis", 1e-5)
    assert not slow.ok and Pick("x", 64, "a", 1.0099e-5, "b", 1e-5).ok


def test_a_multi_axis_all_gather_on_tpu_v4p_comes_within_ten_percent():
    """The TPU v4p 4x4x4 AllGather over X and Y (How to Scale Your Model: 46.6 us) comes within 10% with
    'auto' (which picks multi_axis) and with multi_axis named, on the preset's ideal link rates."""
    case = next(c for c in PUBLISHED if c.over == ("x", "y"))
    assert run_published(case).calls[0].algorithm == "multi_axis"
    for algorithm in ("auto", "multi_axis"):
        assert abs(measure_published(case, algorithm) / case.published_s - 1) <= 0.10
