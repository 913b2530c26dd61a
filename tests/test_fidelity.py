"""The validation table's checks: every collective x algorithm x topology against its closed form, 'auto' within
1% of the fastest algorithm in every group of rows, and the presets against published measurements
(benchmarks/fidelity.py prints the same table)."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks._neighbours import growth_s
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
         or c.topology.startswith("torus") or (c.algorithm == "bidirectional_ring" and c.topology == "ring")
         or c.topology == "hierarchical" or c.algorithm == "in_network"]


@pytest.mark.parametrize("case", LARGE, ids=[case.name for case in LARGE])
def test_large_messages_come_within_two_percent_of_the_textbook_form(case):
    """With 8 MiB per device the published bandwidth-only form (nccl-tests, Thakur et al., the ICI forms)
    is within 2% of the simulated time (of an abstract run: its times are those of the run with bytes, as
    `test_abstract_runs_take_the_times_of_the_runs_with_bytes` checks; the values are checked at 64 B and
    256 KiB)."""
    simulated, form = measure(case, LARGE_BYTES, abstract=True), case.textbook(case.sized(LARGE_BYTES))
    assert abs(simulated / form - 1) <= 0.02


@pytest.mark.parametrize("case", LARGE, ids=[case.name for case in LARGE])
def test_abstract_runs_take_the_times_of_the_runs_with_bytes(case):
    """Each large row run on shapes and dtypes alone (`sim.ShapeDtypeStruct`) ends at the very time its run
    with bytes ends and runs the same algorithm, at 64 B and 256 KiB (the runs whose values
    `test_simulated_time_is_the_alpha_beta_form` checks), and so does 'auto' on it: the checks of times alone
    (the large rows, 'auto''s picks, the presets) run abstract."""
    auto = dataclasses.replace(case, algorithm="auto")
    for size in (TINY_BYTES, MID_BYTES):
        assert measure(case, size, abstract=True) == measure(case, size), size
        assert (pick(auto, case.sized(size), abstract=True), measure(auto, size, abstract=True)) == (
            pick(auto, case.sized(size)), measure(auto, size)), size


def test_the_abstract_comparison_can_fail():
    """The abstract run's time is not the same whatever the size: the equality above is not vacuous."""
    case = LARGE[0]
    assert measure(case, MID_BYTES, abstract=True) != measure(case, MID_BYTES // 2)


def test_the_in_network_rows_can_fail():
    """An NVLS form that charged the ring's 2(p-1)/p n/W (no in-switch reduction) is caught at 8 MiB."""
    row = next(c for c in CASES if c.algorithm == "in_network" and c.collective == "psum")
    ring_form = 2 * (row.devices - 1) / row.devices * LARGE_BYTES / 10e9
    assert abs(measure(row, LARGE_BYTES, abstract=True) / ring_form - 1) > 0.02


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


def test_two_h100_nodes_psum_takes_the_hierarchical_algorithm():
    """2 nodes x 8 H100 (h100-ib), psum of 64 MiB over all 16: 'auto' picks the hierarchical algorithm
    (or the tree) and comes within 10% of the hand-worked two-level figure (the row's text)."""
    case = next(c for c in PUBLISHED if c.preset == "h100-ib" and c.collective == "psum")
    run = run_published(case)
    assert run.calls[0].algorithm in ("hierarchical", "tree")
    assert abs(max(call.exit_s for call in run.calls) / case.published_s - 1) <= 0.10


@pytest.mark.parametrize("topology", ["switch", "ring", "torus", "hierarchical", "switch_reduces",
                                      "hierarchical_reduces"])
@pytest.mark.parametrize("size", [TINY_BYTES, MID_BYTES])
def test_auto_picks_the_fastest_simulated_algorithm(topology, size):
    """'auto' on psum picks an algorithm whose simulated time is the least of all psum algorithms on that
    topology (within 1%; those that work node by node where there are nodes, 'in_network' where the switch
    reduces), for tiny and for large operands."""
    base = next(c for c in CASES if c.collective == "psum" and c.topology == topology)
    names = ("direct", "ring", "bidirectional_ring", "recursive_doubling", "rabenseifner", "per_axis")
    rows = [dataclasses.replace(base, algorithm=name) for name in
            names + (("hierarchical", "tree") if topology == "hierarchical" else ())
            + (("in_network",) if topology.endswith("reduces") else ())]
    best = min(measure(c, size, abstract=True) for c in rows)
    auto = dataclasses.replace(rows[0], algorithm="auto")
    assert measure(auto, size, abstract=True) <= best * 1.01


def test_auto_takes_the_hierarchical_algorithms_between_nodes():
    """On 2 nodes of 4, 'auto' takes 'hierarchical' for 256 KiB operands of psum, psum_scatter and all_gather
    (the slower fabric carries one share per device) and 'direct' for 64 bytes (one latency)."""
    for collective in ("psum", "psum_scatter", "all_gather"):
        row = next(c for c in CASES if c.collective == collective and c.topology == "hierarchical")
        auto = dataclasses.replace(row, algorithm="auto")
        assert (pick(auto, TINY_BYTES, abstract=True), pick(auto, MID_BYTES, abstract=True)) == (
            "direct", "hierarchical"), collective


def test_auto_changes_its_pick_with_the_message_size():
    """On a switch, 'auto' psum takes the one-step 'direct' for 64 bytes and a bandwidth-optimal algorithm for
    256 KiB, and the run records both picks."""
    switch = next(c for c in CASES if c.collective == "psum" and c.topology == "switch")
    picks = {size: pick(dataclasses.replace(switch, algorithm="auto"), size, abstract=True)
             for size in (TINY_BYTES, MID_BYTES)}
    assert picks[TINY_BYTES] == "direct" and picks[MID_BYTES] in ("ring", "rabenseifner", "bidirectional_ring",
                                                                  "hierarchical")


@pytest.mark.parametrize("size", AUTO_BYTES)
def test_auto_picks_within_one_percent_of_the_fastest_in_every_group_of_rows(size):
    """For each collective on each topology and grid of the table, 'auto''s simulated time is within 1% of
    the fastest algorithm simulated there, for tiny and for mid-sized operands."""
    picks = auto_picks(size, abstract=True)
    assert picks and all(p.fastest_s > 0 for p in picks)
    assert [p.group for p in picks if not p.ok] == []


def test_the_auto_check_can_fail():
    """A pick slower than the fastest by more than 1% is flagged: the check is not vacuous."""
    slow = Pick("psum on torus (4x4)", MID_BYTES, "ring", 1.02e-5, "multi_axis", 1e-5)
    assert not slow.ok and Pick("x", 64, "a", 1.0099e-5, "b", 1e-5).ok


def test_a_multi_axis_all_gather_on_tpu_v4p_comes_within_ten_percent():
    """The TPU v4p 4x4x4 AllGather over X and Y (How to Scale Your Model: 46.6 us) comes within 10% with
    'auto' (which picks multi_axis) and with multi_axis named, on the preset's ideal link rates."""
    case = next(c for c in PUBLISHED if c.axis_name == ("x", "y"))
    assert run_published(case).calls[0].algorithm == "multi_axis"
    for algorithm in ("auto", "multi_axis"):
        assert abs(measure_published(case, algorithm) / case.published_s - 1) <= 0.10
