"""The rows of `benchmarks/scale.py`: each a collective (or a program of calls) on many devices with tiny
payloads, its global input, its per-device program and its plain numpy evaluation.

`ROWS` is issue 26's table (one row per case of its "Why" table) and then one row per algorithm of
all_gather, psum and psum_scatter over 1024 devices, read from each collective's registered `Algorithm`s
('auto' included: the row names what it picked), then the networks of the earlier table (a switch and a 32 x
32 torus for the 1024-device all_to_all). Every workload's values are small integers, so any order of
addition is exact and the simulator's result must equal numpy's bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

PROGRAM_CALLS = 255  # the ppermute ring program: a value goes once around 256 devices, less one step
ABSTRACT_FLOATS = 1 << 24  # the abstract rows: 64 MiB of float32 per device, shapes and dtypes only


@dataclass(frozen=True)
class Row:
    """One row of the table: `op` on `devices` devices with `algorithm`, over `network`."""

    label: str
    op: str
    devices: int
    algorithm: str = "direct"
    network: str = "fully_connected"
    payload: str = "bytes"  # "abstract": `ABSTRACT_FLOATS` per device as a sim.ShapeDtypeStruct (no bytes)

    @property
    def key(self) -> str:
        """The row's name on the command line (`--only`)."""
        return (f"{self.op}-{self.algorithm}-{self.devices}" + ("" if self.network == "fully_connected"
                                                                else f"-{self.network}")
                + ("" if self.payload == "bytes" else f"-{self.payload}"))


def _algorithm_rows(op: str, n: int) -> list[Row]:
    import collectives

    return [Row(f"{op}, algorithm='{a.name}'" + (", reducing switch" if a.name == "in_network" else ""), op, n,
                a.name, network="reducing_switch" if a.name == "in_network" else "fully_connected")
            for a in collectives.definition(op).algorithms]


def rows() -> list[Row]:
    """Every row of the full table, in order."""
    why = [Row("all_to_all, 1 float per destination", "all_to_all", 1024),
           Row("all_to_all, 1 float per destination", "all_to_all", 2048),
           Row("ragged_all_to_all, one row to every peer", "ragged_all_to_all", 1024),
           Row("psum of 1 float (direct)", "psum", 4096),
           Row("all_gather of 1 float (direct)", "all_gather", 4096),
           Row("all_gather of 1 float, algorithm='ring'", "all_gather", 1024, "ring"),
           Row(f"shard_map body of {PROGRAM_CALLS} ppermutes around a ring", "ppermute_program", 256)]
    keys = {row.key for row in why}  # the ring all_gather is the row already
    algorithms = [row for op in ("all_gather", "psum", "psum_scatter") for row in _algorithm_rows(op, 1024)
                  if row.key not in keys]
    networks = [Row("all_to_all, 1 float per destination, switch", "all_to_all", 1024, network="switch"),
                Row("all_to_all, 1 float per destination, 32 x 32 torus", "all_to_all", 1024, network="torus")]
    abstract = [Row("all_gather of 64 MiB (abstract), algorithm='ring'", "all_gather", 1024, "ring",
                    payload="abstract"),
                Row("all_gather of 64 MiB (abstract), ring, == bytes", "all_gather", 8, "ring", payload="abstract")]
    return why + algorithms + networks + abstract


QUICK = [Row("all_to_all, 1 float per destination", "all_to_all", 64),
         Row("ragged_all_to_all, one row to every peer", "ragged_all_to_all", 64),
         Row("psum of 1 float (direct)", "psum", 64), Row("all_gather of 1 float, ring", "all_gather", 64, "ring"),
         Row("psum_scatter, ring", "psum_scatter", 64, "ring"),
         Row(f"shard_map body of {PROGRAM_CALLS} ppermutes around a ring", "ppermute_program", 16)]


def abstract_workload(op: str, n: int) -> tuple[tuple, object, Callable[[], tuple[np.ndarray, ...]]]:
    """An abstract row's global input (a `sim.ShapeDtypeStruct` of `ABSTRACT_FLOATS` float32 per device), the
    global output it must come back as, and a maker of the same input with real bytes (zero pages, untouched
    until written) for the rows small enough to run both."""
    import sim

    if op != "all_gather":
        raise ValueError(f"op={op!r}: the abstract rows are tiled all_gathers")
    shape = (n * ABSTRACT_FLOATS,)
    return ((sim.ShapeDtypeStruct(shape, np.float32),), sim.ShapeDtypeStruct((n * shape[0],), np.float32),
            lambda: (np.zeros(shape, np.float32),))


def workload(op: str, n: int) -> tuple[tuple[np.ndarray, ...], Callable[..., np.ndarray]]:
    """The global inputs of `op` on n devices and their plain numpy evaluation (the global output)."""
    if op == "all_to_all":  # one float per destination
        return (np.arange(n * n, dtype=np.float32),), lambda x: np.ascontiguousarray(x.reshape(n, n).T).reshape(-1)
    if op == "ragged_all_to_all":  # device d sends its row j to device j, which writes it at row d
        operand = np.arange(n * n, dtype=np.float32).reshape(n * n, 1)
        index = np.tile(np.arange(n, dtype=np.int32), n)
        ones = np.ones(n * n, np.int32)
        inputs = (operand, np.zeros_like(operand), index, ones, np.repeat(np.arange(n, dtype=np.int32), n), ones)
        return inputs, lambda x, *rest: np.ascontiguousarray(x.reshape(n, n).T).reshape(n * n, 1)
    if op == "psum":
        return (np.arange(n, dtype=np.float32) % 7,), lambda x: np.full(n, x.sum(), np.float32)
    if op == "psum_scatter":  # n floats per device, one each after the scatter
        return (np.arange(n * n, dtype=np.float32) % 7,), lambda x: x.reshape(n, n).sum(0)
    if op == "ppermute_program":
        return (np.arange(n, dtype=np.float32),), lambda x: np.roll(x, PROGRAM_CALLS)
    return (np.arange(n, dtype=np.float32),), lambda x: np.tile(x, n)  # tiled all_gather of 1 float


def body(op: str, n: int, algorithm: str, lax) -> Callable:
    """The per-device program, with `lax` either meshsim's `collectives` or `jax.lax` (which takes no
    `algorithm`: only the 'direct' rows run on JAX)."""
    how = {} if algorithm == "direct" else {"algorithm": algorithm}
    if op == "all_to_all":
        return lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True, **how)
    if op == "ragged_all_to_all":
        return lambda *args: lax.ragged_all_to_all(*args, axis_name="x", **how)
    if op == "psum":
        return lambda v: lax.psum(v, "x", **how)
    if op == "psum_scatter":
        return lambda v: lax.psum_scatter(v, "x", tiled=True, **how)
    if op == "ppermute_program":
        perm = [(i, (i + 1) % n) for i in range(n)]

        def program(v):
            for _ in range(PROGRAM_CALLS):
                v = lax.ppermute(v, "x", perm)
            return v
        return program
    return lambda v: lax.all_gather(v, "x", tiled=True, **how)


def network(name: str, n: int):
    """The row's network: fully connected (the default), a switch (one that reduces for the 'in_network'
    rows), or a square 2-D torus of n devices."""
    import sim

    if name == "switch":
        return sim.Network.switch()
    if name == "reducing_switch":
        return sim.Network(1e-6, 100e9, "switch", switch_reduces=True)
    if name == "torus":
        side = round(n ** 0.5)
        return sim.Network.torus((side, n // side))
    return sim.Network.fully_connected()


def simpy_events_per_s(processes: int = 1000, steps: int = 300) -> float:
    """Raw SimPy's rate on this machine now: `processes` processes each waiting `steps` timeouts, the events
    the clock processes per second (the floor any SimPy-driven simulator pays per event)."""
    import time

    import simpy

    env = simpy.Environment()

    def process():
        for _ in range(steps):
            yield env.timeout(1)

    for _ in range(processes):
        env.process(process())
    start = time.perf_counter()
    env.run()
    wall_s = time.perf_counter() - start
    return processes * (steps + 2) / wall_s  # each timeout, plus each process's start and end
