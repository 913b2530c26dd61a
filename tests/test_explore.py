"""Arrival-order exploration: `sim.Perturbation`, `sim.explore`, `shard_map(explore_orders=)` and
`meshsim run --explore-orders`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import collectives
import scenarios
import sim
from scenarios.cli import main
from sim import P

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = sorted((ROOT / "scenarios" / "library").glob("*.toml"))

# Devices 1 and 2 each send two rows to rows [0, 2) of device 0's output: undefined in JAX, refused by a
# normal run; under exploration the last arrival wins, and which one arrives last depends on the order.
RACE = """title = "two senders, one set of rows"
[mesh]
axes = {x = 3}
[collective]
op = "ragged_all_to_all"
axis_name = "x"
[[device]]
operand = [0, 0]
output = [0, 0]
input_offsets = [0, 0, 0]
send_sizes = [0, 0, 0]
output_offsets = [0, 0, 0]
recv_sizes = [0, 2, 2]
[[device]]
operand = [10, 11]
output = [0, 0]
input_offsets = [0, 0, 0]
send_sizes = [2, 0, 0]
output_offsets = [0, 0, 0]
recv_sizes = [0, 0, 0]
[[device]]
operand = [20, 21]
output = [0, 0]
input_offsets = [0, 0, 0]
send_sizes = [2, 0, 0]
output_offsets = [0, 0, 0]
recv_sizes = [0, 0, 0]
"""


def _race() -> tuple[sim.ShardMapped, tuple[np.ndarray, ...]]:
    """The same race through the Python API: devices 1 and 2 write rows [0, 2) of device 0's output."""
    def body(*arrays):
        return collectives.ragged_all_to_all(*arrays, axis_name="x")

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 3}), in_specs=(P("x"),) * 6, out_specs=P("x"))
    sends = np.array([0, 0, 0, 2, 0, 0, 2, 0, 0])
    recvs = np.array([0, 2, 2, 0, 0, 0, 0, 0, 0])
    return f, (np.array([0, 0, 10, 11, 20, 21]), np.zeros(6, int), np.zeros(9, int), sends, np.zeros(9, int), recvs)


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.stem)
def test_every_library_scenario_is_order_independent(path):
    """Every shipped TOML scenario (each collective, each program) gives the same bytes under the default
    order and 5 seeded perturbations: the protocols write each message to its own place."""
    report = scenarios.explore(scenarios.load(str(path)), orders=5, seed=0)
    assert report.independent, str(report)
    assert str(report) == "order-independent over 6 orders (the default and seeds 0..4)"


def test_race_is_found_with_its_rows_and_two_orders():
    """Two senders writing the same rows: the report names the output, the device, the rows, both values
    and the two orders; every seed lands in one of the two results."""
    f, args = _race()
    report = sim.explore(f, *args, orders=8, seed=0)
    assert not report.independent
    [difference] = report.differences
    assert difference.first is None and difference.error is None
    [rows] = difference.rows
    assert (rows.output, rows.devices, rows.rows) == ("out", (0,), ((0, 2),))
    assert {tuple(rows.first), tuple(rows.second)} == {(10, 11), (20, 21)}
    changed = {difference.second, *difference.same_as_second}
    assert changed and changed < set(report.seeds)
    assert f"seed {difference.second}" in str(report) and "rows [0, 2)" in str(report)


def test_shard_map_explore_orders_attaches_the_report():
    """`shard_map(..., explore_orders=N, seed=S)` runs seeds S..S+N-1 and puts the report in `order_report`;
    its outputs are the default order's."""
    f, args = _race()
    g = sim.shard_map(f.f, mesh=f.mesh, in_specs=f.in_specs, out_specs=f.out_specs, explore_orders=8, seed=3)
    run = g.run(*args)
    assert run.order_report.seeds == tuple(range(3, 11)) and not run.order_report.independent
    assert g.last_run is run and run.outputs.tolist()[:2] == run.order_report.run.outputs.tolist()[:2]


def test_default_run_still_refuses_overlapping_rows():
    """Without exploration, overlapping ragged writes stay an error naming both slices and the rows."""
    f, args = _race()
    with pytest.raises(sim.InvalidArgumentError, match=r"overlap in rows \[0, 2\)"):
        f(*args)


def test_shared_python_state_between_devices_is_found():
    """A program whose devices share a Python list depends on the order in which simultaneous devices run:
    the shuffled tie-breaks find it, the result of a device differing between orders."""
    started: list[int] = []

    def body(x):
        started.append(int(x[0]))
        out = x * 0 + len(started) % 4  # the how-many-th device to start, in this run
        return collectives.psum(x, "x") * 0 + out

    f = sim.shard_map(body, mesh=sim.Mesh({"x": 4}), in_specs=P("x"), out_specs=P("x"), check_vma=False)
    report = sim.explore(f, np.arange(4), orders=6, seed=0)
    assert not report.independent
    assert all(r.output == "out" for d in report.differences for r in d.rows)


def test_a_perturbation_is_deterministic_for_its_seed():
    """The same seed gives the same trace and the same report; another seed moves the arrival times."""
    path = str(ROOT / "scenarios" / "library" / "moe_dispatch.toml")
    f, args = scenarios._runner.mapped_call(scenarios.load(path))

    def arrivals(seed):
        return f.run_with(args, perturbation=sim.Perturbation(seed)).trace.columns()["arrival_time_s"].tolist()

    assert arrivals(4) == arrivals(4) and arrivals(4) != arrivals(5)
    race, race_args = _race()
    assert sim.explore(race, *race_args, orders=6, seed=2) == sim.explore(race, *race_args, orders=6, seed=2)


def test_a_perturbation_only_stretches_flights():
    """Every message of a perturbed run arrives no earlier, and no more than 1 + spread times its flight
    later, than in the default run; messages to oneself stay instantaneous."""
    f, args = scenarios._runner.mapped_call(scenarios.load(str(ROOT / "scenarios" / "library" / "moe_dispatch.toml")))
    base = f.run_with(args).trace.columns()
    perturbed = f.run_with(args, perturbation=sim.Perturbation(1, spread=0.5)).trace.columns()
    flight = base["arrival_time_s"] - base["send_time_s"]
    stretched = perturbed["arrival_time_s"] - perturbed["send_time_s"]
    assert np.all(stretched >= flight) and np.all(stretched <= 1.5 * flight + 1e-15)
    assert np.all(stretched[base["src"] == base["dst"]] == 0)


# Trace digests of the default runs, taken before perturbations existed: a default run takes none of their
# paths. (A deliberate change to what a trace records updates these digests.)
_DIGESTS = {
    "moe_dispatch": "b04bbee13cfd6912f81af758ac5439ccabe6996aae53e72db6c4f51efac60448",
    "psum_ring": "cec3063a28de9ab4bde82f2760ac3ba1e15b394a62f40d77e380b4189a145792",
    "all_to_all_seeded": "0bd65f94b94e4f4ef19229c4a3a9902475b60842f3f655e327e1b4431734f0db",
}


@pytest.mark.parametrize("name", sorted(_DIGESTS))
def test_default_runs_are_unchanged(name):
    """Without a perturbation, a run's trace is byte for byte what it was before exploration existed."""
    result = scenarios.run(scenarios.load(str(ROOT / "scenarios" / "library" / f"{name}.toml")))
    payload = json.dumps([m.to_dict() for m in result.run.trace], sort_keys=True)
    assert hashlib.sha256(payload.encode()).hexdigest() == _DIGESTS[name]


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda f, a: sim.explore(f, *a, orders=0), sim.InvalidArgumentError, r"orders=0 must be >= 1"),
    (lambda f, a: sim.explore(f, *a, orders=2.5), sim.InvalidTypeError, r"orders=2.5 must be an integer"),
    (lambda f, a: sim.explore(f, *a, seed=-1), sim.InvalidArgumentError, r"seed=-1 must be >= 0"),
    (lambda f, a: sim.explore(f, *a, spread=-1.0), sim.InvalidArgumentError, r"spread=-1.0 must be"),
    (lambda f, a: sim.shard_map(f.f, mesh=f.mesh, in_specs=f.in_specs, out_specs=f.out_specs, explore_orders=-2),
     sim.InvalidArgumentError, r"orders=-2 must be >= 0"),
], ids=["explore(orders=0)", "explore(orders=2.5)", "explore(seed=-1)", "explore(spread=-1.0)",
        "shard_map(explore_orders=-2)"])
def test_bad_exploration_arguments(call, error, match):
    """Bad orders, seeds and spreads are refused eagerly, echoing the value and the rule."""
    f, args = _race()
    with pytest.raises(error, match=match):
        call(f, args)


def test_cli_reports_the_race_and_exits_1(tmp_path, capsys):
    """`meshsim run --explore-orders N` prints the rows and the two orders and exits 1; an order-independent
    scenario prints so and exits 0; a normal run of the race exits 2."""
    path = tmp_path / "race.toml"
    path.write_text(RACE)
    assert main(["run", str(path), "--explore-orders", "8"]) == 1
    out = capsys.readouterr().out
    assert "order-dependent" in out and "out on device 0, rows [0, 2)" in out and "the default order and seed" in out
    assert main(["run", str(path), "--explore-orders", "8", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["differences"][0]["rows"][0]["rows"] == [[0, 2]]
    assert main(["run", str(ROOT / "scenarios" / "library" / "ragged_docs_example.toml"),
                 "--explore-orders", "3", "--explore-seed", "7"]) == 0
    assert "order-independent over 4 orders (the default and seeds 7..9)" in capsys.readouterr().out
    assert main(["run", str(path)]) == 2


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_cli_refuses_bad_order_counts(value, capsys):
    """`--explore-orders` must be a whole number >= 1 (argparse exits 2 naming it)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "scenarios/library/ragged_docs_example.toml", "--explore-orders", value])
    assert exit_info.value.code == 2
    assert "--explore-orders" in capsys.readouterr().err
