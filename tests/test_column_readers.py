"""The commands' readers of a trace's columns equal their record-by-record definitions.

`Trace.detail_numbers` against `Trace.detail_column`, `step_groups` (what `meshsim explain` groups by step)
against a loop over the records, and `meshsim run`'s landing bounds against a loop over the messages, on
random traces built of single records and batches of every column kind; each comparison is also shown to
fail on a reader that is wrong.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sim
from scenarios.cli import run as run_command
from scenarios.cli.render import _protocols, step_groups
from sim.record._columns import Same

_PHASES = st.sampled_from([None, "reduce-scatter", "all-gather", 0, 1])
_STEPS = st.sampled_from([None, 0, 1, 2])
_TIMES = st.sampled_from([0.0, 1e-6, 2.5e-6])
_ROWS = st.tuples(st.integers(0, 6), st.integers(0, 3)).map(lambda p: (p[0], p[0] + p[1]))


@st.composite
def _single(draw) -> dict:
    """One record's fields for `Trace.append`: a message or a local copy, with any of the detail keys."""
    detail = {}
    for key, values in (("phase", _PHASES), ("step", _STEPS), ("rows", _ROWS), ("slice", st.integers(0, 3))):
        if draw(st.booleans()):
            detail[key] = draw(values)
    return {"src": draw(st.integers(0, 3)), "dst": draw(st.integers(0, 3)), "send": draw(_TIMES),
            "detail": detail, "kind": draw(st.sampled_from(["message", "message", "pack"]))}


@st.composite
def _batch(draw) -> dict:
    """One batch for `Trace.append_batch`: each detail key absent, shared, a list (maybe with None for
    rows), a range or an array."""
    count = draw(st.integers(1, 5))
    details: dict = {}
    for key, values in (("phase", _PHASES), ("step", _STEPS), ("rows", _ROWS)):
        how = draw(st.sampled_from(["absent", "same", "list", "array"]))
        if how == "same":
            details[key] = Same(draw(values))
        elif how == "list":
            details[key] = draw(st.lists(st.one_of(st.none(), values), min_size=count, max_size=count))
        elif how == "array" and key == "rows":
            details[key] = np.array(draw(st.lists(_ROWS, min_size=count, max_size=count)), np.int64)
        elif how == "array":
            details[key] = range(count)
    return {"src": draw(st.integers(0, 3)), "dsts": draw(st.lists(st.integers(0, 3), min_size=count,
                                                                  max_size=count)),
            "send": draw(_TIMES), "details": details}


def _trace(parts: list[dict]) -> sim.Trace:
    """A trace of `parts` in order (single records staged and packed between batches)."""
    trace = sim.Trace()
    for part in parts:
        if "dsts" in part:
            trace.append_batch(part["src"], part["dsts"], 4, part["send"], part["send"], None, "c", 0,
                               part["details"])
        else:
            trace.append(part["src"], part["dst"], 4, part["send"], part["send"], 0.0, "c", 0, part["detail"],
                         part["kind"])
    return trace


_TRACES = st.lists(st.one_of(_single(), _batch()), max_size=12).map(_trace)


def _numbers_by_records(trace: sim.Trace, key: str, width: int) -> tuple[list, list]:
    """`detail_numbers`' two arrays as lists, from `detail_column`."""
    values = trace.detail_column(key)
    zero = [0] * width if width else 0
    return [zero if v is None else (list(v) if width else v) for v in values], [v is not None for v in values]


@given(_TRACES)
def test_detail_numbers_equal_the_detail_column(trace):
    """Every record's rows (two ints) and step (one int), as arrays, are what `detail_column` reads."""
    for key, width in (("rows", 2), ("step", 0)):
        values, present = trace.detail_numbers(key, width)
        assert values.dtype == np.int64 and values.shape == ((len(trace), width) if width else (len(trace),))
        assert (values.tolist(), present.tolist()) == _numbers_by_records(trace, key, width), key


def test_detail_numbers_comparison_can_fail():
    """A reader that loses the rows of one batch is told apart from the records."""
    trace = _trace([{"src": 0, "dsts": [1, 2], "send": 0.0, "details": {"rows": Same((1, 3))}},
                    {"src": 1, "dst": 0, "send": 0.0, "detail": {"rows": (0, 2)}, "kind": "message"}])
    values, present = trace.detail_numbers("rows", 2)
    assert (values.tolist(), present.tolist()) == ([[1, 3], [1, 3], [0, 2]], [True, True, True])
    wrong = values.copy()
    wrong[:2] = 0
    assert (wrong.tolist(), present.tolist()) != _numbers_by_records(trace, "rows", 2)


def _groups_by_records(trace: sim.Trace, indices=None) -> list[tuple[str, list[int]]]:
    """The messages of `indices` grouped by (phase, step), or by send time where both are absent, in order of
    first send: record by record."""
    groups: dict[tuple, list[int]] = {}
    for k in range(len(trace)) if indices is None else indices:
        m = trace[k]
        if m.kind == "message":
            phase, step = m.detail.get("phase"), m.detail.get("step")
            key = (phase, step) if phase is not None or step is not None else (m.send_time_s,)
            groups.setdefault(key, []).append(k)
    return [(_protocols._step_label(key), ks) for key, ks in groups.items()]


def _plain(groups) -> list[tuple[str, list[int]]]:
    return [(label, [int(k) for k in ks]) for label, ks in groups]


@given(_TRACES, st.data())
def test_step_groups_equal_the_records_grouped_one_by_one(trace, data):
    """Labels, members and their order, for the whole trace and for a subset of its records."""
    assert _plain(step_groups(trace)) == _groups_by_records(trace)
    subset = data.draw(st.lists(st.sampled_from(range(len(trace))), unique=True).map(sorted)) if len(trace) else []
    assert _plain(step_groups(trace, subset)) == _groups_by_records(trace, subset)


def test_step_groups_comparison_can_fail(monkeypatch):
    """Steps told apart only by their phase: a grouping that reads the step alone merges them."""
    trace = _trace([{"src": 0, "dsts": [1], "send": 0.0, "details": {"phase": Same("a"), "step": Same(0)}},
                    {"src": 1, "dsts": [0], "send": 0.0, "details": {"phase": Same("b"), "step": Same(0)}}])
    assert _plain(step_groups(trace)) == _groups_by_records(trace) == [("a, step 0", [0]), ("b, step 0", [1])]
    monkeypatch.setattr(_protocols, "_codes", lambda values, chosen: (np.zeros(len(chosen), np.int64),
                                                                       [values[int(chosen[0])]]))
    assert _plain(step_groups(trace)) != _groups_by_records(trace)


class _Result:
    """What `_landing_bounds` reads of a `ScenarioResult`: its trace."""

    def __init__(self, trace: sim.Trace) -> None:
        self.trace = trace


def _bounds_by_records(trace: sim.Trace, devices: set[int]) -> dict[int, set[int]]:
    bounds: dict[int, set[int]] = {d: set() for d in devices}
    for m in trace:
        if m.dst in devices and m.detail.get("rows") is not None:
            bounds[m.dst].update(m.detail["rows"])
    return bounds


@given(_TRACES, st.sets(st.integers(0, 3), min_size=1))
def test_landing_bounds_equal_the_records(trace, devices):
    """`meshsim run`'s row boundaries per shown device: the ends of every `rows` that landed there."""
    assert run_command._landing_bounds(_Result(trace), devices) == _bounds_by_records(trace, devices)


def test_landing_bounds_comparison_can_fail():
    """A boundary left out is told apart."""
    trace = _trace([{"src": 0, "dsts": [1, 2], "send": 0.0, "details": {"rows": [(0, 2), (2, 5)]}}])
    found = run_command._landing_bounds(_Result(trace), {1, 2})
    assert found == _bounds_by_records(trace, {1, 2}) == {1: {0, 2}, 2: {2, 5}}
    found[2].discard(5)
    assert found != _bounds_by_records(trace, {1, 2})


@pytest.mark.parametrize("devices", [3, 40])
def test_step_groups_of_a_run_equal_the_records(devices):
    """A ring psum's steps and a direct all_gather's one send time, as a run records them."""
    import collectives

    mesh = sim.Mesh({"x": devices})

    def body(v):
        return collectives.all_gather(collectives.psum(v, "x", algorithm="ring"), "x", tiled=True)

    run = sim.shard_map(body, mesh=mesh, in_specs=sim.P("x"), out_specs=sim.P("x")).run(
        np.arange(devices * devices, dtype=np.float32))
    assert _plain(step_groups(run.trace)) == _groups_by_records(run.trace)
    assert run_command._landing_bounds(_Result(run.trace), {0, devices - 1}) == \
        _bounds_by_records(run.trace, {0, devices - 1})


@given(_TRACES, _TRACES)
def test_columns_read_again_after_more_records_hold_them(first, more):
    """A column read, then records added, then read again holds every record; each read is an array of
    its own (writing into one changes neither the trace nor the next read)."""
    trace = sim.Trace()
    for source in (first, more):
        for k in range(len(source)):
            m = source[k]
            trace.append(m.src, m.dst, m.size_bytes, m.send_time_s, m.start_time_s, m.arrival_time_s,
                         m.collective, m.call, m.detail, m.kind)
        read = trace.column("dst")
        assert read.tolist() == [trace[k].dst for k in range(len(trace))]
        read += 1
        assert trace.column("dst").tolist() == [trace[k].dst for k in range(len(trace))]


def test_a_run_provenance_equals_one_made_of_tuples():
    """`Provenance.of_arrays` (a run's, tuples made when read) equals, hashes and prints as the provenance
    made of the same tuples, and is frozen; a different one is told apart."""
    import copy
    import dataclasses
    import pickle

    from scenarios import Provenance

    made = Provenance.of_arrays(0, np.array([3, -1, 1]), np.array([7, -1, 2]))
    given_ = Provenance(0, (3, None, 1), (7, None, 2))
    assert made == given_ and hash(made) == hash(given_) and repr(made) == repr(given_)
    assert made.to_dict() == {"axis": 0, "sources": [3, None, 1], "messages": [7, None, 2]}
    assert made != Provenance(0, (3, None, 1), (7, None, 3)) and made != Provenance(1, (3, None, 1), (7, None, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.axis = 1
    assert pickle.loads(pickle.dumps(made)) == given_ and copy.deepcopy(made) == given_


def test_detail_numbers_of_batches_that_each_share_their_rows():
    """Batches that each keep one `rows` for all their messages (a gather's) are read in one pass: the
    same arrays as the records say, and a batch's count repeated, not its neighbour's."""
    trace = _trace([{"src": s, "dsts": list(range(s + 1)), "send": 0.0, "details": {"rows": Same((s, s + 1))}}
                    for s in range(4)])
    values, present = trace.detail_numbers("rows", 2)
    assert (values.tolist(), present.tolist()) == _numbers_by_records(trace, "rows", 2)
    assert values.tolist() == [[0, 1], [1, 2], [1, 2], [2, 3], [2, 3], [2, 3], [3, 4], [3, 4], [3, 4], [3, 4]]
