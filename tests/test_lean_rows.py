"""Lean messages: however a row exchange's receivers take their columns (a strided view of the senders'
memories, a stack made once, or part by part), the bytes, trace and times are those of the message-by-message
protocol; a trace batch that keeps shared values once reads back as one given every value; flows that each
cross one link are timed as max-min progressive filling over explicit intervals times them. Each comparison
also runs a deliberately wrong variant to show that it can fail."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import simpy
from hypothesis import given
from hypothesis import strategies as st
from row_programs import row_calls, run_bytes

import collectives
import collectives._all_gather
import collectives._all_to_all
import collectives._allreduce
import sim
import sim.engine._rows as rows
import sim.network._flows as flows
import sim.network._inflight as inflight
from sim.record._columns import Same

_SWITCH = {"all_to_all": (collectives._all_to_all, "_rows_in_place"),
           "all_gather": (collectives._all_gather, "_rows_in_place"),
           "psum": (collectives._allreduce, "_in_place")}


@contextlib.contextmanager
def _patched(*patches):
    """Set (object, name, value) attributes for the block, then put the old values back."""
    saved = [(target, name, getattr(target, name)) for target, name, _ in patches]
    try:
        for target, name, value in patches:
            setattr(target, name, value)
        yield
    finally:
        for target, name, value in saved:
            setattr(target, name, value)


# How a receiver takes its column: a view of rows spaced evenly in one buffer, a stack made once, part by part.
_TAKES = {
    "view": (),
    "stack": ((rows, "_spaced", lambda flats: None), (rows, "_STACK_MESSAGES", -1),
              (rows, "_STACK_MESSAGE_BYTES", 1 << 62), (rows, "_STACK_BYTES", 1 << 62)),
    "parts": ((rows, "_spaced", lambda flats: None), (rows, "_STACK_MESSAGES", 1 << 62)),
}


@st.composite
def _cases(draw):
    return (*draw(row_calls()), draw(st.sampled_from(sorted(_TAKES))))


@given(case=_cases())
def test_columns_taken_any_way_equal_message_by_message(case):
    """all_to_all, all_gather and the direct psum give the message-by-message protocol's bytes, trace and
    end time whether receivers read a view of the senders' rows, a stack of them or each part alone."""
    op, n, tiled, x, take = case
    with _patched(*_TAKES[take]):
        fast = run_bytes(op, n, x, tiled)
    module, switch = _SWITCH[op]
    with _patched((module, switch, lambda *a: False)):
        slow = run_bytes(op, n, x, tiled)
    assert fast == slow


def test_each_way_of_taking_is_used():
    """Each way of taking a column really runs (else the equality above is vacuous): a view for inputs
    placed from one global array, a stack past the size bound, parts otherwise."""
    used = []
    real_stack = rows.Table._stack

    def spy(table):
        stacked = real_stack(table)
        used.append("parts" if stacked is None else "view" if not stacked.flags.owndata and
                    stacked.base is not None and not stacked.flags.writeable else "stack")
        return stacked

    x = np.arange(64.0)
    for take in ("view", "stack", "parts"):
        with _patched((rows.Table, "_stack", spy), *_TAKES[take]):
            run_bytes("all_to_all", 8, x, True)
        assert used and set(used) == {take}, (take, set(used))
        used.clear()


def test_column_comparison_can_fail():
    """A stacked column with its senders in the wrong order is told apart from the honest run."""
    x = np.arange(64.0)
    honest = run_bytes("all_to_all", 8, x, True)
    real_stack = rows.Table._stack
    reversed_stack = lambda table: None if real_stack(table) is None else real_stack(table)[::-1]
    with _patched((rows.Table, "_stack", reversed_stack)):
        assert run_bytes("all_to_all", 8, x, True)[0] != honest[0]


# ------------------------------------------------------------------------------------- compact trace batches


@st.composite
def _batches(draw):
    """Batches of messages: (src, dsts, sizes, start, details), each value one per message or one for all."""
    batches = []
    for _ in range(draw(st.integers(1, 4))):
        count = draw(st.integers(1, 6))
        dsts = tuple(draw(st.lists(st.integers(0, 300), min_size=count, max_size=count)))
        sizes = draw(st.one_of(st.integers(0, 1 << 40), st.lists(st.integers(0, 99), min_size=count,
                                                                   max_size=count)))
        start = draw(st.one_of(st.floats(0, 1), st.integers(0, 3)))
        details = {}
        for key in draw(st.lists(st.sampled_from(["slice", "rows", "axis", "step"]), unique=True)):
            details[key] = draw(st.sampled_from(["same", "range", "list"]))
        batches.append((draw(st.integers(0, 300)), dsts, sizes, start, details,
                        draw(st.lists(st.floats(0, 2), min_size=count, max_size=count))))
    return batches


def _recorded(batches, compact: bool) -> tuple:
    trace = sim.Trace()
    for src, dsts, sizes, start, kinds, arrivals in batches:
        count = len(dsts)
        details = {}
        for key, kind in kinds.items():
            values = {"same": [(1, 2)] * count, "range": list(range(count)), "list": [f"v{k}" for k in range(count)]}
            if compact and kind == "same":
                details[key] = Same((1, 2))
            elif compact and kind == "range":
                details[key] = range(count)
            else:
                details[key] = values[kind]
        listed_sizes = sizes if compact or not isinstance(sizes, int) else [sizes] * count
        first = trace.append_batch(src, dsts if compact else list(dsts), listed_sizes, 0.5,
                                   start if compact else [start] * count, None, "op", 3, details)
        trace.append(src, src, 4, 0.5, 0.5, 0.75, "op", 3, {"step": 1}, kind="pack")
        trace.set_arrivals(np.arange(first, first + count), np.array(arrivals))
    columns = trace.columns()
    return (json.dumps(trace.to_json()), [json.dumps(trace[k].to_dict()) for k in range(len(trace))],
            {name: (column.dtype.str, column.tolist()) for name, column in columns.items()},
            {key: trace.detail_column(key) for key in ("slice", "rows", "axis", "step", "none")},
            sorted(trace.detail_keys()), sorted(trace.detail_keys("message")))


@given(batches=_batches())
def test_compact_batches_read_back_as_listed_ones(batches):
    """A batch recorded with shared values (`Same`, a range, one size or start for all, the members as
    given) reads back, record by record and column by column, as the batch listing every value."""
    assert _recorded(batches, compact=True) == _recorded(batches, compact=False)


def test_compact_batch_comparison_can_fail():
    """A batch with one value changed is told apart."""
    batches = [(1, (2, 3), 8, 0.0, {"slice": "range"}, [0.5, 0.5])]
    changed = [(1, (2, 4), 8, 0.0, {"slice": "range"}, [0.5, 0.5])]
    assert _recorded(batches, compact=True) != _recorded(changed, compact=False)


# ----------------------------------------------------------------------------------------- one-link flows


class _Sink:
    def __init__(self) -> None:
        self.arrivals: dict[int, float] = {}

    def arrived(self, slots, arrivals_s) -> None:
        self.arrivals.update(zip(slots.tolist(), arrivals_s.tolist()))


class _General(flows.Flows):
    simple = False


@st.composite
def _posts(draw):
    devices = draw(st.integers(2, 6))
    posts = []
    for _ in range(draw(st.integers(1, 6))):
        count = draw(st.integers(1, 5))
        dsts = draw(st.lists(st.integers(0, devices - 1), min_size=count, max_size=count))
        sizes = draw(st.lists(st.integers(0, 5000), min_size=count, max_size=count))
        posts.append((draw(st.sampled_from([0.0, 0.5, 1.0, 2.5])), draw(st.integers(0, devices - 1)), dsts, sizes))
    return devices, posts


def _timed(devices, posts, general: bool) -> list:
    with _patched((flows, "Flows", _General if general else flows.Flows)):
        env = simpy.Environment()
        links = sim.LinkState(sim.Network.fully_connected(bandwidth_bytes_per_s=1e3).sized(devices), devices, env)
        sinks = [_Sink() for _ in posts]

        def post(at, src, dsts, sizes, sink):
            yield env.timeout(at)
            links.send(src, np.array(dsts), np.array(sizes), sink)

        for (at, src, dsts, sizes), sink in zip(posts, sinks):
            env.process(post(at, src, dsts, sizes, sink))
        env.run()
    return [sorted(sink.arrivals.items()) for sink in sinks]


@given(case=_posts())
def test_one_link_flows_are_timed_as_progressive_filling(case):
    """Flows that each cross one link, kept as one link index each, arrive exactly when max-min progressive
    filling over explicit intervals says (messages posted at several instants, sharing links)."""
    devices, posts = case
    assert _timed(devices, posts, general=False) == _timed(devices, posts, general=True)


def test_one_link_flow_comparison_can_fail():
    """Two messages sharing a link are told apart from one message alone (the comparison sees rates)."""
    shared = _timed(3, [(0.0, 0, [1, 1], [1000, 1000])], general=False)
    alone = _timed(3, [(0.0, 0, [1], [1000])], general=True)
    assert shared[0][0] != alone[0][0]


# ------------------------------------------------------------------------------------- packed single records

_VALUES = st.one_of(
    st.integers(-3, 3), st.integers(-(1 << 70), 1 << 70), st.booleans(), st.none(), st.text(max_size=2),
    st.sampled_from([0.0, -0.0, 1.5, float("inf"), float("nan")]),
    st.tuples(st.integers(0, 9), st.integers(0, 9)), st.tuples(), st.tuples(st.integers(0, 9), st.booleans()),
    st.lists(st.integers(0, 3), max_size=2))


@st.composite
def _records(draw):
    """Records appended one by one: (kind, detail), the details' keys and values drawn to agree or differ."""
    keys = draw(st.lists(st.sampled_from(["slice", "rows", "step", "peer"]), unique=True, max_size=3))
    shared = draw(st.booleans())
    records = []
    for _ in range(draw(st.integers(1, 12))):
        own = keys if shared else draw(st.lists(st.sampled_from(["slice", "rows", "step"]), unique=True, max_size=3))
        records.append((draw(st.sampled_from(["message", "message", "pack"])), {k: draw(_VALUES) for k in own}))
    return records


def _read(trace: sim.Trace) -> tuple:
    return ([repr(trace[k].detail) for k in range(len(trace))], [repr(m.detail) for m in trace],
            {key: repr(trace.detail_column(key)) for key in ("slice", "rows", "step", "peer")},
            sorted(trace.detail_keys()), sorted(trace.detail_keys("pack")), repr(trace.columns()["kind"].tolist()))


@given(records=_records())
def test_packed_records_read_back_as_recorded(records):
    """Records packed into columns (a shared value once, ints, floats and int tuples as arrays) read back
    with the very values and types recorded: bools stay bools, -0.0 and nan stay, huge ints and lists too."""
    trace = sim.Trace()
    for kind, detail in records:
        trace.append(0, 0 if kind == "pack" else 1, 4, 0.0, 0.0, 1.0, "op", 0, dict(detail), kind=kind)
    expected = ([repr(d) for _, d in records], [repr(d) for _, d in records],
                {key: repr([d.get(key) for _, d in records]) for key in ("slice", "rows", "step", "peer")},
                sorted({k for _, d in records for k in d}), sorted({k for kind, d in records if kind == "pack"
                                                                    for k in d}),
                repr([kind for kind, _ in records]))
    assert _read(trace) == expected


def test_packed_record_comparison_can_fail():
    """A packing that turned a bool into an int would be told apart: True and 1 read back differently."""
    one, true = sim.Trace(), sim.Trace()
    one.append(0, 1, 4, 0.0, 0.0, 1.0, "op", 0, {"slice": 1})
    true.append(0, 1, 4, 0.0, 0.0, 1.0, "op", 0, {"slice": True})
    assert _read(one) != _read(true)


def test_rows_posted_as_payload_lists_equal_one_array():
    """Rows posted as lists of payloads (`send_each` / `recv_each`, a message object per message) give the
    bytes, trace and times of rows posted as one array (`send_split` / `send_copies`)."""
    def send_split(port, source, **details):
        parts = np.split(source.reshape(-1), port.group.size)
        _listed(port, parts, details)

    def send_copies(port, source, **details):
        _listed(port, [source.reshape(-1)] * port.group.size, details)

    def recv_into(port, out):
        messages = yield from port.recv_each()
        np.concatenate([m.payload for m in messages], axis=None, out=out.reshape(-1))

    def recv_column(port):
        messages = yield from port.recv_each()
        return np.stack([m.payload for m in messages])

    for op, x in (("all_to_all", np.arange(64.0)), ("all_gather", np.arange(24, dtype=np.int32)),
                  ("psum", np.linspace(0, 1, 40))):
        whole = run_bytes(op, 8, x, True)
        with _patched((sim.Port, "send_split", send_split), (sim.Port, "send_copies", send_copies),
                      (sim.Port, "recv_into", recv_into), (sim.Port, "recv_column", recv_column)):
            assert run_bytes(op, 8, x, True) == whole


def _listed(port, payloads, details):
    g = port.group.size
    listed = {key: list(value) if isinstance(value, range) else [value] * g for key, value in details.items()}
    port.send_each(payloads, [{}] * g, **listed)


# ------------------------------------------------------------------------------------------ posted columns




@st.composite
def _posted(draw):
    devices = draw(st.integers(1, 6))
    rows = []
    for sink in range(draw(st.integers(1, 5))):
        count = draw(st.integers(0, 7))
        dsts = draw(st.lists(st.integers(0, devices - 1), min_size=count, max_size=count))
        sizes = draw(st.one_of(st.sampled_from([0, 8]), st.lists(st.sampled_from([0, 1, 8]), min_size=count,
                                                                  max_size=count)))
        rows.append((draw(st.integers(0, devices - 1)), dsts, sizes, 10 + sink))
    placement = draw(st.one_of(st.none(), st.permutations(list(range(devices))).map(np.array)))
    return rows, placement


def _columns(rows, placement, by_rows: bool) -> list:
    with _patched((inflight, "_ROW_MESSAGES", 0 if by_rows else 1 << 62)):
        kept, now = inflight.posted_columns(rows, placement)
    return [(column.dtype.kind, column.tolist()) for column in (*kept, *now)]


@given(case=_posted())
def test_posted_rows_split_row_by_row_equal_all_at_once(case):
    """Posted rows split into flows and instant arrivals row by row give the columns, values and order of
    the split over all messages at once (self messages, empty ones, placements)."""
    rows, placement = case
    assert _columns(rows, placement, by_rows=True) == _columns(rows, placement, by_rows=False)


def test_posted_columns_comparison_can_fail():
    """A row with one size changed to zero is told apart (its message becomes an instant arrival)."""
    assert _columns([(0, [1, 2], [8, 8], 1)], None, True) != _columns([(0, [1, 2], [8, 0], 1)], None, False)
