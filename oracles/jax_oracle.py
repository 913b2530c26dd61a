"""`JaxOracle`: real JAX collectives on CPU virtual devices, run in a long-lived worker process.

The parent never imports jax. It sends each case to `python -m oracles._jax_worker` over pipes and waits
at most `timeout_s` for the answer; a worker that dies or hangs is killed, the case is reported as an
`OracleFailure`, and the next call starts a fresh worker.

>>> with JaxOracle() as oracle:                                   # doctest: +SKIP
...     oracle.run("all_gather", {"i": 2}, ([np.array(0), np.array(1)],), {"axis_name": "i"}).outputs
[array([0, 1]), array([0, 1])]
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from collectives import REGISTRY
from layouts import InvalidArgumentError, MeshError
from oracles._compile_pool import COMPILE_THREADS_ENV
from oracles._processes import ChildClock, running
from oracles._protocol import read_message, write_message

MAX_DEVICES = 8
# How many per-device argument lists each collective takes, and JAX's name for it (the design note's psum2
# is JAX's psum_invariant, its pbroadcast is pvary, pscatter is JAX's transpose of all_gather_invariant).
ARITY = {name: len(d.arrays) for name, d in REGISTRY.items()}
JAX_NAMES = {name: d.jax.name for name, d in REGISTRY.items()}
_TEST_OPS = ("crash", "sleep")  # understood by the worker; used by the tests only


@dataclass(frozen=True)
class OracleResult:
    """What real JAX computed: `outputs[d]` is device d's result; `path` is a key of `oracles.PATHS`."""

    outputs: list[np.ndarray]
    path: str


class OracleError(MeshError):
    """JAX rejected the case (tracing, lowering or compiling it raised); the worker is still alive.

    A `MeshError` like every error meshsim raises on purpose; the JAX exception itself stays in the worker,
    so its class is reported by name.

    Attributes:
        kind: the JAX exception's class name, e.g. "TypeError".
        message: the JAX exception's message.
        case: a one-line description of the case.
    """

    def __init__(self, kind: str, message: str, case: str) -> None:
        super().__init__(f"{kind}: {message}\n  case: {case}")
        self.kind, self.message, self.case = kind, message, case


class OracleFailure(MeshError, RuntimeError):
    """The worker died or hung on a case; it was killed and restarts on the next call (a `MeshError`)."""


class _DeadlineReader:
    """A binary stream over a pipe whose reads raise TimeoutError once `deadline` has passed."""

    def __init__(self, fd: int, deadline: float) -> None:
        self.fd, self.deadline = fd, deadline

    def read(self, n: int) -> bytes:
        wait_s = self.deadline - time.monotonic()
        if wait_s <= 0 or not select.select([self.fd], [], [], wait_s)[0]:
            raise TimeoutError
        return os.read(self.fd, n)


class JaxOracle:
    """Runs `jax.lax` collectives under `jax.shard_map` on up to 8 CPU devices, in a worker process.

    Args:
        timeout_s: how long one case (including a worker start) may take before the worker is killed.
        compile_threads: the threads XLA:CPU compiles on in the worker (`oracles._compile_pool`); None,
            the default, for one per core.
    """

    def __init__(self, *, timeout_s: float = 120.0, compile_threads: int | None = None) -> None:
        if not timeout_s > 0:
            raise InvalidArgumentError(f"timeout_s={timeout_s!r} must be positive")
        if compile_threads is not None and not (isinstance(compile_threads, int) and compile_threads >= 1):
            raise InvalidArgumentError(f"compile_threads={compile_threads!r} must be a positive integer or None")
        self.timeout_s = timeout_s
        self.compile_threads = compile_threads
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._lock = threading.Lock()
        self._clock = ChildClock()

    @property
    def pid(self) -> int | None:
        """The worker's process id, or None while no worker runs."""
        proc = self._proc
        return proc.pid if running(proc) else None

    @property
    def cpu_seconds(self) -> float:
        """The processor time used so far by every worker process this oracle has started, the ones that
        died or were killed included; it never decreases, so a difference of two readings is a job's share."""
        return self._clock.seconds(self._proc)

    def run(self, op: str, mesh_shape: Mapping[Hashable, int], args: Sequence[Sequence[Any]],
            params: Mapping[str, Any] | None = None) -> OracleResult:
        """Run `jax.lax.<op>(*args, **params)` on each device of `mesh_shape` and return its results.

        Args:
            op: a registered collective's name (`collectives.REGISTRY`), e.g. "all_gather" or "psum_invariant".
            mesh_shape: axis name -> size, at most 8 devices; device ids run row-major over the axes.
            args: one per-device list per positional argument of the op, e.g. `(xs,)` for all_gather.
            params: the op's keyword arguments (axis_name, axis_index_groups, axis, tiled, ...).

        Returns:
            Per-device outputs and the path taken ("cpu lowering" for ragged_all_to_all on XLA:CPU).

        Raises:
            InvalidArgumentError: the request cannot be expressed as one shard_map call (checked before sending).
            OracleError: JAX raised for this case.
            OracleFailure: the worker crashed or did not answer within `timeout_s`.
        """
        mesh = dict(mesh_shape)
        arrays = _check_request(op, mesh, args)
        params = dict(params or {})
        case = describe_case(op, mesh, arrays, params)
        reply = self.call({"op": op, "mesh_shape": mesh, "args": arrays, "params": params}, case)
        return OracleResult(outputs=list(reply[1]), path=reply[2])

    def call(self, request: dict[str, Any], case: str) -> tuple[Any, ...]:
        """Send one raw request to the worker and return its ("ok", value, path) reply.

        Raises:
            OracleError: the worker answered with JAX's error. OracleFailure: it crashed or hung.
        """
        with self._lock:
            reply = self._exchange(request, case)
        if reply[0] == "error":
            raise OracleError(reply[1], reply[2], case)
        return reply

    def close(self) -> None:
        """Stop the worker (it exits when its stdin closes; killed if it lingers). Safe to call twice."""
        with self._lock:
            self._stop(grace_s=5.0)

    def __enter__(self) -> JaxOracle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _exchange(self, request: dict[str, Any], case: str) -> tuple[Any, ...]:
        deadline = time.monotonic() + self.timeout_s
        try:
            if self.pid is None:
                self._start(deadline)
            assert self._proc is not None and self._proc.stdin is not None
            write_message(self._proc.stdin, request)
            return self._receive(deadline)
        except TimeoutError:
            self._stop(grace_s=0.0)
            raise OracleFailure(f"JAX worker gave no answer within timeout_s={self.timeout_s} on "
                                f"{case}; it was killed and restarts on the next call") from None
        except (EOFError, OSError, ValueError, pickle.UnpicklingError) as error:
            log = self._log_tail()
            code = self._stop(grace_s=1.0)
            raise OracleFailure(f"JAX worker died (exit code {code}) on {case}; it restarts on the "
                                f"next call. {type(error).__name__}: {error}\n{log}") from None

    def _receive(self, deadline: float) -> tuple[Any, ...]:
        assert self._proc is not None and self._proc.stdout is not None
        reply = read_message(_DeadlineReader(self._proc.stdout.fileno(), deadline))  # type: ignore[arg-type]
        if not isinstance(reply, tuple):
            raise EOFError("the worker closed its reply pipe")
        return reply

    def _start(self, deadline: float) -> None:
        """Start a worker and wait for its ("ready", info) message."""
        self._stop(grace_s=0.0)
        # Kept open for the worker's lifetime (its stderr); _stop closes it.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        package_root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ, JAX_PLATFORMS="cpu",
                   PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
                   XLA_FLAGS=_xla_flags(os.environ.get("XLA_FLAGS", "")))
        env.pop(COMPILE_THREADS_ENV, None)
        if self.compile_threads is not None:
            env[COMPILE_THREADS_ENV] = str(self.compile_threads)
        self._proc = subprocess.Popen([sys.executable, "-m", "oracles._jax_worker"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._log, env=env)
        ready = self._receive(deadline)
        if ready[0] != "ready" or ready[1]["devices"] < MAX_DEVICES:
            raise EOFError(f"the worker started badly: {ready!r}")

    def _stop(self, grace_s: float) -> int | None:
        """End the worker, if any, and return its exit code."""
        proc, self._proc = self._proc, None
        code = None
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):  # the worker is gone; nothing to flush to
                    pipe.close()  # type: ignore[union-attr]
            code = self._clock.reap(proc, grace_s)
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def _log_tail(self, limit: int = 3000) -> str:
        """The worker's stderr, from its fatal-error report if it left one (newest frames come first)."""
        if self._log is None:
            return ""
        self._log.seek(0)
        text = self._log.read().decode(errors="replace")
        start = text.rfind("Fatal Python error")
        text = text[start:start + limit] if start >= 0 else text[-limit:]
        return f"worker stderr:\n{text}" if text else "worker stderr was empty"


def _xla_flags(inherited: str) -> str:
    """The caller's XLA flags with the device count forced to MAX_DEVICES."""
    kept = [flag for flag in inherited.split() if "host_platform_device_count" not in flag]
    return " ".join([*kept, f"--xla_force_host_platform_device_count={MAX_DEVICES}"])


def _check_request(op: str, mesh_shape: dict[Hashable, int],
                   args: Sequence[Sequence[Any]]) -> tuple[list[np.ndarray], ...]:
    """Return `args` as numpy arrays, or raise InvalidArgumentError naming what shard_map cannot express."""
    if op not in ARITY and op not in _TEST_OPS:
        raise InvalidArgumentError(f"op={op!r} must be one of {tuple(ARITY)}")
    sizes = list(mesh_shape.values())
    if not sizes or not all(isinstance(s, (int, np.integer)) and s > 0 for s in sizes):
        raise InvalidArgumentError(f"mesh_shape={mesh_shape!r} must map axis names to positive sizes")
    n = int(np.prod(sizes))
    if n > MAX_DEVICES:
        raise InvalidArgumentError(
            f"mesh_shape={mesh_shape!r} has {n} devices; the JAX oracle runs at most {MAX_DEVICES}"
        )
    if op in ARITY and len(args) != ARITY[op]:
        raise InvalidArgumentError(f"{op} takes {ARITY[op]} per-device argument list(s), got len(args)={len(args)}")
    arrays = tuple([np.asarray(x) for x in arg] for arg in args)
    for k, per_device in enumerate(arrays):
        if len(per_device) != n:
            raise InvalidArgumentError(
                f"args[{k}] has {len(per_device)} per-device arrays; mesh_shape={mesh_shape!r} has {n} devices"
            )
        for d, x in enumerate(per_device):
            if (x.shape, x.dtype) != (per_device[0].shape, per_device[0].dtype):
                raise InvalidArgumentError(
                    f"args[{k}]: device {d} has {_aval(x)} but device 0 has {_aval(per_device[0])};"
                    " shard_map needs one shape and dtype per argument"
                )
    return arrays


def _aval(x: np.ndarray) -> str:
    return f"{x.dtype}[{','.join(map(str, x.shape))}]"


def describe_case(op: str, mesh_shape: Mapping[Hashable, int], args: Sequence[Sequence[np.ndarray]],
                  params: Mapping[str, Any]) -> str:
    """One line naming a case: op, mesh, per-device shapes/dtypes and params."""
    avals = ", ".join(_aval(per_device[0]) if len(per_device) else "[]" for per_device in args)
    return f"{op} on mesh {dict(mesh_shape)} with per-device args ({avals}) and params {dict(params)}"


_shared: dict[int | None, JaxOracle] = {}
_shared_lock = threading.Lock()


def shared_oracle(*, compile_threads: int | None = None) -> JaxOracle:
    """Return the process-wide `JaxOracle` whose worker compiles on `compile_threads` threads (None: one
    per core), created on first use and closed when the process exits."""
    with _shared_lock:
        if compile_threads not in _shared:
            oracle = _shared[compile_threads] = JaxOracle(compile_threads=compile_threads)
            atexit.register(oracle.close)
        return _shared[compile_threads]


# ---------------------------------------------------------------------------------------------- layouts

@dataclass(frozen=True)
class PlacedShard:
    """One device's shard of an array JAX placed with a Format, as its CPU buffer holds it.

    `raw` is the bytes holding the values (`prod(shape) * itemsize`, all XLA:CPU allocates);
    `on_device_size_in_bytes` what JAX reports (padded to whole tiles); `layout` the (major_to_minor,
    tiling) JAX reports for the shard; `index` the (start, stop) of each dimension in the global array.
    """

    device: int
    index: tuple[tuple[int, int], ...]
    raw: bytes
    on_device_size_in_bytes: int
    layout: tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]


@dataclass(frozen=True)
class LayoutResult:
    """A collective run with layouts: per-device values, the bytes of each result buffer, the path taken."""

    outputs: list[np.ndarray]
    raws: list[bytes]
    path: str


def device_put_bytes(oracle: JaxOracle, x: Any, major_to_minor: Sequence[int], tiling: Sequence[Sequence[int]] = (),
                     *, device: int | None = None, mesh_shape: Mapping[str, int] | None = None,
                     spec: Sequence[Any] = ()) -> list[PlacedShard]:
    """`jax.device_put(x, Format(Layout(major_to_minor, tiling), sharding))` on CPU; each shard's bytes.

    The sharding is `SingleDeviceSharding(jax.devices()[device])`, or `NamedSharding` over a mesh of
    `mesh_shape` (its first devices, row-major) with `PartitionSpec(*spec)`.

    Raises:
        InvalidArgumentError: neither or both of `device` and `mesh_shape` given.
        OracleError: JAX rejected the layout or the placement.
        OracleFailure: the worker crashed or hung.
    """
    if (device is None) == (mesh_shape is None):
        raise InvalidArgumentError(f"give exactly one of device={device!r} and mesh_shape={mesh_shape!r}")
    x = np.asarray(x)
    sharding = {"device": device} if device is not None else {"mesh_shape": dict(mesh_shape), "spec": list(spec)}
    params = {"layout": {"major_to_minor": tuple(major_to_minor), "tiling": tuple(map(tuple, tiling))},
              "sharding": sharding}
    case = f"device_put of {_aval(x)} with major_to_minor={tuple(major_to_minor)}, tiling={tuple(tiling)}, {sharding}"
    reply = oracle.call({"op": "place", "mesh_shape": {}, "args": ([x],), "params": params}, case)
    return [PlacedShard(s["device"], tuple(s["index"]), s["raw"], s["on_device_size_in_bytes"], s["layout"])
            for s in reply[1]]


def run_with_layouts(oracle: JaxOracle, op: str, mesh_shape: Mapping[str, int], args: Sequence[Sequence[Any]],
                     params: Mapping[str, Any], in_layouts: Sequence[Any], out_layout: Any,
                     out_rank: int) -> LayoutResult:
    """`oracle.run` with each argument's per-device block in layout `in_layouts[k]` and the result (of
    rank `out_rank`) in `out_layout`: major_to_minor tuples, None for row-major, as JAX's in/out Formats.

    `op` is any collective `run` takes but axis_index; the reductions and the design note's collectives
    run as `run` runs them (JAX's names, invariant operands, check_vma=False for grouped psum/pmean)."""
    mesh = dict(mesh_shape)
    arrays = _check_request(op, mesh, args)
    request = {"op": "layout_collective", "mesh_shape": mesh, "args": arrays,
               "params": {"op": op, "params": dict(params), "in_layouts": [None if o is None else tuple(o)
                                                                          for o in in_layouts],
                          "out_layout": None if out_layout is None else tuple(out_layout), "out_rank": out_rank}}
    case = f"{describe_case(op, mesh, arrays, params)} with in_layouts={list(in_layouts)}, out_layout={out_layout}"
    reply = oracle.call(request, case)
    return LayoutResult(list(reply[1]["outputs"]), list(reply[1]["raws"]), reply[2])

