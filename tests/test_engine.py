"""The engine: mesh geometry, memories, network timing, trace, determinism and shard_map plumbing."""

from __future__ import annotations

import numpy as np
import pytest

import collectives
import layouts
import sim
from sim import P


def test_mesh_devices_are_row_major_over_axes():
    """Device ids run row-major over the axes, as jax.sharding.Mesh does."""
    mesh = sim.Mesh({"x": 2, "y": 3})
    assert [tuple(mesh.coords(d).values()) for d in mesh.devices] == [
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert mesh.axis_peers(4, "x") == (1, 4)
    assert mesh.axis_peers(4, "y") == (3, 4, 5)


def test_tuple_axis_index_is_row_major_in_tuple_order():
    """For a tuple of names the first name is most major, whatever the mesh order."""
    mesh = sim.Mesh({"x": 2, "y": 2})
    assert [mesh.axis_index(d, ("x", "y")) for d in mesh.devices] == [0, 1, 2, 3]
    assert [mesh.axis_index(d, ("y", "x")) for d in mesh.devices] == [0, 2, 1, 3]
    assert mesh.axis_peers(0, ("y", "x")) == (0, 2, 1, 3)


def test_groups_follow_listed_order():
    """With axis_index_groups, a member's group index is its position in the listed group."""
    mesh = sim.Mesh({"i": 4})
    assert mesh.group(1, "i", [[0, 2], [3, 1]]) == sim.Group((3, 1), 1)
    assert mesh.group(2, "i", [[0, 2], [3, 1]]) == sim.Group((0, 2), 1)


def test_groups_of_numpy_integers_are_groups_of_ints_and_floats_equal_to_them_are_refused():
    """numpy integer scalars are ints in axis_index_groups, before and after the same Python ints' groups are
    kept; floats and bools that equal those ints (0.0 == 0, True == 1) are refused however often the ints'
    groups were used, as they are on a fresh mesh."""
    mesh = sim.Mesh({"i": 4})
    assert mesh.group(3, "i", [[np.int64(0), np.int32(3)], [np.int64(1), np.int64(2)]]) == sim.Group((0, 3), 1)
    assert mesh.group(3, "i", [[0, 3], [1, 2]]) == sim.Group((0, 3), 1)
    assert mesh.group(3, "i", np.array([[0, 3], [1, 2]])) == sim.Group((0, 3), 1)
    assert mesh.group(3, "i", [[np.int64(0), 3], [1, 2]]) == sim.Group((0, 3), 1)
    for groups, shown in (([[0.0, 3], [1, 2]], "0.0"), ([[0, 3.0], [1, 2]], "3.0"),
                          (np.array([[0.0, 3.0], [1.0, 2.0]]), r"np.float64\(0.0\)")):
        with pytest.raises(sim.InvalidTypeError, match=rf"must be a list of lists of ints: .*={shown} is not an int"):
            mesh.group(3, "i", groups)
    mesh.group(0, "i", [[1, 0], [2, 3]])
    with pytest.raises(sim.InvalidTypeError, match=r"axis_index_groups\[0\]\[0\]=True is not an int"):
        mesh.group(0, "i", [[True, False], [2, 3]])


def test_memory_views_decode_the_bytes():
    """An array stored in a device memory reads back through its layout, and its bytes are row-major."""
    memory = sim.LocalMemory(0)
    array = np.arange(12, dtype=np.int16).reshape(3, 4)
    buffer = memory.store(array)
    assert memory.view(buffer).tolist() == array.tolist()
    assert memory.raw(buffer).tobytes() == array.tobytes()
    assert memory.find(memory.view(buffer)) == buffer
    assert memory.find(array) is None


def test_memory_grows_without_moving_earlier_arrays():
    """Views handed out earlier stay valid when the memory grows past its first segment."""
    memory = sim.LocalMemory(0)
    first = memory.view(memory.store(np.arange(10)))
    big = memory.store(np.ones(1 << 19))  # 4 MiB: forces a new segment
    assert first.tolist() == list(range(10))
    assert memory.view(big).sum() == 1 << 19
    assert memory.size_bytes >= 4 << 20


def test_column_major_layout_decodes_to_same_values():
    """The same logical array encoded column-major has transposed bytes but decodes identically."""
    array = np.arange(6, dtype=np.int32).reshape(2, 3)
    raw = layouts.encode(array, layouts.Layout((1, 0)))
    assert raw.view(np.int32).tolist() == [0, 3, 1, 4, 2, 5]
    assert layouts.decode(raw, np.int32, (2, 3), layouts.Layout((1, 0))).tolist() == array.tolist()


def test_message_time_is_latency_plus_size_over_bandwidth():
    """A lone message on an idle link arrives after alpha + bytes * beta."""
    network = sim.Network.fully_connected(latency_s=2e-6, bandwidth_bytes_per_s=1e9)
    mesh = sim.Mesh({"x": 2}, network=network)
    f = sim.shard_map(lambda x: collectives.all_gather(x, "x"), mesh=mesh, in_specs=P("x"), out_specs=P(),
                      check_vma=False)
    f(np.zeros(2000, np.float32))  # 1000 floats = 4000 bytes per device
    remote = [m for m in f.last_run.trace if m.src != m.dst]
    assert len(remote) == 2
    for m in remote:
        assert m.size_bytes == 4000
        assert m.arrival_time_s == pytest.approx(2e-6 + 4000 / 1e9)
    assert f.last_run.end_time_s == pytest.approx(2e-6 + 4000 / 1e9)


def test_messages_sharing_a_link_share_its_bandwidth():
    """Two slices sent on one link at once share its bandwidth: each gets half, so both arrive after two
    transfer times."""
    network = sim.Network.fully_connected(latency_s=1e-6, bandwidth_bytes_per_s=1e9)
    mesh = sim.Mesh({"x": 2}, network=network)
    body = lambda op, out, io, ss, oo, rs: collectives.ragged_all_to_all(op, out, io, ss, oo, rs, axis_name="x")
    f = sim.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 6, out_specs=P("x"))
    # device 0 sends two 100-row float64 slices (its slices 2 and 3) to device 1
    f(np.zeros(400), np.zeros(800), np.array([0, 0, 0, 100] + [0] * 4), np.array([0, 0, 100, 100] + [0] * 4),
      np.array([0, 0, 0, 100] + [0] * 4), np.array([0] * 4 + [100, 100, 0, 0]))
    wire = 800 / 1e9
    arrivals = sorted(m.arrival_time_s for m in f.last_run.trace if m.src == 0 and m.dst == 1)
    assert arrivals == pytest.approx([2 * wire + 1e-6, 2 * wire + 1e-6])


def test_runs_are_deterministic():
    """The same program gives the same outputs, trace and end time every time."""
    mesh = sim.Mesh({"x": 2, "y": 2})
    f = sim.shard_map(lambda x: collectives.all_to_all(collectives.all_gather(x, "y", tiled=True), ("x", "y"), 0, 0,
                                                       tiled=True),
                      mesh=mesh, in_specs=P(("x", "y")), out_specs=P(("x", "y")))
    x = np.arange(32.0)
    runs = [f.run(x) for _ in range(3)]
    assert all(r.outputs.tobytes() == runs[0].outputs.tobytes() for r in runs)
    assert all(r.trace.to_json() == runs[0].trace.to_json() for r in runs)
    assert len({r.end_time_s for r in runs}) == 1


def test_device_dependent_control_flow():
    """Devices may branch on their data; collectives still pair up call by call."""
    def body(x):
        if x[0] % 2:
            x = x * 10
        return collectives.all_gather(x, "x", tiled=True)

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 4}), in_specs=P("x"), out_specs=P(), check_vma=False)
    assert f(np.arange(4)).tolist() == [0, 10, 2, 30]


def test_pytrees_in_and_out():
    """Inputs and outputs may be pytrees; in_specs and out_specs may be tree prefixes."""
    def body(tree):
        gathered = collectives.all_gather(tree, "x", tiled=True)
        return {"a": gathered["a"], "b": tree["b"]}

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=({"a": P("x"), "b": P()},),
                      out_specs={"a": P(), "b": P()}, check_vma=False)
    out = f({"a": np.arange(4), "b": np.ones(3)})
    assert out["a"].tolist() == [0, 1, 2, 3]
    assert out["b"].tolist() == [1, 1, 1]


def test_results_live_in_the_receivers_memory():
    """A collective's result is a view of the bytes the receiver wrote into its own memory."""
    seen = {}

    def body(x):
        out = collectives.all_gather(x, "x")
        context = sim.current()
        seen[context.device] = context.memory.find(out)
        return out

    sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=P("x"), out_specs=P(), check_vma=False)(np.arange(4))
    assert all(buffer is not None and buffer.device == d for d, buffer in seen.items())


def test_trace_names_collective_slice_and_rows():
    """Every ragged message records its collective, slice index and the output rows it fills."""
    f = sim.shard_map(lambda *a: collectives.ragged_all_to_all(*a, axis_name="x"), mesh=sim.Mesh({"x": 2}),
                      in_specs=(P("x"),) * 6, out_specs=P("x"))
    f(np.array([1, 2, 2, 3, 4, 0]), np.zeros(8, int), np.array([0, 1, 0, 1]), np.array([1, 2, 1, 1]),
      np.array([0, 0, 1, 2]), np.array([1, 1, 2, 1]))
    rows = {(m.src, m.dst): (m.collective, m.detail["slice"], m.detail["rows"]) for m in f.last_run.trace}
    assert rows == {(0, 0): ("ragged_all_to_all", 0, (0, 1)), (0, 1): ("ragged_all_to_all", 1, (0, 2)),
                    (1, 0): ("ragged_all_to_all", 0, (1, 2)), (1, 1): ("ragged_all_to_all", 1, (2, 3))}
    assert f.last_run.trace.total_bytes == 16 + 8


def test_sender_cannot_overwrite_a_payload_in_flight():
    """A device's collective ends only when its own messages have arrived, so writing into its operand
    afterwards cannot change what the receiver gets."""
    def body(op, out, io, ss, oo, rs):
        op = collectives.ppermute(op, "x", [(0, 0), (1, 1)])  # a writable copy in device memory (inputs are not)
        result = collectives.ragged_all_to_all(op, out, io, ss, oo, rs, axis_name="x")
        op[:] = -7
        return result

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 2}), in_specs=(P("x"),) * 6, out_specs=P("x"))
    rows = 1000
    operand = np.arange(2 * rows)
    out = f(operand, np.zeros(2 * rows, int), np.array([0, 1, 0, 0]), np.array([1, rows - 1, 0, 0]),
            np.array([0, 0, 0, 0]), np.array([1, 0, rows - 1, 0]))
    assert out[rows:2 * rows - 1].tolist() == list(range(1, rows))
