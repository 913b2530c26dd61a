"""A differential campaign: generated cases of each collective, simulator against spec against real JAX, on Dask.

`plan` splits N cases per collective into `Job`s of at most `CHUNK_CASES` cases. Each job is one
Hypothesis run of `scenarios.campaign._cases.cases(op)` under its own seed, derived from the campaign's seed, the
collective and the chunk's index, so a campaign is reproducible from its seed and a chunk's key names
exactly the cases it runs (a resumed or larger campaign reuses the keys it shares with an earlier one).

`run_chunk` is what a Dask worker runs. It asks the worker process's own long-lived JAX worker
(`worker_oracle()`, started by the first job on that process and reused by the next), which compiles on
one thread, as the Dask worker computes on one (`COMPILE_THREADS`). A case agrees when the simulator's
answer equals the spec's and then JAX's, bit for bit on every device; an exception from any of them is a
disagreement too, but a JAX worker that dies or hangs is not: the job runs once more with a fresh
worker, then is recorded as an error (`scenarios.campaign._attempts`). The first disagreement ends the
chunk: Hypothesis shrinks it to a minimal case, which comes back as the text of a `[collective]` scenario
file, replayed once through the scenario loader and `oracles.check` (as `meshsim check` replays it) to
confirm it still differs. Hypothesis (with `scenarios.campaign._cases`) is imported when a job runs, not
before.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import socket
import sys
import tempfile
import warnings
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import collectives
import oracles
import scenarios
from layouts import MeshError
from oracles._vma_table import VMA_PRIMITIVES
from scenarios._errors import ScenarioError
from scenarios.campaign._answers import Case, differences, run_jax, run_simulator, run_spec
from scenarios.campaign._attempts import JobClock, OracleDown, attempted
from scenarios.campaign._rules_jobs import run_rules_chunk
from scenarios.fleet import COMPILE_THREADS, Job

CHUNK_CASES = 10  # cases per job: a few seconds of work, so a lost worker or a resume redoes little


class Disagreement(MeshError):
    """The simulator, the spec and JAX did not all give the same answer on a case."""


class WorkerSetupError(ScenarioError):
    """A Dask worker cannot run campaign jobs: its Python lacks jax (the `jax` extra)."""


LINEAR = tuple(n for n, d in collectives.REGISTRY.items() if not isinstance(d.transpose, collectives.NotLinear))
BATCHED = tuple(n for n, d in collectives.REGISTRY.items() if d.arrays)
# What each kind checks, and on which collectives: "forward" the simulator against the spec and JAX; the
# rules kinds JAX's own transposes (linear collectives) and batching rules (collectives with arrays), its
# forward mode and compositions of transformations (linear collectives) and control flow (collectives with arrays).
KINDS = {"forward": tuple(collectives.REGISTRY), "transpose": LINEAR, "vmap": BATCHED,
         "jvp": LINEAR, "compose": LINEAR, "control_flow": BATCHED}
# vma: device-variance typing of jax.lax's multi-operand primitives (names, not collectives); partial_manual:
# shard_map manual over part of the mesh against the fully manual program (collectives with arrays)
KINDS.update({"vma": tuple(VMA_PRIMITIVES), "partial_manual": BATCHED})


def plan(ops: Sequence[str], cases: int, seed: int, chunk: int = CHUNK_CASES,
         kinds: Sequence[str] = ("forward",)) -> list[Job]:
    """The jobs of a campaign of `cases` per collective of `ops` and kind of `kinds` (a kind skips the
    collectives it does not apply to), round-robin over the collectives so that slow and quick ones are
    spread over the run."""
    counts = [min(chunk, cases - start) for start in range(0, cases, chunk)]
    return [Job(chunk_key(op, seed, k, count, kind), run_chunk if kind == "forward" else run_rules_chunk,
                (op, count, chunk_seed(op, seed, k, kind)) + (() if kind == "forward" else (kind,)))
            for kind in kinds for k, count in enumerate(counts) for op in ops if op in KINDS[kind]]


def chunk_key(op: str, seed: int, index: int, count: int, kind: str = "forward") -> str:
    """The key of chunk `index` of `op` (and `kind`) in the campaign of `seed`: the same cases every run."""
    return f"{op}{'' if kind == 'forward' else '-' + kind}-seed{seed}-chunk{index}-{count}cases"


def chunk_seed(op: str, seed: int, index: int, kind: str = "forward") -> int:
    """Hypothesis's seed for chunk `index` of `op` in the campaign of `seed` (stable across processes)."""
    salt = [] if kind == "forward" else [zlib.crc32(kind.encode())]
    return int(np.random.SeedSequence([seed, zlib.crc32(op.encode()), index, *salt]).generate_state(1)[0])


def run_chunk(op: str, count: int, seed: int) -> dict[str, Any]:
    """Check `count` generated cases of `op` (Hypothesis seed `seed`) and return the job's record.

    When the JAX worker fails rather than answers (it died, hung past its timeout, broke its pipe: an
    `oracles.OracleFailure`), the job runs once more with a fresh worker, then is an error record
    (`scenarios.campaign._attempts`): a failed oracle is never a finding.

    Returns:
        `{"op", "kind", "seed", "cases", "agree", "known", "findings", "attempts", "seconds", "cpu_seconds",
        "worker"}`, with `retried` (the first failure) after a retry and `error` (both failures, no cases)
        when both attempts failed: `cases` checked before the first disagreement (included), `agree` how
        many agreed, `findings` the shrunk disagreement (at most one) as `{"name", "scenario",
        "differences", "replay"}`, `seconds` the job's wall time and `cpu_seconds` the processor time it
        took in this process and its JAX worker processes (never negative).
    """
    worker = f"{socket.gethostname()}:{os.getpid()}"
    if importlib.util.find_spec("jax") is None:
        raise WorkerSetupError(f"Dask worker {worker} ({sys.executable}) cannot import jax; every worker needs "
                               "meshsim with the jax and dask extras: pip install -e '.[jax,dask]'")
    oracle = worker_oracle()
    clock = JobClock(lambda: oracle.cpu_seconds)
    empty = {"op": op, "kind": "forward", "seed": seed}
    record = attempted(lambda: _checked_chunk(op, count, seed, oracle), restart=oracle.close,
                       failures=(oracles.OracleFailure,), empty=empty)
    return {**empty, **record, **clock.times(), "worker": worker}


def _checked_chunk(op: str, count: int, seed: int, oracle: oracles.JaxOracle) -> dict[str, Any]:
    """One attempt of `run_chunk`: the counts and the finding, if any.

    Raises:
        OracleDown or OracleFailure: the JAX worker failed (during the search, or the finding's replay).
    """
    tally = {"cases": 0, "agree": 0}
    failing: list[tuple[Case, list[str]]] = []

    def agrees(case: Case) -> None:
        try:
            found = verdict(case, oracle)
        except oracles.OracleFailure as failure:
            raise OracleDown(failure) from None
        if not failing:  # after the first disagreement, the calls are Hypothesis shrinking it
            tally["cases"] += 1
            tally["agree"] += not found
        if found:
            failing.append((case, found))
            raise Disagreement("\n".join(found))

    try:
        search(op, count, seed, agrees)
    except Exception:  # Hypothesis re-raises the minimal case's error after shrinking
        if not failing:
            raise
    findings = [finding(op, seed, *failing[-1], oracle)] if failing else []
    return {**tally, "known": {}, "findings": findings}


def worker_oracle() -> oracles.JaxOracle:
    """This Dask worker process's JAX worker, compiling on `COMPILE_THREADS` threads (`oracles.shared_oracle`:
    started on first use, closed when the process exits)."""
    return oracles.shared_oracle(compile_threads=COMPILE_THREADS)


def search(op: str, count: int, seed: int, check: Callable[[Case], None]) -> None:
    """Call `check` on `count` cases of `op` that Hypothesis draws under `seed`; the first one it raises on
    is shrunk (the last call is the minimal case) and its error re-raised."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as seeded
    from hypothesis.errors import HypothesisDeprecationWarning

    from scenarios.campaign._cases import campaign_dtypes, cases

    chosen = settings(max_examples=count, database=None, deadline=None, derandomize=False, print_blob=False,
                      phases=(Phase.generate, Phase.shrink), report_multiple_bugs=False,
                      verbosity=Verbosity.quiet, suppress_health_check=list(HealthCheck))
    test = seeded(seed)(chosen(given(case=cases(op, dtypes=campaign_dtypes(op)))(check)))
    with warnings.catch_warnings():
        # A Dask worker's own threads touch the `random` module while the job generates cases, which
        # Hypothesis would take for a strategy using it; the cases come from Hypothesis's draws only.
        warnings.simplefilter("ignore", HypothesisDeprecationWarning)
        test()


def verdict(case: Case, oracle: Any) -> list[str]:
    """The differences between the simulator, the spec and JAX on `case` (empty when all agree).

    The simulator is compared with the spec first and JAX is asked only when they agree: a wrong simulator
    is then shrunk without a JAX compile per attempt. An exception from any of them is a difference, JAX's
    included (`oracles.OracleError`: JAX rejected the case), but not the JAX worker's own failure.

    Raises:
        OracleFailure: the JAX worker died, hung or broke its pipe; it gave no answer to compare.
    """
    answers = {}
    for name, answer in (("spec", lambda: run_spec(case)), ("simulator", lambda: run_simulator(case))):
        try:
            answers[name] = answer()
        except Exception as error:
            return [f"{name} raised {type(error).__name__}: {error}"]
    found = differences(answers["spec"], answers["simulator"], "spec", "simulator")
    if found:
        return found
    try:
        jax = run_jax(case, oracle)
    except oracles.OracleFailure:
        raise  # the worker failed, JAX did not answer: no verdict
    except Exception as error:
        return [f"jax raised {type(error).__name__}: {error}"]
    return differences(jax, answers["spec"], "jax", "spec (and the simulator, equal to it)")


def finding(op: str, seed: int, case: Case, found: list[str], oracle: Any) -> dict[str, Any]:
    """A shrunk disagreement as a record: its scenario file's name and text, the differences, and whether
    the file, replayed as `meshsim check` replays it, still disagrees."""
    from scenarios.campaign._finding import scenario_text

    shown = found[:8] + ([f"... and {len(found) - 8} more"] if len(found) > 8 else [])
    notes = [f"Found by `meshsim campaign`: {op}, Hypothesis seed {seed}, shrunk to this case.",
             "Replay it with `meshsim check THIS_FILE`. The differences found:", *shown]
    body = scenario_text(case, f"campaign finding: {op} on mesh {case.mesh_shape}", [])
    name = f"{op}-{hashlib.sha256(body.encode()).hexdigest()[:12]}.toml"
    text = scenario_text(case, f"campaign finding: {op} on mesh {case.mesh_shape}", notes)
    return {"name": name, "scenario": text, "differences": found, "replay": replays(text, oracle)}


def replays(text: str, oracle: Any) -> str:
    """Replay a finding's scenario `text` as `meshsim check` does: "differs" when the simulator still
    disagrees with the spec or JAX, "agrees" when it no longer does, or the error that stopped it."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "finding.toml"
        path.write_text(text, encoding="utf-8")
        try:
            scenario = scenarios.load(path)
            outputs = list(scenarios.run(scenario).outputs)
        except Exception as error:
            return f"{type(error).__name__}: {error}"
    devices = scenario.mesh.devices
    args = tuple(tuple(scenario.inputs[d][name] for d in devices) for name in scenario.definition.arrays)
    call = oracles.Call(scenario.op, dict(scenario.mesh.shape), args, dict(scenario.params))
    try:
        report = oracles.check(call, outputs, oracle)
    except oracles.OracleFailure:
        raise  # no verdict: the job is retried
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return "agrees" if report.agree else "differs"
