"""`meshsim campaign`: generated cases of every collective against the spec and real JAX on a Dask cluster.

A campaign on 2 local workers agrees and counts every case; a worker killed mid-run loses no case;
`--resume` skips the jobs already in results.jsonl; a deliberately wrong simulator on the workers yields a
shrunk scenario file that `meshsim check` replays with exit 1; bad input exits 2 with one message. A
finding's scenario file reads back bit for bit (no JAX), and plain commands never need Hypothesis.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from distributed.diagnostics.plugin import WorkerPlugin
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli_check import _rotated  # all_gather's chunks one place along

import collectives
import collectives._all_gather
import scenarios
from scenarios.campaign import cases, scenario_text
from scenarios.cli import main
from scenarios.fleet import fleet

ROOT = Path(__file__).resolve().parents[1]
OPS = list(collectives.REGISTRY)


class WrongAllGather(WorkerPlugin):
    """Replaces all_gather's protocol with `_rotated` on every worker, and puts it back on teardown."""

    name = "wrong-all-gather"

    def setup(self, worker) -> None:
        self.kept = collectives._all_gather._protocol
        collectives._all_gather._protocol = _rotated(self.kept)

    def teardown(self, worker) -> None:
        collectives._all_gather._protocol = self.kept


@pytest.fixture(scope="module")
def cluster():
    """A local cluster of 2 workers shared by the tests that pass `--scheduler`: (client, address)."""
    with fleet(workers=2) as client:
        yield client, client.scheduler.address


def campaign(capsys, *args: str) -> tuple[int, dict | str, str]:
    """Run `meshsim campaign *args --json`: the exit code, the parsed report (or stdout) and stderr."""
    code = main(["campaign", *args, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else out), err


def records(folder: Path, skip: str = "\0") -> list[dict]:
    """The lines of a campaign's results.jsonl, but those starting with `skip`."""
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()
            if not line.startswith(skip)]


@pytest.mark.differential
def test_a_small_campaign_on_two_workers_agrees_and_counts_every_case(capsys, tmp_path):
    """Every collective, 3 cases each, on a local cluster of 2 workers: all agree, exit 0, the report counts
    3 cases and 3 agreements per collective, and results.jsonl holds one record per job from both workers."""
    code, report, _ = campaign(capsys, "--cases", "3", "--workers", "2", "-o", str(tmp_path))
    assert code == 0
    assert [row["op"] for row in report["rows"]] == OPS
    assert all((row["cases"], row["agree"], row["findings"]) == (3, 3, 0) for row in report["rows"])
    lines = records(tmp_path)
    assert sorted(r["op"] for r in lines) == sorted(OPS)
    assert len({r["worker"] for r in lines}) == 2
    assert not list((tmp_path / "findings").iterdir())


@pytest.mark.differential
def test_a_worker_killed_mid_run_loses_no_case(capsys, tmp_path, cluster):
    """One of the 2 workers is killed after the first job's record is written: every job still reports, and
    the totals count every case of every collective."""
    client, address = cluster
    victim = next(iter(client.run(os.getpid).values()))
    killed_at: list[int] = []

    def kill_after_first_record() -> None:
        path = tmp_path / "results.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (path.exists() and path.read_text().count("\n")):
            time.sleep(0.02)
        killed_at.append(path.read_text().count("\n") if path.exists() else -1)
        os.kill(victim, signal.SIGKILL)

    watcher = threading.Thread(target=kill_after_first_record, daemon=True)
    watcher.start()
    code, report, _ = campaign(capsys, "--cases", "2", "--scheduler", address, "-o", str(tmp_path))
    watcher.join()
    assert code == 0 and 0 < killed_at[0] < len(OPS)
    assert [(row["op"], row["cases"], row["agree"]) for row in report["rows"]] == [(op, 2, 2) for op in OPS]
    assert sorted(r["key"] for r in records(tmp_path)) == sorted({r["key"] for r in records(tmp_path)})
    assert len(records(tmp_path)) == len(OPS)
    assert victim not in client.run(os.getpid).values()


@pytest.mark.differential
def test_resume_skips_done_jobs_and_reruns_only_the_rest(capsys, tmp_path, cluster):
    """A campaign of 2 chunks per collective; with two records removed, `--resume` runs exactly those two
    jobs again (same seeds, same counts), and a rerun without `--resume` is refused with exit 2."""
    _, address = cluster
    args = ("--ops", "psum", "ppermute", "--cases", "14", "--scheduler", address, "-o", str(tmp_path))
    code, first, _ = campaign(capsys, *args)
    assert code == 0 and first["jobs"] == 4 and first["resumed_jobs"] == 0
    kept = records(tmp_path)
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept[:2]) + '{"cut sh')
    code, again, _ = campaign(capsys, *args, "--resume")
    assert code == 0 and again["resumed_jobs"] == 2
    assert again["rows"] == first["rows"]
    rerun = {r["key"]: (r["seed"], r["cases"]) for r in records(tmp_path, skip='{"cut sh')}
    assert len(records(tmp_path, skip='{"cut sh')) == 4
    assert rerun == {r["key"]: (r["seed"], r["cases"]) for r in kept}
    code, _, err = campaign(capsys, *args)
    assert code == 2 and "results.jsonl already holds a campaign's results; add --resume" in err


@pytest.mark.differential
def test_a_wrong_simulator_is_found_shrunk_saved_and_replayed(capsys, monkeypatch, tmp_path, cluster):
    """With all_gather's protocol wrong on the workers, the campaign exits 1 with a finding: a small
    scenario file, replayed on the worker as differing, that `meshsim check` replays with exit 1 under the
    same wrong protocol (and exit 0 under the right one: the file is a valid, agreeing case)."""
    client, address = cluster
    client.register_plugin(WrongAllGather())
    try:
        code, report, _ = campaign(capsys, "--ops", "all_gather", "psum", "--cases", "10", "--scheduler",
                                   address, "-o", str(tmp_path))
    finally:
        client.unregister_worker_plugin(WrongAllGather.name)
    assert code == 1
    assert {row["op"]: row["findings"] for row in report["rows"]} == {"all_gather": 1, "psum": 0}
    (path, replay), = report["findings"].items()
    assert replay == "differs" and Path(path).parent == tmp_path / "findings"
    scenario = scenarios.load(path)
    assert scenario.mesh.size == 2 and all(x.size <= 2 for x in scenario.inputs[0].values())
    monkeypatch.setattr(collectives._all_gather, "_protocol", _rotated(collectives._all_gather._protocol))
    assert main(["check", path]) == 1
    assert "DIFFER" in capsys.readouterr().out
    monkeypatch.undo()
    assert main(["check", path]) == 0


KNOWN_IDS = set(re.findall(r'^    "([a-z0-9-]+)":', (ROOT / "oracles" / "_rules.py").read_text(), flags=re.M))


@pytest.mark.differential
def test_jax_rules_kinds_run_on_the_workers(capsys, tmp_path, cluster):
    """`--kinds transpose vmap` on 2 workers: each collective's rows of both kinds count every program as
    agreeing or as a known disagreement of FINDINGS.md (by its id), nothing new, exit 0; each worker's
    records come from its own long-lived rules worker."""
    _, address = cluster
    code, report, _ = campaign(capsys, "--ops", "psum_scatter", "ragged_all_to_all", "pmax", "--kinds", "transpose",
                               "vmap", "--cases", "6", "--scheduler", address, "-o", str(tmp_path))
    assert code == 0, report
    # pmax is not linear: it has no transpose row
    assert [(row["op"], row["kind"]) for row in report["rows"]] == [
        ("psum_scatter", "transpose"), ("ragged_all_to_all", "transpose"),
        ("psum_scatter", "vmap"), ("ragged_all_to_all", "vmap"), ("pmax", "vmap")]
    for row in report["rows"]:
        assert row["cases"] == 6 and row["agree"] + row["known"] == 6 and row["findings"] == 0, row
        assert set(row["known_ids"]) <= KNOWN_IDS
    assert {r["kind"] for r in records(tmp_path)} == {"transpose", "vmap"}


@pytest.mark.differential
def test_vma_and_partial_manual_kinds_run_on_the_workers(capsys, tmp_path, cluster):
    """`--kinds vma partial_manual` on 2 workers: `--ops` names jax.lax primitives (vma) and collectives
    (partial_manual); each row counts its programs as agreeing or known (argsort's FINDINGS.md 4 among them,
    by id), nothing new, exit 0."""
    _, address = cluster
    code, report, _ = campaign(capsys, "--ops", "argsort", "dot_general", "psum", "--kinds", "vma", "partial_manual",
                               "--cases", "4", "--scheduler", address, "-o", str(tmp_path))
    assert code == 0, report
    assert [(row["op"], row["kind"]) for row in report["rows"]] == [
        ("argsort", "vma"), ("dot_general", "vma"), ("psum", "partial_manual")]
    for row in report["rows"]:
        assert row["cases"] == 4 and row["agree"] + row["known"] == 4 and row["findings"] == 0, row
        assert set(row["known_ids"]) <= KNOWN_IDS
    assert "argsort-typed-invariant" in report["rows"][0]["known_ids"]


def test_forward_rules_kinds_run_on_the_workers(capsys, tmp_path, cluster):
    """`--kinds jvp compose control_flow` on 2 workers: jvp and compose rows for a linear collective only,
    control_flow for every collective with arrays; every program agrees or is a known disagreement, exit 0."""
    _, address = cluster
    code, report, _ = campaign(capsys, "--ops", "psum", "pmax", "--kinds", "jvp", "compose", "control_flow",
                               "--cases", "3", "--scheduler", address, "-o", str(tmp_path))
    assert code == 0, report
    assert [(row["op"], row["kind"]) for row in report["rows"]] == [
        ("psum", "jvp"), ("psum", "compose"), ("psum", "control_flow"), ("pmax", "control_flow")]
    for row in report["rows"]:
        assert row["cases"] == 3 and row["agree"] + row["known"] == 3 and row["findings"] == 0, row
    assert {r["kind"] for r in records(tmp_path)} == {"jvp", "compose", "control_flow"}


class NewRuleDisagreement(WorkerPlugin):
    """Stands in for the rules worker on every Dask worker: every search reports one known disagreement
    and one new one, so the test sees how the campaign records and saves them (no JAX needed)."""

    name = "new-rule-disagreement"

    class Fake:
        cpu_seconds = 0.0

        def stop(self) -> None:
            pass

        def ask(self, request: dict) -> dict:
            return {"op": request["op"], "kind": request["kind"], "examples": request["examples"] + 5,
                    "known": {"untiled-psum-scatter-vmap-axis": 1}, "shown": {},
                    "new": [f"Disagreement: {request['op']} {request['kind']}: the program\nand its answers"],
                    "seconds": 0.1}

    def setup(self, worker) -> None:
        import scenarios.campaign._rules_jobs as jobs

        self.kept, jobs.WORKER = jobs.WORKER, self.Fake()

    def teardown(self, worker) -> None:
        import scenarios.campaign._rules_jobs as jobs

        jobs.WORKER = self.kept


def test_a_new_rule_disagreement_is_saved_and_exits_1(capsys, tmp_path, cluster):
    """A new disagreement of JAX's rule (from a stand-in rules worker) is saved as findings/OP-KIND-HASH.txt
    with the shrunk program, counted once per collective next to the known one, and the campaign exits 1;
    the cases counted stop at the job's size (Hypothesis's shrinking runs are not cases)."""
    client, address = cluster
    client.register_plugin(NewRuleDisagreement())
    try:
        code, report, _ = campaign(capsys, "--ops", "psum", "--kinds", "transpose", "--cases", "4", "--scheduler",
                                   address, "-o", str(tmp_path))
    finally:
        client.unregister_worker_plugin(NewRuleDisagreement.name)
    assert code == 1
    [row] = report["rows"]
    assert (row["kind"], row["cases"], row["agree"], row["known"], row["findings"]) == ("transpose", 4, 2, 1, 1)
    (path, _), = report["findings"].items()
    assert re.fullmatch(r"psum-transpose-[0-9a-f]{12}\.txt", Path(path).name)
    assert "Disagreement: psum transpose: the program\nand its answers" in Path(path).read_text()


@pytest.mark.parametrize("args, message", [
    (["--ops", "psum", "pfoo"], r"--ops 'pfoo' is not a registered collective; it must be one of all_gather, "),
    (["--cases", "0"], r"--cases='0' must be a positive integer"),
    (["--cases", "ten"], r"--cases='ten' must be a positive integer"),
    (["--seed", "-1"], r"--seed='-1' must be an integer >= 0"),
    (["--workers", "0"], r"--workers='0' must be a positive integer"),
    (["--workers", "2", "--scheduler", "tcp://127.0.0.1:9"], r"--workers=2 applies to a local cluster"),
    (["--scheduler", "tcp://127.0.0.1:9"], r"cannot reach the Dask scheduler scheduler='tcp://127.0.0.1:9'"),
], ids=["unknown collective", "zero cases", "cases not a number", "negative seed", "zero workers",
        "workers with a scheduler", "unreachable scheduler"])
def test_bad_input_exits_2_with_one_message(args, message, capsys, tmp_path, monkeypatch):
    """Each bad argument exits 2 with one `meshsim: error:` line naming the argument and the rule."""
    monkeypatch.setattr("scenarios.fleet._fleet.CONNECT_TIMEOUT_S", 2)  # the unreachable scheduler's wait
    assert main(["campaign", *args, "-o", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("meshsim: error: ") and err.count("meshsim: error:") == 1
    assert re.search(message, err), err


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_a_finding_file_reads_back_bit_for_bit(data, tmp_path_factory):
    """Any generated case of any collective, written as a scenario file, loads back with the same mesh,
    parameters, dtypes, shapes and bytes on every device (bfloat16, NaN payloads, -0.0 and empty arrays
    included)."""
    # precv's drawn calls leave out its out_shape (what its partner psend sends decides it): psend's stand
    alone = [op for op in OPS if collectives.definition(op).partner is None]
    case = data.draw(cases(data.draw(st.sampled_from(alone), label="op")), label="case")
    path = tmp_path_factory.mktemp("finding") / "case.toml"
    path.write_text(scenario_text(case, "round trip", ["a note"]), encoding="utf-8")
    scenario = scenarios.load(path)
    assert dict(scenario.mesh.shape) == case.mesh_shape
    assert dict(scenario.params) == {
        k: collectives.definition(case.op).param(k).from_toml(v) if k == "perm" else v
        for k, v in case.params.items() if v is not None}
    for k, name in enumerate(collectives.definition(case.op).arrays):
        for d in range(case.devices):
            want, got = np.asarray(case.args[k][d]), scenario.inputs[d][name]
            assert (got.dtype, got.shape, got.tobytes()) == (want.dtype, want.shape, want.tobytes())


@pytest.mark.parametrize("value, message", [
    ('{bits = ["0x3f80"]}', r"\{bits = \[...\]\} needs \[inputs\] dtype"),
    ('{bits = ["3f80"]}', r"bits must be a rectangular array of hex strings of at most 2 bytes each"),
    ('{bits = ["0x1ffff"]}', r"at most 2 bytes each \(dtype=float16\)"),
])
def test_bad_bits_literals_are_refused(value, message, tmp_path):
    """`{bits = [...]}` needs a dtype and hex strings that fit its width; anything else is a ScenarioError."""
    dtype = "" if "needs" in message else '[inputs]\ndtype = "float16"\n'
    path = tmp_path / "bits.toml"
    path.write_text(f'[mesh]\naxes = {{x = 1}}\n[collective]\nop = "psum"\naxis_name = "x"\n{dtype}'
                    f"[[device]]\nx = {value}\n", encoding="utf-8")
    with pytest.raises(scenarios.ScenarioError, match=message):
        scenarios.load(path)


def test_plain_commands_never_import_hypothesis():
    """`meshsim run` and `meshsim campaign --help` work where Hypothesis cannot be imported: only a running
    campaign needs it."""
    code = ("import sys; sys.modules['hypothesis'] = None; from scenarios.cli import main; "
            "assert main(['run', 'scenarios/library/psum_ring.toml']) == 0; main(['campaign', '--help'])")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert "--resume" in done.stdout


def test_a_worker_without_jax_is_a_clear_error(monkeypatch):
    """A job on a worker whose Python cannot import jax stops with a MeshError naming the worker and the
    extras to install, instead of counting every case as a disagreement (`main` turns it into exit 2)."""
    import importlib.util

    from scenarios.campaign import WorkerSetupError, run_chunk

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jax" else real(name, *a))
    with pytest.raises(WorkerSetupError, match=r"Dask worker .*:\d+ \(.*\) cannot import jax; .*'\.\[jax,dask\]'"):
        run_chunk("psum", 1, 0)


def test_an_index_dtype_other_than_int32_or_int64_is_refused(tmp_path):
    """`[inputs] index_dtype` takes the two dtypes JAX's offsets and sizes come in, and names the rule."""
    path = tmp_path / "index.toml"
    path.write_text('[mesh]\naxes = {x = 1}\n[collective]\nop = "psum"\naxis_name = "x"\n[inputs]\n'
                    'index_dtype = "int16"\n[[device]]\nx = [1]\n', encoding="utf-8")
    with pytest.raises(scenarios.ScenarioError, match=r"index.toml:\d+: \[inputs\] index_dtype='int16' must be "
                                                      r"'int32' or 'int64'"):
        scenarios.load(path)
