"""ragged_all_to_all's exchange by rows (`collectives._ragged_rows`) equals its message-by-message protocol
bit for bit: the same output bytes, trace records (every column), call records and times, on random
slices, dtypes, networks, groups and programs; the group check at once agrees with the per-slice checks. Each
comparison also runs a deliberately wrong variant to show that it can fail."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import collectives
import collectives._ragged as ragged
import collectives._ragged_rows as rows
import sim
from collectives._ragged_strategy import sender_tables
from sim import P

_NETWORKS = {
    "fully_connected": lambda n: sim.Network(),
    "switch": lambda n: sim.Network(topology="switch", latency_s=3e-6, bandwidth_bytes_per_s=1e9),
    "ring": lambda n: sim.Network(topology="ring", bandwidth_bytes_per_s=2e8),
    "wire costs": lambda n: sim.Network(costs=sim.Costs(efficiency=0.5, overhead_bytes=64.0)),
}


@st.composite
def _placed(draw, sizes: list[int], rows_extra: int = 2) -> tuple[list[int], int]:
    """Offsets that lay `sizes` out without overlap, in shuffled order with 0 to 2 rows before each."""
    offsets, cursor = [0] * len(sizes), 0
    for i in draw(st.permutations(range(len(sizes)))):
        offsets[i] = cursor + draw(st.integers(0, rows_extra))
        cursor = offsets[i] + sizes[i]
    return offsets, cursor


@st.composite
def _cases(draw):
    """A valid call: n devices, k slices per device of 0 to 3 rows (some reading the same operand rows)."""
    n = draw(st.integers(1, 6))
    k = n * draw(st.integers(1, 2))
    recv_sizes = [draw(st.lists(st.integers(0, 3), min_size=k, max_size=k)) for _ in range(n)]
    recv_offsets, out_rows = zip(*(draw(_placed(sizes)) for sizes in recv_sizes))
    send_sizes, output_offsets = sender_tables([tuple(range(n))], recv_sizes, list(recv_offsets))
    input_offsets, in_rows = zip(*(draw(_placed(sizes)) for sizes in send_sizes))
    rows_in = max(1, max(in_rows))
    input_offsets = [[draw(st.integers(0, rows_in - s)) if draw(st.booleans()) else o for o, s in zip(offs, sizes)]
                     for offs, sizes in zip(input_offsets, send_sizes)]
    trailing = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    dtype = np.dtype(draw(st.sampled_from(["int8", "int32", "float16", "float32", "float64"])))
    out_rows = max(1, max(out_rows) + draw(st.integers(0, 2)))
    groups = draw(st.integers(1, 2))  # two groups run the same tables side by side over mesh axis "g"
    operand = _random(draw, (groups * n * rows_in, *trailing), dtype)
    output = _random(draw, (groups * n * out_rows, *trailing), dtype)
    index = [np.tile(np.array(table, np.int32).reshape(-1), groups)
             for table in (input_offsets, send_sizes, output_offsets, recv_sizes)]
    network = draw(st.sampled_from(sorted(_NETWORKS)))
    twice = draw(st.booleans())
    return (groups, n), network, twice, (operand, output, *index)


def _random(draw, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    count = int(np.prod(shape)) * dtype.itemsize
    return np.frombuffer(draw(st.binary(min_size=count, max_size=count)), dtype).reshape(shape).copy()


def _program(twice: bool):
    """One call, or two: the second sends the first's result back along the same slices' sizes."""
    def body(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes):
        result = collectives.ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets,
                                               recv_sizes, axis_name="x")
        if not twice:
            return result
        return collectives.ragged_all_to_all(operand, result, input_offsets, send_sizes, output_offsets,
                                             recv_sizes, axis_name="x")
    return body


def _run(n: int | tuple[int, int], network: str, twice: bool, arrays: tuple[np.ndarray, ...], **options) -> tuple:
    """Output bytes, trace JSON, call records and end time of the program on n devices (on each of `groups`
    groups, when `n` is `(groups, n)`).

    Devices that finish a call in the same instant may resume in another order after a row exchange (one
    wake each) than after a message-by-message one (a wake per message), as after all_to_all's rows; so
    call records are compared by device, and the second call's records, which the members post in the
    order they reached it, as a set."""
    groups, n = n if isinstance(n, tuple) else (1, n)
    mesh = sim.Mesh({"g": groups, "x": n}, network=_NETWORKS[network](groups * n))
    spec = P(("g", "x"))
    f = sim.shard_map(_program(twice), mesh=mesh, in_specs=(spec,) * 6, out_specs=spec, check_vma=False,
                      **options)
    run = f.run(*arrays)
    calls = sorted(tuple(getattr(c, f.name) for f in dataclasses.fields(c)) for c in run.simulation.calls)
    records = [json.dumps(record) for record in run.trace.to_json()]
    return run.outputs.tobytes(), sorted(records) if twice else records, calls, run.end_time_s


def _slow(monkeypatch) -> None:
    monkeypatch.setattr(ragged, "by_rows", lambda port: False)


@given(case=_cases())
def test_rows_equal_message_by_message(case):
    """The exchange by rows gives the message-by-message protocol's bytes, trace records (in order, for
    one call), call records and times."""
    n, network, twice, arrays = case
    fast = _run(n, network, twice, arrays)
    with pytest.MonkeyPatch.context() as patch:
        _slow(patch)
        slow = _run(n, network, twice, arrays)
    assert fast == slow


def _moe() -> tuple[np.ndarray, ...]:
    """The library's MoE dispatch (4 devices, uneven slices, one empty) as global arrays."""
    sizes = np.array([[2, 1, 0, 3], [1, 0, 2, 2], [0, 3, 1, 1], [2, 1, 1, 0]])
    input_offsets = np.cumsum(sizes, axis=1) - sizes
    output_offsets = np.cumsum(sizes, axis=0) - sizes
    operand = np.arange(4 * 6 * 3, dtype=np.float32).reshape(24, 3)
    index = [np.ascontiguousarray(a, np.int32).reshape(-1) for a in (input_offsets, sizes, output_offsets, sizes.T)]
    return operand, np.zeros((32, 3), np.float32), *index


@pytest.mark.parametrize("wrong", ["write", "detail", "arrival"])
def test_the_comparison_can_fail(monkeypatch, wrong):
    """A row exchange that writes a slice one row off, records a wrong detail or wakes a receiver before its
    last message is told apart from the message-by-message run."""
    arrays = _moe()
    honest = _run(4, "ring", True, arrays)
    if wrong == "write":
        real = rows.write_rows
        monkeypatch.setattr(rows, "write_rows", lambda view, payloads, at, counts: real(view, payloads, at + 1, counts))
    elif wrong == "detail":
        real_send = sim.Port.send_slices
        monkeypatch.setattr(sim.Port, "send_slices", lambda self, peers, source, starts, stops, values, **d:
                            real_send(self, peers, source, starts, stops, values, **{**d, "slice": d["slice"][::-1]}))
    else:
        from sim.engine import _slices
        real_arrived = _slices._SliceTable.arrived
        monkeypatch.setattr(_slices._SliceTable, "arrived", lambda self, sender, slots, arrivals:
                            real_arrived(self, sender, slots, arrivals / 2))
    broken = _run(4, "ring", True, arrays)
    assert broken != honest
    assert (broken[0] != honest[0]) == (wrong == "write")


def test_rows_are_used(monkeypatch):
    """The exchange by rows runs for a plain call (else the equality above is vacuous), and the
    message-by-message protocol for a sanitized run, arrival-order exploration, issue costs and a strided
    operand."""
    decided = []
    real = rows._plain
    monkeypatch.setattr(rows, "_plain", lambda port: decided.append(real(port)) or decided[-1])
    _run(4, "switch", False, _moe())
    assert decided == [True]
    decided.clear()
    _run(4, "switch", False, _moe(), sanitize=True)
    assert decided == [True]  # nothing broken: nothing to skip
    mesh = sim.Mesh({"x": 4}, network=sim.Network(costs=sim.Costs(per_message_s=1e-7)))
    f = sim.shard_map(_program(False), mesh=mesh, in_specs=(P("x"),) * 6, out_specs=P("x"), check_vma=False)
    decided.clear()
    f.run(*_moe())
    assert decided == [False]


def test_skips_and_exploration_take_the_message_path(monkeypatch):
    """A sanitized call that skips a broken slice, and every explored order, send message by message and
    still give the spec's rows."""
    decided = []
    real = rows._plain
    monkeypatch.setattr(rows, "_plain", lambda port: decided.append(real(port)) or decided[-1])
    operand, output, input_offsets, send_sizes, output_offsets, recv_sizes = _moe()
    broken = recv_sizes.copy()
    broken[0] += 1  # device 0 expects a row more from device 0 than it is sent
    f = sim.shard_map(_program(False), mesh=sim.Mesh({"x": 4}), in_specs=(P("x"),) * 6, out_specs=P("x"),
                      check_vma=False, sanitize=True)
    run = f.run(operand, output, input_offsets, send_sizes, output_offsets, broken)
    assert run.simulation.violations and decided == [False]
    decided.clear()
    f = sim.shard_map(_program(False), mesh=sim.Mesh({"x": 4}), in_specs=(P("x"),) * 6, out_specs=P("x"),
                      check_vma=False, explore_orders=2)
    f.run(*_moe())
    assert decided and not any(decided[1:])


def _args(operand_rows: int, output_rows: int, table: dict) -> SimpleNamespace:
    shape = lambda r: SimpleNamespace(shape=(r,))
    return SimpleNamespace(operand=shape(operand_rows), output=shape(output_rows),
                           **{k: np.asarray(v, np.int64) for k, v in table.items()})


@st.composite
def _tables(draw):
    """Any slice tables (valid or not) over 1 to 4 members: sizes from -1 to 3, offsets from -1 to 6."""
    n = draw(st.integers(1, 4))
    k = n * draw(st.integers(1, 2))
    entries = lambda lo, hi: st.lists(st.integers(lo, hi), min_size=k, max_size=k)
    out_rows = draw(st.integers(1, 6))
    members = [_args(draw(st.integers(1, 6)), out_rows, {
        "input_offsets": draw(entries(-1, 6)), "send_sizes": draw(entries(-1, 3)),
        "output_offsets": draw(entries(-1, 6)), "recv_sizes": draw(entries(-1, 3))}) for _ in range(n)]
    return members, draw(st.booleans())


def _slow_check(members: list, overlaps: bool) -> list:
    group = SimpleNamespace(members=tuple(range(len(members))))
    found = []
    for s, a in enumerate(members):
        a.device = s
        found += ragged._check_sends(s, a)
    for r, _ in enumerate(members):
        found += ragged._check_receives(r, members, group.members, overlaps)
    return found


@given(case=_tables())
def test_group_check_at_once_agrees_with_the_slice_checks(case):
    """The array check passes a group exactly when the per-slice checks find nothing to report."""
    members, overlaps = case
    assert rows.valid_at_once(members, overlaps) == (not _slow_check(members, overlaps))


def test_group_check_comparison_can_fail():
    """Two receive slices overlapping by one row are caught by both checks, and allowed with `overlaps`."""
    members = [_args(4, 4, {"input_offsets": [0, 2], "send_sizes": [2, 2], "output_offsets": [0, 1],
                            "recv_sizes": [2, 2]}) for _ in range(2)]
    assert _slow_check(members, False) and not rows.valid_at_once(members, False)
    assert rows.valid_at_once(members, True) and not _slow_check(members, True)


@st.composite
def _columns(draw):
    """A receiver's column: 0 to 20 slices of 1 to 3 rows laid out apart in shuffled order (runs and gaps)."""
    count = draw(st.integers(0, 20))
    lengths = draw(st.lists(st.integers(1, 3), min_size=count, max_size=count))
    at, rows_used = draw(_placed(lengths, rows_extra=1))
    trailing = tuple(draw(st.lists(st.integers(0, 2), max_size=2)))
    shape = (sum(lengths) + 1, *trailing)
    source = np.arange(int(np.prod(shape)), dtype=np.int16).reshape(shape)
    cursor, payloads = 0, []
    for length in lengths:
        payloads.append(source[cursor:cursor + length])
        cursor += length
    return payloads, np.array(at, np.int64), np.array(lengths, np.int64), (rows_used + 1, *trailing)


@pytest.mark.parametrize("staged_bytes", [0, 1 << 16])
@given(column=_columns())
def test_writing_a_column_equals_writing_each_slice(staged_bytes, column):
    """Writing a column in runs (joined bytes, or one copy per run) puts every slice where writing the slices
    one by one does."""
    payloads, at, lengths, shape = column
    expected = np.full(shape, -1, np.int16)
    for payload, start in zip(payloads, at.tolist()):
        expected[start:start + len(payload)] = payload
    got = np.full(shape, -1, np.int16)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rows, "_STAGED_BYTES", staged_bytes)
        rows.write_rows(got, payloads, at, lengths)
    assert got.tobytes() == expected.tobytes()


def test_writing_a_column_comparison_can_fail():
    """A column written with its offsets paired to the wrong slices differs from the slices written one by one."""
    payloads = [np.full((1, 2), k, np.int16) for k in range(10)]
    at, lengths = np.arange(10, dtype=np.int64), np.ones(10, np.int64)
    honest, wrong = np.zeros((10, 2), np.int16), np.zeros((10, 2), np.int16)
    rows.write_rows(honest, payloads, at, lengths)
    rows.write_rows(wrong, payloads, at[::-1].copy(), lengths)
    assert honest[:, 0].tolist() == list(range(10)) and wrong.tobytes() != honest.tobytes()
