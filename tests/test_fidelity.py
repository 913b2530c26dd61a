"""The validation table's checks: every collective x algorithm x topology against its closed form, and the
presets against published measurements (benchmarks/fidelity.py prints the same table)."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks._neighbours import growth_s
from benchmarks.closed_forms import cases
from benchmarks.fidelity import PUBLISHED, TINY_BYTES, measure, measure_published, pick

CASES = cases()
MID_BYTES = 256 << 10
LARGE_BYTES = 8 << 20


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_simulated_time_is_the_alpha_beta_form(case):
    """Tiny operands (latency-bound) and 256 KiB ones both take exactly the alpha-beta time of the
    algorithm's steps on the topology: the latency terms and the busiest link's bytes."""
    for size in (TINY_BYTES, MID_BYTES):
        expected = sum(case.exact(size))
        assert measure(case, size) == pytest.approx(expected, rel=1e-9), size


# one row per topology and family of form: the rest differ from these only in their (exact) alpha-beta terms
LARGE = [c for c in CASES if (c.collective, c.algorithm) in (("all_gather", "ring"), ("all_to_all", "direct"))
         or c.topology.startswith("torus") or (c.algorithm == "bidirectional_ring" and c.topology == "ring")]


@pytest.mark.parametrize("case", LARGE, ids=[case.name for case in LARGE])
def test_large_messages_come_within_two_percent_of_the_textbook_form(case):
    """With 8 MiB per device the published bandwidth-only form (nccl-tests, Thakur et al., the ICI forms)
    is within 2% of the simulated time."""
    simulated, form = measure(case, LARGE_BYTES), case.textbook(LARGE_BYTES)
    assert abs(simulated / form - 1) <= 0.02


def test_the_closed_forms_can_fail():
    """A closed form that forgets the wraparound's second direction is caught: the comparison is not
    vacuous."""
    torus = next(c for c in CASES if c.collective == "all_to_all" and c.topology == "torus")
    wrong = sum(torus.exact(MID_BYTES)) + torus.exact(MID_BYTES)[1]  # twice the bandwidth term
    assert measure(torus, MID_BYTES) != pytest.approx(wrong, rel=0.02)


@pytest.mark.parametrize("case", PUBLISHED, ids=[f"{c.preset}-{c.collective}-{c.axis_name}-{c.calibration}"
                                                  for c in PUBLISHED])
def test_presets_against_published_measurements(case):
    """Each preset, in the calibration its row names, comes within 10% of its published figure, or the table
    says why it misses and the miss is pinned (so a change of the model is noticed)."""
    error = measure_published(case) / case.published_s - 1
    if case.why:
        assert error == pytest.approx(case.pinned, abs=0.01)
    else:
        assert abs(error) <= 0.10


def test_ragged_exchange_stays_flat_where_empty_slices_are_skipped():
    """The neighbour exchange of openxla/xla#46982 grows by about 625 us from 16 to 64 A100s when every empty
    peer slice is issued (jax 0.10.0), and by less than 10% of that when empty slices are skipped (later XLA);
    with the links alone (ideal) it does not grow at all."""
    row = next(c for c in PUBLISHED if c.collective == "ragged_all_to_all")
    assert growth_s("measured", "pay") == pytest.approx(row.published_s, rel=0.10)
    assert abs(growth_s("measured", "skip")) <= 0.10 * row.published_s
    assert growth_s("ideal") == pytest.approx(0.0, abs=1e-9)


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
