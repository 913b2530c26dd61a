"""Campaign jobs of JAX's own rules: `meshsim campaign --kinds transpose vmap` on a Dask worker.

Each Dask worker process keeps one long-lived `python -m scenarios.campaign._rules_worker` (8 CPU devices, the CPU
ragged lowering installed before jax), started by its first rules job and reused by the next, as the
forward kind keeps its JAX worker. A job asks it for one search (`scenarios.campaign._rules_search.search`) of
`count` calls under the job's seed and turns the answer into the campaign's record: disagreements that a
finding of FINDINGS.md explains are counted under `known` by id; a new one, shrunk, is a finding saved as
a text file (the program, JAX's answer and meshsim's: there is no scenario file to replay, since the
disagreement is in JAX's transpose or batching rule, not in a collective's forward answer).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

from scenarios._errors import ScenarioError
from scenarios.fleet import COMPILE_THREADS, cpu_seconds


class RulesWorkerError(ScenarioError):
    """The rules worker process died or could not run a search."""


class RulesWorker:
    """The rules worker process of this Dask worker: started on first use, restarted if it died."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | None = None

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request, return its answer.

        Raises:
            RulesWorkerError: the process ended before answering, or the search raised (its traceback).
        """
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RulesWorkerError(f"the rules worker (pid {self._proc.pid}) ended during {request}: {self._tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise RulesWorkerError(f"the rules search {request} failed in the rules worker:\n{answer['error']}")
        return answer

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def _start(self) -> None:
        self._log = tempfile.TemporaryFile()  # noqa: SIM115  (lives as long as the process it logs)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "scenarios.campaign._rules_worker", "--compile-threads", str(COMPILE_THREADS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True)

    def _tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]


WORKER = RulesWorker()


def run_rules_chunk(op: str, count: int, seed: int, kind: str) -> dict[str, Any]:
    """Check `count` generated programs of `op` for property `kind` ("transpose" or "vmap") under Hypothesis
    seed `seed`, in this Dask worker's rules worker; return the job's record (as `run_chunk`'s, with
    `known`: disagreements explained by FINDINGS.md, by finding id)."""
    start, cpu = time.perf_counter(), cpu_seconds(WORKER.pid)
    row = WORKER.ask({"op": op, "kind": kind, "examples": count, "seed": seed})
    cases = min(row["examples"], count)  # with a new disagreement, Hypothesis's shrinking runs more
    known = {name: int(n) for name, n in row["known"].items()}
    findings = [_finding(op, kind, seed, text) for text in row["new"][:1]]
    return {"op": op, "kind": kind, "seed": seed, "cases": cases,
            "agree": max(0, cases - sum(known.values()) - len(findings)), "known": known, "findings": findings,
            "seconds": round(time.perf_counter() - start, 3), "cpu_seconds": round(cpu_seconds(WORKER.pid) - cpu, 3),
            "worker": f"{socket.gethostname()}:{os.getpid()}"}


def _finding(op: str, kind: str, seed: int, text: str) -> dict[str, Any]:
    """A new disagreement of JAX's rule as a finding record whose file is the shrunk program as text."""
    body = (f"# meshsim campaign: {op} {kind}, Hypothesis seed {seed}, shrunk to this program.\n"
            f"# Judge it against the docs, then add it to FINDINGS.md and oracles/_rules.py's KNOWN table.\n\n"
            f"{text}\n")
    name = f"{op}-{kind}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.txt"
    return {"name": name, "scenario": body, "differences": [text.splitlines()[0]],
            "replay": "JAX's rule: not a scenario file; see the text"}
