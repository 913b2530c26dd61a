"""The processor time of worker processes, counted per process so that it never goes backwards.

A long-lived worker (the JAX worker, the campaign's rules worker) can die and be replaced in the middle of
a job. Reading "the worker's CPU time" before and after the job then subtracts the old process's time
from the new one's, which can be negative. `ChildClock` instead keeps one total over every process it
was shown: a running process is read live (psutil, or Linux's /proc), an ended one once, from the kernel's
own account when it is reaped (`os.wait4`), and the total is never less than a value it returned before.

>>> import subprocess, sys
>>> clock = ChildClock()
>>> proc = subprocess.Popen([sys.executable, "-c", "sum(range(10**6))"])
>>> clock.reap(proc, grace_s=30.0)
0
>>> clock.seconds(None) > 0.0
True
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

__all__ = ["KILLS_ENV", "ChildClock", "planted_kill", "running"]


def running(proc: subprocess.Popen | None) -> bool:
    """Whether `proc` has not ended, checked without reaping it (its time is read when `ChildClock` reaps it)."""
    if proc is None or proc.returncode is not None:
        return False
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:  # reaped elsewhere
        return False


def _live_seconds(pid: int) -> float:
    """The processor time (user + system) process `pid` has used so far; 0.0 when it cannot be read."""
    try:
        import psutil
    except ImportError:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


class ChildClock:
    """The processor time used by every child process it has been shown, ended ones included."""

    def __init__(self) -> None:
        self._ended = 0.0  # the time of the processes reaped here
        self._high = 0.0  # the largest total returned: a live reading rounds down, a reaped one does not
        self._lock = threading.Lock()

    def seconds(self, proc: subprocess.Popen | None) -> float:
        """The total so far: the ended processes' time plus the running `proc`'s (None: no process runs)."""
        live = _live_seconds(proc.pid) if running(proc) else 0.0
        with self._lock:
            self._high = max(self._high, self._ended + live)
            return self._high

    def reap(self, proc: subprocess.Popen, grace_s: float) -> int | None:
        """Wait up to `grace_s` for `proc` to end (killing it after that), reap it, add its processor time,
        and return its exit code (negative: the signal that ended it; None if it was reaped elsewhere)."""
        deadline, killed = time.monotonic() + grace_s, False
        while True:
            try:
                pid, status, usage = os.wait4(proc.pid, 0 if killed else os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (Popen.poll): its time is unknown
                return proc.returncode
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                with self._lock:
                    self._ended += usage.ru_utime + usage.ru_stime
                return proc.returncode
            if time.monotonic() >= deadline:
                with contextlib.suppress(ProcessLookupError):  # not reaped yet, so the pid is still this child's
                    os.kill(proc.pid, signal.SIGKILL)
                killed = True
            else:
                time.sleep(0.01)


KILLS_ENV = "MESHSIM_TEST_WORKER_KILLS"


def planted_kill() -> None:
    """A test hook of the worker processes, called on their first request: when the environment variable
    `KILLS_ENV` names a file holding a count n > 0, write n - 1 to it and end this process with SIGKILL, as
    `kill -9` from outside would. The tests kill a campaign's JAX or rules worker mid-job with it."""
    path = os.environ.get(KILLS_ENV)
    if not path:
        return
    import fcntl

    with open(path, "r+", encoding="ascii") as counter:
        fcntl.flock(counter, fcntl.LOCK_EX)  # workers of one cluster share the count
        left = int(counter.read().strip() or 0)
        if left <= 0:
            return
        counter.seek(0)
        counter.truncate()
        counter.write(str(left - 1))
        counter.flush()
    os.kill(os.getpid(), signal.SIGKILL)
