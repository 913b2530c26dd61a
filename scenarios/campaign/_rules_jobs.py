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

import contextlib
import hashlib
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

from oracles._processes import ChildClock, running
from scenarios._errors import ScenarioError
from scenarios.campaign._attempts import JobClock, attempted
from scenarios.fleet import COMPILE_THREADS


class RulesWorkerError(ScenarioError):
    """The rules worker process died or could not run a search."""


RULES_TIMEOUT_S = 900.0  # one search of a job's programs, the worker's start included


class RulesWorker:
    """The rules worker process of this Dask worker: started on first use, restarted if it died.

    Args:
        command: the process to run (default: `python -m scenarios.campaign._rules_worker`).
        timeout_s: how long one answer may take before the process is killed.
    """

    def __init__(self, command: list[str] | None = None, timeout_s: float = RULES_TIMEOUT_S) -> None:
        self.command = command or [sys.executable, "-m", "scenarios.campaign._rules_worker",
                                   "--compile-threads", str(COMPILE_THREADS)]
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._pending = b""
        self._clock = ChildClock()

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request, return its answer.

        Raises:
            RulesWorkerError: the process ended, broke its pipe or gave no answer within `timeout_s`
                before answering (it is stopped), or the search raised (its traceback).
        """
        if not running(self._proc):
            self._start()
        assert self._proc is not None and self._proc.stdin is not None
        pid = self._proc.pid
        try:
            self._proc.stdin.write(json.dumps(request).encode() + b"\n")
            self._proc.stdin.flush()
            answer = json.loads(self._line(time.monotonic() + self.timeout_s))
        except TimeoutError:
            self.stop()
            raise RulesWorkerError(f"the rules worker (pid {pid}) gave no answer within timeout_s={self.timeout_s} "
                                   f"on {request}; it was killed") from None
        except (OSError, EOFError, ValueError) as error:
            tail = self._tail()
            code = self.stop()
            raise RulesWorkerError(f"the rules worker (pid {pid}) ended (exit code {code}) during {request}: "
                                   f"{type(error).__name__}: {error}\n{tail}") from None
        if not isinstance(answer, dict) or "error" in answer:
            raise RulesWorkerError(f"the rules search {request} failed in the rules worker:\n"
                                   f"{answer.get('error') if isinstance(answer, dict) else answer!r}")
        return answer

    @property
    def cpu_seconds(self) -> float:
        """The processor time of every process this worker has run, ended ones included (never decreases)."""
        return self._clock.seconds(self._proc)

    def stop(self) -> int | None:
        """End the process, if any (it exits when its stdin closes; killed after a second), and return its
        exit code. The next request starts a fresh one."""
        proc, self._proc = self._proc, None
        code = None
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()  # type: ignore[union-attr]
            code = self._clock.reap(proc, grace_s=1.0)
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def _start(self) -> None:
        self.stop()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115  (lives as long as the process it logs)
        self._pending = b""
        self._proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)

    def _line(self, deadline: float) -> bytes:
        """The next line the process writes, without its newline.

        Raises:
            TimeoutError: none came before `deadline`. EOFError: the process closed its stdout first.
        """
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._pending:
            wait_s = deadline - time.monotonic()
            if wait_s <= 0 or not select.select([fd], [], [], wait_s)[0]:
                raise TimeoutError
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError("the process closed its output before answering")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    def _tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]


WORKER = RulesWorker()


def run_rules_chunk(op: str, count: int, seed: int, kind: str) -> dict[str, Any]:
    """Check `count` generated programs of `op` for property `kind` ("transpose" or "vmap") under Hypothesis
    seed `seed`, in this Dask worker's rules worker; return the job's record (as `run_chunk`'s, with
    `known`: disagreements explained by FINDINGS.md, by finding id). A rules worker that fails rather than
    answers is retried once with a fresh one, then the record is an error (`scenarios.campaign._attempts`)."""
    clock = JobClock(lambda: WORKER.cpu_seconds)
    empty = {"op": op, "kind": kind, "seed": seed}
    record = attempted(lambda: _searched(op, count, seed, kind), restart=WORKER.stop, failures=(RulesWorkerError,),
                       empty=empty)
    return {**empty, **record, **clock.times(), "worker": f"{socket.gethostname()}:{os.getpid()}"}


def _searched(op: str, count: int, seed: int, kind: str) -> dict[str, Any]:
    """One attempt of `run_rules_chunk`: the rules worker's search turned into counts and findings."""
    row = WORKER.ask({"op": op, "kind": kind, "examples": count, "seed": seed})
    cases = min(int(row["examples"]), count)  # with a new disagreement, Hypothesis's shrinking runs more
    known = {name: int(n) for name, n in row["known"].items()}
    findings = [_finding(op, kind, seed, text) for text in row["new"][:1]]
    return {"cases": cases, "agree": max(0, cases - sum(known.values()) - len(findings)), "known": known,
            "findings": findings}


def _finding(op: str, kind: str, seed: int, text: str) -> dict[str, Any]:
    """A new disagreement of JAX's rule as a finding record whose file is the shrunk program as text."""
    body = (f"# meshsim campaign: {op} {kind}, Hypothesis seed {seed}, shrunk to this program.\n"
            f"# Judge it against the docs, then add it to FINDINGS.md and oracles/_rules.py's KNOWN table.\n\n"
            f"{text}\n")
    name = f"{op}-{kind}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.txt"
    return {"name": name, "scenario": body, "differences": [text.splitlines()[0]],
            "replay": "JAX's rule: not a scenario file; see the text"}
