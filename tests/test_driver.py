"""The driver, rendezvous and transport: greenlets instead of threads, errors that say where they came from,
aborts that cannot be swallowed, linear rendezvous, cached groups, byte-identical traces."""

from __future__ import annotations

import inspect
import json
import signal
from contextlib import contextmanager

import numpy as np
import pytest

import collectives
import sim
from sim import P


@contextmanager
def _deadline(seconds: int):
    """Fail (instead of hanging the suite) if the block takes longer than `seconds`."""
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _os_threads() -> int:
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("Threads:")).split()[1])


def test_a_swallowed_abort_raises_the_original_error():
    """A device that wraps a collective in a bare `except:` and retries cannot swallow the engine's abort:
    the run ends with the other device's original ValueError, naming device 1."""
    def body(v):
        if collectives.axis_index("i") == 1:
            raise ValueError("boom")
        for _ in range(3):
            try:
                return collectives.psum(v, "i")
            except:  # noqa: E722 - the point of the test
                continue
        return v

    f = sim.shard_map(body, mesh=sim.Mesh({"i": 2}), in_specs=P("i"), out_specs=P("i"), check_vma=False)
    with _deadline(30), pytest.raises(ValueError, match="boom") as caught:
        f(np.arange(4.0))
    assert any("device 1" in note for note in caught.value.__notes__)


def test_a_program_retrying_forever_still_ends():
    """Even a device that retries its collective forever after the abort stops running: it is parked."""
    def body(v):
        if collectives.axis_index("i") == 0:
            raise KeyError("first")
        while True:
            try:
                return collectives.psum(v, "i")
            except BaseException:
                pass

    f = sim.shard_map(body, mesh=sim.Mesh({"i": 3}), in_specs=P("i"), out_specs=P("i"), check_vma=False)
    with _deadline(30), pytest.raises(KeyError, match="first"):
        f(np.arange(3.0))


def test_an_error_says_device_call_and_the_users_line():
    """An error raised in a device program keeps its type and traceback and gains a note naming the device,
    the collective call it made last, and the user's file and line."""
    def body(x):
        y = collectives.all_gather(x, "x")
        if collectives.axis_index("x") == 2:
            raise ZeroDivisionError("on purpose")
        return y

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 4}), in_specs=P("x"), out_specs=P(), check_vma=False)
    with pytest.raises(ZeroDivisionError) as caught:
        f(np.arange(4))
    note = caught.value.__notes__[-1]
    assert note.startswith("raised on device 2 after all_gather (call #0 over devices [0, 1, 2, 3]), at ")
    assert f"{__file__}:" in note and "(body)" in note
    assert caught.value.__traceback__ is not None


def test_an_error_raised_inside_numpy_names_the_users_line_not_numpys():
    """An error numpy raises for the user's call names the user's line (it named a line of numpy's own)."""
    def body(x):
        return np.linalg.inv(x.reshape(1, 2))

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P())
    with pytest.raises(np.linalg.LinAlgError) as caught:
        f(np.arange(4.0))
    note = caught.value.__notes__[-1]
    assert f"at {__file__}:" in note and note.endswith("(body)"), note


def test_a_jax_collective_in_a_body_says_what_to_call_instead():
    """`jax.lax.psum` in a sim.shard_map body fails in JAX's words (an unbound axis name), with a note naming
    meshsim's collectives and the bridge, and the user's line (not JAX's)."""
    import jax

    f = sim.shard_map(lambda x: jax.lax.psum(x, "x"), mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P())
    with pytest.raises(NameError, match="unbound axis name") as caught:
        f(np.arange(4.0))
    where, hint = caught.value.__notes__[-2:]
    assert f"at {__file__}:" in where, where
    assert hint.startswith("a jax.lax collective in a sim.shard_map body") and "oracles.simulate_jax" in hint


def test_a_collective_error_inside_the_protocol_names_the_call():
    """A rule broken across the group (found at the rendezvous) is reported with every violation."""
    f = sim.shard_map(lambda x: collectives.all_gather(x if collectives.axis_index("x") else x[:1], "x"),
                      mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P(), check_vma=False)
    with pytest.raises(sim.InvalidArgumentError, match="device 1: all_gather: x is int64\\[2\\] but device 0"):
        f(np.arange(4))


def test_devices_are_not_threads():
    """Device programs run as greenlets: the process has as many OS threads with 512 devices as with 2."""
    seen = []

    def body(x):
        seen.append(_os_threads())
        return collectives.psum(x, "x")

    before = _os_threads()
    for n in (2, 512):
        sim.shard_map(body, mesh=sim.Mesh({"x": n}), in_specs=P("x"), out_specs=P(), check_vma=False)(np.ones(n))
    assert max(seen) == before


def test_deadlock_report_names_what_each_device_waits_on():
    """Devices that stop waiting on each other get a report of each one's collective, call and group."""
    def body(x):
        if collectives.axis_index("x") == 0:
            return x
        return collectives.psum(x, "x")

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"), check_vma=False)
    with pytest.raises(sim.ProtocolError, match=r"device 0 has finished\n  device 1 waits in psum \(call #0 "
                                                r"over devices \[0, 1\]\)") as caught:
        f(np.arange(2.0))
    finished, waiting = caught.value.activities  # the report's structured form, by device
    assert finished == sim.engine.Activity(sim.engine.Phase.FINISHED)
    assert waiting == sim.engine.Activity(sim.engine.Phase.WAITING, sim.Waiting("psum", 0, (0, 1)))


def test_deadlock_report_names_where_a_labelled_call_was_made():
    """A device stuck in a call made inside `sim.labelled` (the JAX bridge labels each call with the user's
    line) is reported with that label, taken before its program is unwound."""
    def body(x):
        if collectives.axis_index("x") == 0:
            return x
        with sim.labelled("model.py:12 (combine)"):
            return collectives.psum(x, "x")

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"), check_vma=False)
    with pytest.raises(sim.ProtocolError, match=r"device 1 waits in psum \(call #0 over devices \[0, 1\]\), "
                                                r"called at model\.py:12 \(combine\)$"):
        f(np.arange(2.0))


def test_a_port_sees_its_transport_memory_meeting_and_options():
    """A protocol's port reaches the call's transport, its device's memory, a read-only view of the meeting
    (every member's arguments, facts worked out once per call) and the run's options, not the simulation."""
    seen = []

    def protocol(port, args):
        seen.append((port.device, port.group_args, port.once("fact", lambda: object()), port.mesh,
                     port.options.check_vma, port.memory, port.transport, hasattr(port, "simulation")))
        port.send(port.group.members[1 - port.group.index], np.array([args]))
        message = yield port.recv(port.group.members[1 - port.group.index])
        return message.payload[0]

    def body(x):
        context = sim.current()
        group = context.mesh.group(context.device, "x", None)
        return np.array([context.collective(sim.Collective("swap", group, (), float(x[0]), protocol))])

    mesh = sim.Mesh({"x": 2})
    out = sim.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)(np.array([3.0, 4.0]))
    assert np.array_equal(np.asarray(out), [4.0, 3.0])
    (d0, args0, fact0, mesh0, vma0, memory0, transport0, whole0), (d1, args1, fact1, _, _, memory1, transport1,
                                                                     whole1) = seen
    assert (d0, d1) == (0, 1) and args0 == args1 == [3.0, 4.0] and fact0 is fact1 and mesh0 is mesh
    assert vma0 is False and memory0 is not memory1 and transport0 is transport1
    assert not whole0 and not whole1


def _swap_run(protocol) -> list:
    """Device 0's and device 1's results of a call of `protocol` over a 2-device axis."""
    def body(x):
        context = sim.current()
        group = context.mesh.group(context.device, "x", None)
        return np.array([context.collective(sim.Collective("swap", group, (), float(x[0]), protocol))])

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P("x"), check_vma=False)
    return np.asarray(f(np.array([3.0, 4.0]))).tolist()


def _twice(same_tag: bool):
    """A protocol where each device sends the other two messages and, once both have arrived, receives them
    (tags 0, 0 or 0, 1)."""
    def protocol(port, args):
        other = port.group.members[1 - port.group.index]
        port.send(other, np.array([args]), tag=0)
        port.send(other, np.array([args * 10]), tag=0 if same_tag else 1)
        yield port.transport.env.timeout(1.0)  # both have arrived before the first receive
        first = yield port.recv(other, tag=0)
        second = yield port.recv(other, tag=0 if same_tag else 1)
        return first.payload[0] + second.payload[0]
    return protocol


def test_two_messages_with_one_tag_in_flight_are_refused_not_one_lost():
    """A protocol sending a device two messages with the same tag in one call: the second would replace the
    first in the receiver's mailbox (one lost, the other received twice or never), so the run stops naming the
    devices, the tag and the rule; with a tag each, both arrive."""
    assert _swap_run(_twice(same_tag=False)) == [44.0, 33.0]
    with pytest.raises(sim.ProtocolError, match=r"device [01] sent device [01] a second message with tag=0 before "
                                                r"the first was received, in the same call: .* give each message "
                                                r"its own tag"):
        _swap_run(_twice(same_tag=True))


def test_two_receives_waiting_for_one_tag_are_refused_not_left_hanging():
    """Two receives waiting at once for the same sender and tag: the first would never fire (a deadlock
    reported without its cause), so the run stops naming the device, the sender and the tag."""
    def protocol(port, args):
        other = port.group.members[1 - port.group.index]
        first, second = port.recv(other, tag=7), port.recv(other, tag=7)
        port.send(other, np.array([args]), tag=7)
        return (yield first).payload[0] + (yield second).payload[0]

    with pytest.raises(sim.ProtocolError, match=r"device 0 waits a second time for a message from device 1 with "
                                                r"tag=7 while the first receive still waits"):
        _swap_run(protocol)


def test_mismatched_calls_are_compared_with_the_first_arrival():
    """A device calling another collective than the group's first arrival is named with both calls."""
    def body(x):
        if collectives.axis_index("x") == 2:
            return collectives.all_gather(x, "x", tiled=True)[:1]
        return collectives.psum(x, "x")

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 3}), in_specs=P("x"), out_specs=P("x"), check_vma=False)
    with pytest.raises(sim.ProtocolError, match=r"device 0 called psum.*device 2 called all_gather"):
        f(np.arange(3.0))


def test_groups_are_computed_once_per_mesh(monkeypatch):
    """Every device's group for one (axis_name, axis_index_groups) is built and checked once per mesh, and
    the members of a group share one tuple."""
    defining = inspect.getmodule(sim.Mesh)  # the module whose Mesh.group calls the check
    checks = []
    original = defining.check_axis_index_groups
    monkeypatch.setattr(defining, "check_axis_index_groups", lambda *a: checks.append(a) or original(*a))
    mesh = sim.Mesh({"x": 4, "y": 2})
    groups = [mesh.group(d, "x", [[0, 2], [3, 1]]) for d in mesh.devices for _ in range(3)]
    assert len(checks) == 1
    assert mesh.group(2, "x", [[0, 2], [3, 1]]) == sim.Group((6, 2), 1)
    assert groups[0].members is mesh.group(4, "x", [[0, 2], [3, 1]]).members
    with pytest.raises(sim.InvalidArgumentError, match="exactly once"):
        mesh.group(0, "x", [[0, 1], [1, 2]])


def test_traces_are_byte_identical_across_runs():
    """Two runs of the same program give the same trace, byte for byte, as JSON and as columns."""
    def body(x):
        y = collectives.all_to_all(x, "x", 0, 0, tiled=True)
        z = collectives.ppermute(y, "x", [(i, (i + 1) % 8) for i in range(8)])
        return collectives.psum(z, "x", algorithm="ring") + collectives.all_gather(z, "x", tiled=True)[:8]

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 8}), in_specs=P("x"), out_specs=P("x"), check_vma=False)
    x = np.arange(64.0)
    first, second = f.run(x), f.run(x)
    assert json.dumps(first.trace.to_json()).encode() == json.dumps(second.trace.to_json()).encode()
    for name, column in first.trace.columns().items():
        assert column.tolist() == second.trace.columns()[name].tolist(), name
    assert first.outputs.tobytes() == second.outputs.tobytes()


def test_trace_columns_match_the_records():
    """The columnar trace and the records made from it on demand hold the same fields, in send order."""
    f = sim.shard_map(lambda x: collectives.all_to_all(x, "x", 0, 0, tiled=True), mesh=sim.Mesh({"x": 4}),
                      in_specs=P("x"), out_specs=P("x"))
    run = f.run(np.arange(16.0))
    columns = run.trace.columns()
    assert len(run.trace) == 16 == len(columns["src"])
    assert columns["src"].dtype == np.int64 and columns["arrival_time_s"].dtype == np.float64
    for k, record in enumerate(run.trace):
        assert (record.src, record.dst, record.size_bytes) == (columns["src"][k], columns["dst"][k], 8 * 1)
        assert record.detail == {"slice": record.dst, "axis": 0, "rows": (record.src, record.src + 1)}
    assert [m.src for m in run.trace] == sorted(m.src for m in run.trace)


def test_link_busy_time_comes_from_the_trace():
    """Each link was busy for the bytes it carried over its bandwidth; a device's message to itself uses none."""
    mesh = sim.Mesh({"x": 2}, network=sim.Network.fully_connected(latency_s=0, bandwidth_bytes_per_s=1e9))
    run = sim.shard_map(lambda x: collectives.all_gather(x, "x", tiled=True), mesh=mesh, in_specs=P("x"),
                        out_specs=P(), check_vma=False).run(np.arange(200.0))
    busy = run.simulation.links.busy_s(run.trace)
    assert busy == pytest.approx({(0, 1): 800 / 1e9, (1, 0): 800 / 1e9})


def test_a_call_with_many_violations_shows_the_first_and_keeps_all():
    """A call that breaks thousands of rules shows the first 50 in its message, says how many more there
    are, and keeps every one in `violations`."""
    n = 64
    ones = np.ones(n * n, np.int32)
    f = sim.shard_map(lambda *a: collectives.ragged_all_to_all(*a, axis_name="x"), mesh=sim.Mesh({"x": n}),
                      in_specs=(P("x"),) * 6, out_specs=P("x"))
    # every sender writes its one row at output row 0 of every receiver: n - 1 overlaps per receiver
    with pytest.raises(sim.InvalidArgumentError) as caught:
        f(np.zeros(n * n), np.zeros(n * n), np.tile(np.arange(n, dtype=np.int32), n), ones,
          np.zeros(n * n, np.int32), ones)
    message = str(caught.value)
    assert message.startswith(f"ragged_all_to_all: {n * (n - 1)} invalid argument(s)\n")
    assert message.count("\n  device") == 50 and message.endswith(f"... and {n * (n - 1) - 50} more (all of them "
                                                                  "in this error's `violations`)")
    assert len(caught.value.violations) == n * (n - 1)


def test_reports_on_large_groups_stay_short():
    """An error note or a deadlock report on a large group names its size and ends, not every member."""
    def body(x):
        y = collectives.psum(x, "x")
        if collectives.axis_index("x") == 700:
            return y[5]
        return y

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 1024}), in_specs=P("x"), out_specs=P("x"), check_vma=False)
    with pytest.raises(IndexError) as caught:
        f(np.ones(1024))
    assert "after psum (call #0 over 1024 devices [0, 1, 2, 3, ..., 1022, 1023]), at " in caught.value.__notes__[-1]
