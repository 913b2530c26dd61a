"""The scenario library: a file for every registered collective, and teaching programs that do what they say.

Collective files are checked against the executable spec (`oracles.spec`, numpy), which never calls the
simulator. Each teaching program's result is checked for the property its description claims, computed
from its arguments with numpy alone.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
from strategies import Case, differences, run_spec

import collectives
import scenarios
import sim

LIBRARY = Path(__file__).resolve().parents[1] / "scenarios" / "library"
FILES = sorted(LIBRARY.glob("*.toml"))
PROGRAM_FILES = [p for p in FILES if "program" in tomllib.loads(p.read_text())]
COLLECTIVE_FILES = [p for p in FILES if p not in PROGRAM_FILES]


def _run(name: str) -> scenarios.ProgramResult:
    """The forward outputs of the teaching program `name`, with the scenario's arguments."""
    return scenarios.run(scenarios.load(LIBRARY / name))


def _args(name: str) -> tuple[np.ndarray, ...]:
    return scenarios.load(LIBRARY / name).args


# ---------------------------------------------------------------------------------------------- collectives


def test_every_registered_collective_has_a_scenario_file():
    """Each collective of `collectives.REGISTRY` is the `op` of at least one file of the library."""
    ops = {scenarios.load(path).op for path in COLLECTIVE_FILES}
    missing = set(collectives.REGISTRY) - ops
    assert not missing, f"no scenario file in scenarios/library/ calls {sorted(missing)}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_file_has_a_title_and_a_description_for_learners(path):
    """Every library file gives its own `title` and a `description` of a few sentences."""
    data = tomllib.loads(path.read_text())
    assert data.get("title") and len(data.get("description", "")) >= 30, path.name


def _case(scenario: scenarios.Scenario) -> Case:
    """The scenario as a spec case: every device's arrays and the parameters `jax.lax` takes (not
    `algorithm`, the simulator's choice of messages, which the value does not depend on)."""
    d = scenario.definition
    args = tuple(tuple(scenario.inputs[i][name] for i in scenario.mesh.devices) for name in d.arrays)
    params = {k: v for k, v in scenario.params.items() if d.param(k).jax}
    return Case(scenario.op, dict(scenario.mesh.shape), args, params)


@pytest.mark.parametrize("path", COLLECTIVE_FILES, ids=lambda p: p.stem)
def test_collective_file_runs_and_equals_the_spec(path):
    """Every collective file loads, runs, and gives the executable spec's result on every device, bit for bit;
    the simulated time is the last arrival (0 when no message is sent)."""
    scenario = scenarios.load(path)
    result = scenarios.run(scenario)
    found = differences(run_spec(_case(scenario)), list(result.outputs), "spec", "scenario")
    assert not found, "\n".join(found)
    assert result.end_time_s == max((m.arrival_time_s for m in result.trace), default=0)


# ---------------------------------------------------------------------------------------------- teaching


def test_moe_round_trip_brings_every_token_home():
    """Dispatch then combine gives back the input exactly; each expert's buffer holds the tokens routed to
    it, packed in sender order, then zeros (the packing computed here from send_sizes with numpy)."""
    result = _run("moe_round_trip.toml")
    tokens, send_sizes = _args("moe_round_trip.toml")
    experts, home = result.forward.outputs
    np.testing.assert_array_equal(home, tokens)
    tokens, sizes = tokens.reshape(4, 6, -1), send_sizes.reshape(4, 4)
    starts = np.cumsum(sizes, axis=1) - sizes
    for e, buffer in enumerate(experts.reshape(4, 8, -1)):
        routed = [tokens[d, starts[d, e]:starts[d, e] + sizes[d, e]] for d in range(4)]
        want = np.concatenate(routed + [np.zeros((8 - sizes[:, e].sum(), tokens.shape[2]), tokens.dtype)])
        np.testing.assert_array_equal(buffer, want)
    assert (sizes == 0).any() and result.adjoint is not None and np.isclose(*result.adjoint, rtol=1e-5)


def test_halo_exchange_fetches_the_neighbours_edge_rows():
    """Each device's padded block is its left neighbour's last row, its own rows, its right neighbour's
    first row (on a ring); the local stencil equals the periodic stencil of the whole grid."""
    (grid,) = _args("halo_exchange.toml")
    padded, stencil = _run("halo_exchange.toml").forward.outputs
    blocks, padded = grid.reshape(4, 4, -1), padded.reshape(4, 6, -1)
    for d in range(4):
        np.testing.assert_array_equal(padded[d, 0], blocks[(d - 1) % 4, -1])
        np.testing.assert_array_equal(padded[d, 1:5], blocks[d])
        np.testing.assert_array_equal(padded[d, 5], blocks[(d + 1) % 4, 0])
    whole = (np.roll(grid, 1, axis=0) + 2 * grid + np.roll(grid, -1, axis=0)) / 4
    np.testing.assert_allclose(stencil, whole, rtol=1e-6)


def test_data_parallel_gradient_is_the_full_batch_gradient():
    """The pmean of the devices' local gradients equals X^T (X w - y) / N over the whole batch, and the
    averaged loss the full-batch loss, computed here in float64."""
    x, y, w = (a.astype(np.float64) for a in _args("data_parallel_gradient.toml"))
    grad, loss = _run("data_parallel_gradient.toml").forward.outputs
    error = x @ w - y
    np.testing.assert_allclose(grad, x.T @ error / len(y), rtol=1e-5)
    np.testing.assert_allclose(loss, np.mean(error**2) / 2, rtol=1e-5)
    assert grad.shape == w.shape and loss.shape == ()


def test_ulysses_reshards_by_head_and_back():
    """The head-sharded activations, read as one global array, equal the input, and device j holds every
    position of head j; the round trip equals the input."""
    (x,) = _args("ulysses_all_to_all.toml")
    result = _run("ulysses_all_to_all.toml")
    by_head, by_sequence = result.forward.outputs
    np.testing.assert_array_equal(by_head, x)
    np.testing.assert_array_equal(by_sequence, x)
    heads = x[:, :, 0] % 100 // 10
    assert heads.tolist() == [[0, 1, 2, 3]] * 8  # element [s, h, f] names its head
    assert result.no_growth and np.isclose(*result.adjoint, rtol=1e-5)


def test_pipeline_output_is_the_sequential_composition():
    """The last stage's block holds, for each microbatch, tanh(... tanh(x W0) ... W3), the stages applied in
    turn (numpy, float64)."""
    microbatches, weights = (a.astype(np.float64) for a in _args("pipeline_ppermute.toml"))
    out = _run("pipeline_ppermute.toml").forward.outputs.reshape(4, 4, 2, 3)
    want = microbatches
    for w in weights:
        want = np.tanh(want @ w)
    np.testing.assert_allclose(out[3], want, rtol=1e-5, atol=1e-6)


def test_collective_matmul_overlaps_the_ring_with_the_matmul():
    """Every device ends with (the sum of the four row blocks) @ w, and the run takes 3 overlapped steps of
    max(T_math, T_comm) and a last matmul, the description's 17.94 us, from the preset's own figures."""
    x, w = (a.astype(np.float64) for a in _args("collective_matmul_overlap.toml"))
    result = _run("collective_matmul_overlap.toml").forward
    want = x.reshape(4, 256, 1024).sum(0) @ w
    np.testing.assert_allclose(result.outputs.reshape(4, 256, 2048), np.broadcast_to(want, (4, 256, 2048)),
                               rtol=1e-4, atol=1e-3)
    network = sim.Network.preset("h100-nvlink", (4,))
    t_math = network.roofline.seconds(2.0 * 256 * 1024 * 2048, 4.0 * (256 * 1024 + 1024 * 2048 + 256 * 2048))
    t_comm = network.latency_s + network.costs.wire_bytes(256 * 1024 * 4) / network.bandwidth_bytes_per_s
    assert result.end_time_s == pytest.approx(3 * max(t_math, t_comm) + t_math) == pytest.approx(17.94e-6, abs=1e-8)


TEACHING = {  # each teaching program and the test above that checks what its description claims
    "collective_matmul_overlap.toml": test_collective_matmul_overlaps_the_ring_with_the_matmul,
    "moe_round_trip.toml": test_moe_round_trip_brings_every_token_home,
    "halo_exchange.toml": test_halo_exchange_fetches_the_neighbours_edge_rows,
    "data_parallel_gradient.toml": test_data_parallel_gradient_is_the_full_batch_gradient,
    "ulysses_all_to_all.toml": test_ulysses_reshards_by_head_and_back,
    "pipeline_ppermute.toml": test_pipeline_output_is_the_sequential_composition,
}


def test_every_program_file_is_checked():
    """Each program file of the library is a transposes example (test_program_scenarios.py) or a teaching
    program with its check here."""
    names = {p.name for p in PROGRAM_FILES}
    assert names == {n for n in names if n.startswith("transpose_")} | set(TEACHING)


def test_the_library_page_lists_every_library_file():
    """The library table (docs/reference/library.md) has one row per file of scenarios/library/, each saying
    what it teaches."""
    page = (LIBRARY.parents[1] / "docs" / "reference" / "library.md").read_text()
    for path in sorted(LIBRARY.iterdir()):
        if path.suffix in (".toml", ".py"):
            assert f"| `{path.name}` |" in page, f"docs/reference/library.md: no row for {path.name}"
