"""The work budget: a run or sweep point estimated to send more than `max_messages` (`--max-messages`) is
refused before it runs, with the estimate and the knob, so no command runs for long without saying so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import scenarios
import sim
from scenarios import ScenarioError
from scenarios.cli import main
from scenarios.sweep import Point, measure, refused

_GATHER = '[mesh]\naxes = {{x = {n}}}\n\n[collective]\nop = "all_gather"\naxis_name = "x"\n\n' \
          '[inputs]\nseed = 0\nshape = [1]\n'


def _gather(tmp_path: Path, n: int) -> str:
    path = tmp_path / f"gather_{n}.toml"
    path.write_text(_GATHER.format(n=n), encoding="utf-8")
    return str(path)


def _point(devices: int, size_bytes: int = 16 << 10, collective: str = "psum") -> Point:
    return Point(collective, {"x": devices}, None, size_bytes, {"topology": "fully_connected"}, "direct", "float32",
                 0)


@pytest.mark.parametrize(("messages", "limit", "error", "match"), [
    (5, True, sim.InvalidTypeError, r"max_messages=True must be an int \(messages\) or None"),
    (5, 0, sim.InvalidArgumentError, r"max_messages=0 must be positive"),
    (11, 10, sim.InvalidArgumentError, r"^a run sends about 11 messages, more than max_messages=10$"),
    (sim.DEFAULT_MAX_MESSAGES + 1, None, sim.InvalidArgumentError, r"1,000,001 messages, more than "
                                                                   r"max_messages=1000000"),
])
def test_check_messages_refuses_past_the_limit(messages, limit, error, match):
    """`sim.check_messages` refuses a bad limit and an estimate past it, echoing both."""
    with pytest.raises(error, match=match):
        sim.check_messages("a run", messages, limit)


def test_check_messages_takes_the_default_and_returns_the_limit():
    """An estimate at the limit passes; None is the documented default."""
    assert sim.check_messages("a run", sim.DEFAULT_MAX_MESSAGES, None) == sim.DEFAULT_MAX_MESSAGES
    assert sim.check_messages("a run", 10, 10) == 10


def test_a_scenario_over_the_work_budget_is_refused_before_it_runs(tmp_path):
    """An all_gather over 1001 devices sends 1001**2 messages, past the default million: `load` refuses it
    at `[mesh] axes`, with the estimate, the knob and --timeout; a larger `max_messages` loads it, and 1000
    devices (exactly a million) load by default."""
    path = _gather(tmp_path, 1001)
    with pytest.raises(ScenarioError, match=rf"^{path}:2: the scenario \(all_gather on 1001 devices in groups of "
                                            r"1001\) sends about 1,002,001 messages, more than max_messages=1000000; "
                                            r"a run that large takes long .*--max-messages N.*max_messages=N.*"
                                            r"--timeout SECONDS"):
        scenarios.load(path)
    assert scenarios.load(path, max_messages=2_000_000).mesh.size == 1001
    assert scenarios.load(_gather(tmp_path, 1000)).mesh.size == 1000
    with pytest.raises(ScenarioError, match=r"sends about 16 messages, more than max_messages=15"):
        scenarios.load(_gather(tmp_path, 4), max_messages=15)


def test_meshsim_run_refuses_past_max_messages_in_one_line(tmp_path, capsys):
    """`meshsim run --max-messages N` below the estimate exits 2 with one `meshsim: error:` line naming the
    knob; at the estimate it runs; a limit that is not a positive whole number is a usage error."""
    path = _gather(tmp_path, 4)
    assert main(["run", "--max-messages", "15", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"meshsim: error: {path}:2: ") and "--max-messages" in err
    assert main(["run", "--max-messages", "16", path]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        main(["run", "--max-messages", "1.5", path])
    assert stopped.value.code == 2
    assert "--max-messages='1.5' must be a positive whole number" in capsys.readouterr().err


def test_provenance_of_a_gather_over_many_devices_names_every_sender(tmp_path):
    """A 300-device gather (90,000 messages): every device's result row j comes from device j, and the
    provenance says so for every row of every device (built in one pass over the trace)."""
    result = scenarios.run(scenarios.load(_gather(tmp_path, 300)))
    expected = tuple(range(300))
    assert all(p.sources == expected for p in result.provenance)
    writers = {result.trace[k].dst for p in result.provenance[:3] for k in p.messages}
    assert writers == {0, 1, 2}
    np.testing.assert_array_equal(result.outputs[7], result.outputs[0])


def test_a_sweep_point_over_budget_is_an_error_row_before_it_is_submitted():
    """A psum over 4096 devices at 16 KiB (16.7 million messages, 16 GiB of trace): `refused` gives its row
    at once, naming the memory estimate or, with memory to spare, the messages and --max-messages; a small
    point may run."""
    row = refused(_point(4096), max_memory_bytes=1 << 40)
    assert row is not None and row["devices"] == 4096 and row["time_s"] is None
    assert row["error"].startswith("psum (direct) of size_bytes=16384 on 4096 devices sends about 16,777,216 "
                                   "messages, more than max_messages=1000000")
    assert row["error"].endswith("raise the limit with meshsim sweep --max-messages N")
    memory = refused(_point(4096), max_memory_bytes=1 << 30)
    assert memory is not None and "needs about" in memory["error"] and "--max-memory SIZE" in memory["error"]
    assert refused(_point(4)) is None
    assert refused(_point(4096), max_memory_bytes=1 << 40, max_messages=20_000_000) is None


def test_measure_checks_the_budget_too():
    """`measure` (what a worker runs) refuses a point over budget the same way, without running it."""
    row = measure(_point(64), max_messages=100)
    assert row["error"].startswith("psum (direct) of size_bytes=16384 on 64 devices sends about 4,096 messages")
    assert row["messages"] is None


def test_meshsim_sweep_gives_a_point_over_max_messages_an_error_row(tmp_path, capsys):
    """`meshsim sweep --max-messages 20`: the 8-device point (64 messages) is an error row naming the knob, the
    4-device one (16) runs, and the sweep exits 0 with both rows."""
    path = tmp_path / "sweep.toml"
    path.write_text('title = "two meshes"\ncollective = "psum"\nmesh = [{x = 4}, {x = 8}]\nsize = "1KiB"\n',
                    encoding="utf-8")
    argv = ["sweep", str(path), "-o", str(tmp_path / "out"), "--workers", "1", "--json", "--max-messages", "20"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["devices"] for row in rows] == [4, 8]
    assert rows[0]["error"] is None and (rows[0]["messages"], rows[0]["between_devices"]) == (16, 12)
    assert rows[1]["error"].startswith("psum (direct) of size_bytes=1024 on 8 devices sends about 64 messages, "
                                       "more than max_messages=20")
    assert rows[1]["error"].endswith("--max-messages N")


def _algorithms() -> list[tuple[str, str]]:
    import collectives

    return [(op, a.name) for op in ("psum", "all_gather", "psum_scatter", "all_to_all")
            for a in collectives.definition(op).algorithms if a.name != "in_network"]


@pytest.mark.parametrize("op, name", _algorithms(), ids=lambda v: str(v))
@pytest.mark.parametrize("mesh", [{"x": 8}, {"x": 2, "y": 4}, {"x": 16}])
@pytest.mark.parametrize("network", ["fully_connected", "nodes of 4"])
def test_the_estimate_is_at_least_what_the_point_sends(op, name, mesh, network):
    """Every algorithm of the sweepable collectives, as a sweep point on a line and a grid, with and without
    nodes: the messages it sends are at most its estimate (`Definition.most_messages`); where its record
    counts them, the estimate is within one message per device of the count on one node (it was the group
    size times a per-peer bound: 4 M for a recursive doubling on 2048 devices, which sends 24 k)."""
    import collectives

    table = {"topology": "hierarchical", "node_size": 4} if network == "nodes of 4" else {"topology": network}
    point = Point(op, mesh, None, 4096, table, name, "float32", 0)
    row = measure(point)
    if row["error"] is not None:
        assert "power of two" in row["error"] or "must be one of" in row["error"], row["error"]
        return
    definition = collectives.definition(op)
    algorithm, shape = definition.algorithm(name), tuple(mesh.values())
    devices = int(np.prod(shape))
    estimate = definition.most_messages(algorithm, devices, shape)
    assert row["messages"] <= estimate
    if algorithm.over(shape).messages is not None and not algorithm.auto and network == "fully_connected":
        assert estimate - row["messages"] <= devices


def test_a_recursive_doubling_on_2048_devices_is_not_refused():
    """psum by recursive doubling on 2048 devices sends 11 messages per device: within the default budget."""
    point = Point("psum", {"x": 2048}, None, 4096, {"topology": "fully_connected"}, "recursive_doubling",
                  "float32", 0)
    assert refused(point) is None
