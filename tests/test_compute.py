"""Time for local work and overlap (`sim.compute`, `sim.start`, `sim.Roofline`): work takes its roofline time
on the device's compute track; a collective started with `sim.start` runs beside it, so a step of a collective
matmul takes max(T_math, T_comm) overlapped and T_math + T_comm plain, hand-computed; a started collective
waited on at once equals the plain call in bytes, every trace column, call records and times (a comparison
shown able to fail); the presets' peak rates; the Perfetto compute and communication tracks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import collectives
import sim
from sim import P

_ROOF = sim.Roofline(peak_flops_per_s=1e12, memory_bytes_per_s=1e11)
_NET = sim.Network(latency_s=1e-6, bandwidth_bytes_per_s=1e9, roofline=_ROOF)


def _ring(n: int) -> list[tuple[int, int]]:
    return [(k, (k + 1) % n) for k in range(n)]


def _mapped(f, n: int = 4, network: sim.Network = _NET, check_vma: bool = True) -> sim.ShardMapped:
    return sim.shard_map(f, mesh=sim.Mesh({"i": n}, network=network), in_specs=P("i"), out_specs=P("i"),
                         check_vma=check_vma)


def test_roofline_takes_the_slowest_bound():
    """The time is the largest of flops / peak, bytes / bandwidth and transcendentals / their rate; without
    a transcendental rate each counts as a flop."""
    assert _ROOF.seconds(flops=3e9) == pytest.approx(3e-3)
    assert _ROOF.seconds(flops=3e9, bytes_accessed=1e9) == pytest.approx(1e-2)
    assert _ROOF.seconds(flops=1e9, transcendentals=2e9) == pytest.approx(3e-3)
    with_rate = sim.Roofline(1e12, 1e11, transcendentals_per_s=1e9)
    assert with_rate.seconds(flops=1e9, transcendentals=2e9) == pytest.approx(2.0)
    assert _ROOF.seconds() == 0.0


@pytest.mark.parametrize("kwargs, error, match", [
    ({"peak_flops_per_s": 0, "memory_bytes_per_s": 1e9}, sim.InvalidArgumentError, "peak_flops_per_s=0 must be"),
    ({"peak_flops_per_s": 1e12, "memory_bytes_per_s": -1}, sim.InvalidArgumentError, "memory_bytes_per_s=-1"),
    ({"peak_flops_per_s": "fast", "memory_bytes_per_s": 1e9}, sim.InvalidTypeError, "peak_flops_per_s='fast'"),
    ({"peak_flops_per_s": 1e12, "memory_bytes_per_s": 1e9, "transcendentals_per_s": math.inf},
     sim.InvalidArgumentError, "transcendentals_per_s=inf"),
], ids=["zero-peak", "negative-bandwidth", "text-peak", "infinite-transcendentals"])
def test_bad_rooflines_are_refused(kwargs, error, match):
    """A roofline's rates are finite numbers > 0, named in the error."""
    with pytest.raises(error, match=match):
        sim.Roofline(**kwargs)


def test_network_roofline_must_be_a_roofline():
    """`Network(roofline=...)` takes a `sim.Roofline` or None."""
    with pytest.raises(sim.InvalidTypeError, match=r"roofline=1000000000000\.0 must be a sim\.Roofline"):
        sim.Network(roofline=1e12)


@pytest.mark.parametrize("name", sorted(sim.PRESETS))
@pytest.mark.parametrize("calibration", sim.CALIBRATIONS)
def test_every_preset_has_its_devices_peak_rates(name, calibration):
    """Every preset carries its device's roofline in both calibrations: dense bfloat16 peaks between 100
    TFLOP/s and 5 PFLOP/s, memory between 500 GB/s and 10 TB/s (the published figures in `_presets.py`),
    and ridge points (flops per byte where work turns compute-bound) of a few hundred."""
    roofline = sim.Network.preset(name, calibration=calibration).roofline
    assert roofline is sim.network.ROOFLINES[name]
    assert 1e14 <= roofline.peak_flops_per_s <= 5e15
    assert 5e11 <= roofline.memory_bytes_per_s <= 1e13
    assert 100 <= roofline.peak_flops_per_s / roofline.memory_bytes_per_s <= 700


def test_compute_takes_its_roofline_time_and_is_recorded():
    """Work charged by counts takes its roofline time, work charged in seconds that long; each piece is a
    `ComputeRecord` with its device, times, name and counts."""
    def f(x):
        sim.compute(flops=2e6, bytes_accessed=1e5, name="matmul")  # 2 us (the bytes take 1 us)
        sim.compute(seconds=3e-6)
        return x

    run = _mapped(f, 2).run(np.zeros(2))
    assert run.end_time_s == pytest.approx(5e-6)
    mine = [c for c in run.trace.computes if c.device == 1]
    assert [(c.name, c.start_s, c.end_s, c.flops, c.bytes_accessed) for c in mine] == [
        ("matmul", 0.0, pytest.approx(2e-6), 2e6, 1e5), ("", pytest.approx(2e-6), pytest.approx(5e-6), 0.0, 0.0)]


def _plain(steps: int, flops: float, n: int):
    def f(x):
        for _ in range(steps):
            x = collectives.ppermute(x, "i", _ring(n))
            sim.compute(flops=flops, name="matmul")
        return x
    return f


def _overlapped(steps: int, flops: float, n: int):
    def f(x):
        for _ in range(steps):
            pending = sim.start(collectives.ppermute, x, "i", _ring(n))
            sim.compute(flops=flops, name="matmul")
            x = pending.result()
        return x
    return f


@pytest.mark.parametrize("flops", [2e6, 20e6])  # math shorter than the messages, then longer
def test_overlap_takes_the_longer_of_math_and_messages(flops):
    """A ring of ppermutes over 4 devices, 3 steps of 8000 bytes (1 us + 8 us on the wire) and `flops` of work
    (2 us or 20 us): plain, a step takes T_comm + T_math; started with `sim.start`, max(T_comm, T_math). Both
    give the same bytes."""
    x = np.arange(4000.0)
    t_comm, t_math = 1e-6 + 8000 / 1e9, flops / 1e12
    plain = _mapped(_plain(3, flops, 4)).run(x)
    over = _mapped(_overlapped(3, flops, 4)).run(x)
    assert plain.end_time_s == pytest.approx(3 * (t_comm + t_math))
    assert over.end_time_s == pytest.approx(3 * max(t_comm, t_math))
    assert over.outputs.tobytes() == plain.outputs.tobytes() == np.roll(x, 3000).tobytes()


def _observed(run: sim.Run) -> tuple:
    """Output bytes, trace JSON and columns, call records and end time of a run."""
    calls = [(c.device, c.collective, c.call, c.members, c.enter_s, c.met_s, c.exit_s, c.algorithm)
             for c in run.simulation.calls]
    columns = {key: np.asarray(value).tolist() for key, value in run.trace.columns().items()}
    return (run.outputs.tobytes(), json.dumps(run.trace.to_json()).encode(), columns, calls, run.end_time_s)


_CALLS = {
    "ppermute": lambda x, n: collectives.ppermute(x, "i", _ring(n)),
    "psum": lambda x, n: collectives.psum(x, "i"),
    "all_gather": lambda x, n: collectives.all_gather(x, "i", tiled=True),
    "psum_scatter": lambda x, n: collectives.all_gather(collectives.psum_scatter(x, "i", tiled=True), "i",
                                                        tiled=True),  # two calls in one lane
    "all_to_all": lambda x, n: collectives.all_to_all(x, "i", 0, 0, tiled=True),
}
_NETWORKS = [sim.Network(1e-6, 1e9), sim.Network(2e-6, 5e9, topology="ring"), sim.Network.switch(1e-6, 1e9),
             sim.Network(1e-6, 1e9, costs=sim.Costs(launch_s=1e-6, efficiency=0.5))]


@st.composite
def _cases(draw):
    n = draw(st.sampled_from([1, 2, 3, 4, 8]))
    names = draw(st.lists(st.sampled_from(sorted(_CALLS)), min_size=1, max_size=3))
    rows = n * draw(st.integers(1, 3))
    dtype = draw(st.sampled_from([np.float32, np.int32, np.float64]))
    return n, names, rows, dtype, draw(st.sampled_from(range(len(_NETWORKS)))), draw(st.integers(0, 3))


def _program(names: list[str], n: int, started: bool, work_s: float, waited: bool = True):
    def f(x):
        for name in names:
            if started:
                pending = sim.start(_CALLS[name], x, n)
                sim.compute(seconds=work_s) if not waited else None
                x = pending.result()
            else:
                x = _CALLS[name](x, n)
                sim.compute(seconds=work_s) if not waited else None
        return x
    return f


@given(_cases())
def test_a_started_call_waited_on_at_once_equals_the_plain_call(case):
    """`sim.start(call).result()` with nothing between is the plain call: the same output bytes, every trace
    column, call records and end time, for every collective drawn, sizes, dtypes, networks and costs."""
    n, names, rows, dtype, network, seed = case
    x = np.random.default_rng(seed).integers(-9, 9, (rows * n, 2)).astype(dtype)
    runs = [_mapped(_program(names, n, started, 0.0), n, _NETWORKS[network], check_vma=False).run(x)
            for started in (False, True)]
    assert _observed(runs[0]) == _observed(runs[1])


def test_the_comparison_tells_overlapped_work_apart():
    """The same comparison with work between the start and the wait (which the started call overlaps) finds
    the times differ while the bytes agree: it can fail."""
    x = np.arange(16.0).reshape(8, 2)
    plain, started = (_mapped(_program(["ppermute", "psum"], 4, s, 5e-6, waited=False), 4, check_vma=False).run(x)
                      for s in (False, True))
    a, b = _observed(plain), _observed(started)
    assert a[0] == b[0] and a != b and b[-1] < a[-1]


def test_a_lanes_work_waits_for_the_programs():
    """A device's compute track runs one piece of work at a time, in the order it was asked for: the program's
    work, asked after the started function's, begins when that has ended; the device's part ends with its
    last lane, though the program never waited on it."""
    def later(x):
        sim.compute(seconds=2e-6, name="lane work")
        return x

    def f(x):
        sim.start(later, x)
        sim.compute(seconds=3e-6, name="program work")
        return x

    run = _mapped(f, 2).run(np.zeros(2))
    mine = sorted((c.start_s, c.end_s, c.name) for c in run.trace.computes if c.device == 0)
    assert mine == [(0.0, pytest.approx(2e-6), "lane work"), (pytest.approx(2e-6), pytest.approx(5e-6), "program work")]
    assert run.end_time_s == pytest.approx(5e-6)


def test_a_pending_result_is_ready_without_waiting_once_done():
    """`Pending.done` turns true when the started call has ended; `result()` then returns at once, and a
    second `result()` gives the same value."""
    seen = []

    def f(x):
        pending = sim.start(collectives.psum, x, "i")
        seen.append(pending.done)
        sim.compute(seconds=1e-3)
        seen.append(pending.done)
        first, again = pending.result(), pending.result()
        assert first is again
        return first

    run = _mapped(f, 2).run(np.array([1.0, 2.0]))
    assert run.outputs.tolist() == [3.0, 3.0] and seen == [False, False, True, True]  # both devices


@pytest.mark.parametrize("call, error, match", [
    (lambda: sim.compute(flops=-1), sim.InvalidArgumentError, "flops=-1 must be a finite number >= 0"),
    (lambda: sim.compute(bytes_accessed="x"), sim.InvalidTypeError, "bytes_accessed='x' must be a number"),
    (lambda: sim.compute(seconds=math.nan), sim.InvalidArgumentError, "seconds=nan must be"),
    (lambda: sim.compute(seconds=1e-6, name=3), sim.InvalidTypeError, "name=3 must be a string"),
    (lambda: sim.start(3), sim.InvalidTypeError, "fn=3 must be callable"),
], ids=["negative-flops", "text-bytes", "nan-seconds", "number-name", "start-not-callable"])
def test_bad_compute_and_start_arguments(call, error, match):
    """Bad arguments to `sim.compute` and `sim.start` inside a program raise with the value, noted with the
    device."""
    with pytest.raises(error, match=match):
        _mapped(lambda x: (call(), x)[1], 2).run(np.zeros(2))


def test_counts_need_a_roofline_and_calls_need_a_program():
    """Work given by counts on a network without a roofline is refused with the remedy; work in seconds runs
    there; both functions refuse to run outside a simulated program."""
    plain = sim.Network(1e-6, 1e9)
    with pytest.raises(sim.InvalidArgumentError, match=r"device 0: the network has no roofline.*seconds="):
        _mapped(lambda x: (sim.compute(flops=1e6), x)[1], 2, plain).run(np.zeros(2))
    assert _mapped(lambda x: (sim.compute(seconds=1e-6), x)[1], 2, plain).run(np.zeros(2)).end_time_s == 1e-6
    with pytest.raises(sim.MeshError, match=r"inside a program run by sim\.shard_map"):
        sim.compute(seconds=1.0)
    with pytest.raises(sim.MeshError, match=r"inside a program run by sim\.shard_map"):
        sim.start(print)


def test_a_failure_inside_a_started_call_ends_the_run_naming_the_device():
    """An error raised by the started function (here a collective's own check, after the program went on)
    ends the run, noted with the device."""
    def f(x):
        pending = sim.start(lambda v: (sim.compute(seconds=1e-6), collectives.ppermute(v, "i", [(0, 0), (1, 0)]))[1],
                            x)
        sim.compute(seconds=5e-6)
        return pending.result()

    with pytest.raises(sim.MeshError, match="perm") as caught:
        _mapped(f, 2).run(np.zeros(2))
    assert any("device" in note for note in caught.value.__notes__)


def test_lanes_that_never_meet_are_a_deadlock():
    """A collective started on one device only never meets its group: the run reports a deadlock naming
    what each device waits on, instead of ending quietly."""
    def f(x):
        if collectives.axis_index("i") == 0:
            sim.start(collectives.psum, x, "i")
        return x

    with pytest.raises(sim.ProtocolError, match=r"deadlock[\s\S]*device 0 waits in psum"):
        _mapped(f, 2).run(np.zeros(2))


def _thread_names(events: dict) -> list[str]:
    return [e["args"]["name"] for e in events["traceEvents"] if e.get("name") == "thread_name"]


def test_perfetto_shows_a_compute_and_a_communication_track_per_device():
    """With work charged, every device has a communication track (calls, sends, receives) and a compute track
    (one span per piece of work, with its counts); the overlapped ring's matmul spans lie inside its
    ppermute calls. Without work the tracks are the plain "device N" ones, as before."""
    events = _mapped(_overlapped(2, 20e6, 4)).run(np.arange(4000.0)).trace_events()
    names = _thread_names(events)
    for d in range(4):
        assert f"device {d} compute" in names and f"device {d} communication" in names
    tids = {e["args"]["name"]: e["tid"] for e in events["traceEvents"] if e.get("name") == "thread_name"}
    spans = [e for e in events["traceEvents"] if e.get("ph") == "X"]
    work = [e for e in spans if e["cat"] == "compute" and e["tid"] == tids["device 1 compute"]]
    calls = [e for e in spans if e["cat"] == "collective" and e["tid"] == tids["device 1 communication"]]
    assert [w["name"] for w in work] == ["matmul", "matmul"] and work[0]["args"]["flops"] == 20e6
    assert [(c["ts"], c["dur"]) for c in calls] == [(w["ts"], pytest.approx(9.0)) for w in work]
    assert events["otherData"]["computes"] == 8
    plain = _mapped(lambda x: _CALLS["ppermute"](x, 4)).run(np.arange(8.0)).trace_events()
    assert "device 0" in _thread_names(plain) and "computes" not in plain["otherData"]


@pytest.mark.parametrize("n_cols", [4096, 1024])  # the matmul dominating, then the messages
def test_the_collective_matmul_on_a_preset_meets_its_forms(n_cols):
    """`benchmarks/overlap.py`'s collective matmul on h100-nvlink (4 GPUs, 2 MiB blocks): plain within 10% of
    (n - 1)(T_math + T_comm) + T_math and overlapped of (n - 1) max(T_math, T_comm) + T_math, both forms from
    the preset's own figures; the overlapped one is faster, and the blocks come round the ring."""
    from benchmarks.overlap import row

    result = row("h100-nvlink", 4, 1024, 1024, n_cols)
    assert (result["t_math_s"] > result["t_comm_s"]) == (n_cols == 4096)
    for name in ("plain", "overlapped"):
        assert result[name]["ratio"] == pytest.approx(1.0, rel=0.1)
    assert result["overlapped"]["simulated_s"] < result["plain"]["simulated_s"]


def test_meshsim_trace_of_the_overlap_scenario_has_both_tracks(tmp_path):
    """`meshsim trace` of the library's collective matmul writes every device's compute and communication
    tracks, the matmuls as compute spans."""
    from scenarios.cli import main

    out = tmp_path / "overlap.json"
    assert main(["trace", "--allow-code", "scenarios/library/collective_matmul_overlap.toml", "-o", str(out)]) == 0
    events = json.loads(out.read_text())
    names = _thread_names(events)
    assert {f"device {d} {track}" for d in range(4) for track in ("compute", "communication")} <= set(names)
    assert sum(e.get("name") == "block matmul" for e in events["traceEvents"]) == 16


def test_scenario_files_give_a_roofline_to_any_topology(tmp_path):
    """A `[network]` table takes a device's peak rates beside its links; one of the two required rates alone
    is refused with the rule, at its line."""
    import scenarios

    body = '[mesh]\naxes = {i = 2}\n[collective]\nop = "psum"\naxis_name = "i"\n[inputs]\nseed = 0\nshape = [2]\n'
    path = tmp_path / "rates.toml"
    path.write_text(body + '[network]\ntopology = "switch"\npeak_flops_per_s = 1e15\nmemory_bytes_per_s = 3e12\n'
                    'transcendentals_per_s = 4e12\n')
    assert scenarios.load(path).mesh.network.roofline == sim.Roofline(1e15, 3e12, 4e12)
    path.write_text(body + '[network]\npeak_flops_per_s = 1e15\n')
    with pytest.raises(scenarios.ScenarioError, match="peak_flops_per_s needs both peak_flops_per_s and "
                                                      "memory_bytes_per_s"):
        scenarios.load(path)


def test_the_html_timeline_shows_compute_beside_the_messages():
    """A run's HTML (`Run._repr_html_`, `Run.draw`'s tables) draws each piece of local work as a `compute` bar on
    its device's lane, at its times, under the messages that fly meanwhile; the summary counts the spans."""
    import xml.etree.ElementTree as ET

    def overlapped(x):
        started = sim.start(collectives.ppermute, x, "i", _ring(4))
        sim.compute(seconds=4e-6, name="matmul")
        return started.result()

    run = _mapped(overlapped).run(np.arange(4, dtype=np.float32))
    page = run._repr_html_()
    assert "4 compute spans" in page
    picture = ET.fromstring(page[page.index("<svg"):page.index("</svg>") + 6])
    rects = [r for r in picture.iter("{http://www.w3.org/2000/svg}rect") if r.get("class") == "compute"]
    assert len(rects) == 4 and all("computes matmul from 0 s to 4 us" in r.findtext(
        "{http://www.w3.org/2000/svg}title") for r in rects)
    messages = [r for r in picture.iter("{http://www.w3.org/2000/svg}rect") if r.get("class") == "message"]
    starts = sorted(float(r.get("x")) for r in messages)
    assert float(rects[0].get("x")) <= starts[0] < float(rects[0].get("x")) + float(rects[0].get("width"))
