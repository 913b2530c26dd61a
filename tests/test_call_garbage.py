"""A collective call leaves nothing to Python's cyclic garbage collector: what a call makes and drops (its
meeting, every member's arguments, the joint call) is freed by reference counting as the call ends, so a
program of many calls leaves no more cycles than a program of few. A run pauses the collector
(`sim.gc_paused`) and sends what it keeps straight to the collector's oldest generation; every cycle a call
left would stay in memory until the next full collection.
A meeting made to keep its view again (the cycle it once held) is caught. The step loops of the ring, doubling
and halving algorithms (`sim.engine.Steps`) and the tree's programs (`collectives._tree_steps.Programs`, its
chain planned ahead or not) let go of the call when it is over, so their calls leave none either. And the run
itself: once its result is dropped, its simulation, clock and memories are freed at once, collector off."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import collectives
import sim
from sim import P
from sim.engine._rendezvous import MeetingView, _Meeting


def _program(n: int, calls: int, perm: list[tuple[int, int]], check_vma: bool) -> sim.ShardMapped:
    """`calls` ppermutes by `perm` over n devices."""
    def body(v):
        for _ in range(calls):
            v = collectives.ppermute(v, "x", perm)
        return v

    return sim.shard_map(body, mesh=sim.Mesh({"x": n}), in_specs=P("x"), out_specs=P("x"), check_vma=check_vma)


def _reductions(n: int, calls: int, op: str, algorithm: str, network: sim.Network | None) -> sim.ShardMapped:
    """`calls` calls of `op` by `algorithm` over n devices (a psum_scatter's pieces gathered back)."""
    def body(v):
        for _ in range(calls):
            if op == "psum":
                v = collectives.psum(v, "x", algorithm=algorithm)
            elif op == "all_gather":
                v = collectives.all_gather(v, "x", algorithm=algorithm, tiled=True)[:v.shape[0]]
            else:
                v = collectives.all_gather(collectives.psum_scatter(v, "x", algorithm=algorithm, tiled=True), "x",
                                           tiled=True)
        return v

    mesh = sim.Mesh({"x": n}) if network is None else sim.Mesh({"x": n}, network=network)
    return sim.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)


def _cycles_left(program: sim.ShardMapped, x: np.ndarray) -> int:
    """How many unreachable objects in reference cycles a run of `program` leaves, the run kept alive: the
    fewer of two runs (what a run makes once per process counts in one). What the process holds after a
    first run, garbage other tests left included, is frozen out of the collector's view (`gc.freeze`): the
    collections then scan the measured runs' objects alone, however large the process has grown (in the
    suite, a full collection of a grown worker took a few tenths of a second)."""
    program.run(x)  # a first run: what is made once per process is made
    gc.freeze()  # after the first run: a run that ends with the collector on unfreezes (`sim.gc_paused`)
    try:
        return min(_one_run_left(program, x) for _ in range(2))
    finally:
        gc.unfreeze()


def _one_run_left(program: sim.ShardMapped, x: np.ndarray) -> int:
    program.last_run = None  # (dropped, with the cycles of its simulation)
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        run = program.run(x)
        found = gc.collect()
    finally:
        if enabled:
            gc.enable()
    assert run.outputs.shape == x.shape
    return found


@pytest.mark.parametrize("check_vma", [False, True])
@pytest.mark.parametrize("whole", [True, False], ids=["joint", "per-member"])
def test_calls_leave_no_cycles(whole: bool, check_vma: bool) -> None:
    """Sixteen calls leave no cycles, and neither does the run around them, whether ppermute runs as one
    joint call (a whole permutation) or member by member (a partial one)."""
    n = 8
    perm = [(i, (i + 1) % n) for i in range(n)] if whole else [(0, 1), (2, 5)]
    x = np.arange(n, dtype=np.float32)
    few = _cycles_left(_program(n, 1, perm, check_vma), x)
    many = _cycles_left(_program(n, 16, perm, check_vma), x)
    assert (few, many) == (0, 0)


_STORED = {"store_and_forward": True}  # a ring's loops run event by event, not in closed form
_RING = {"topology": "ring"}  # a tree's chain runs as programs, not planned ahead


@pytest.mark.parametrize(("op", "algorithm", "network"), [
    ("psum", "ring", None), ("psum", "ring", _STORED), ("psum", "tree", None), ("psum", "tree", _RING),
    ("psum", "direct", None), ("psum", "recursive_doubling", None), ("psum", "rabenseifner", None),
    ("psum", "bidirectional_ring", None), ("all_gather", "ring", None), ("psum_scatter", "ring", None),
    ("psum_scatter", "recursive_halving", None)])
def test_reductions_leave_no_cycles(op: str, algorithm: str, network: dict | None) -> None:
    """Sixteen calls of a ring, tree, doubling or halving algorithm leave as many cycles as one: no call
    leaves any, its loops run in closed form or event by event (store-and-forward links), the tree's chain
    planned ahead (fully connected) or run as programs (a ring network)."""
    n = 8
    mesh_network = None if network is None else sim.Network(**network)
    x = np.arange(n * 8, dtype=np.float32)
    few = _cycles_left(_reductions(n, 1, op, algorithm, mesh_network), x)
    many = _cycles_left(_reductions(n, 16, op, algorithm, mesh_network), x)
    assert many == few


def test_a_meeting_keeping_its_view_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A meeting that keeps the view its members' ports see (a cycle: the meeting holds the view, the view
    the meeting) leaves every call's meeting and arguments to the collector, and the comparison tells."""
    def kept(meeting: _Meeting) -> MeetingView:
        return meeting.shared.setdefault(("test", "view"), MeetingView(meeting))

    monkeypatch.setattr(_Meeting, "view", property(kept))
    n = 8
    perm = [(i, (i + 1) % n) for i in range(n)]
    x = np.arange(n, dtype=np.float32)
    few = _cycles_left(_program(n, 1, perm, False), x)
    many = _cycles_left(_program(n, 16, perm, False), x)
    assert many >= few + 15 * 2 * n  # each of the 15 more calls leaves at least its members' two arguments


def _bodies() -> dict[str, tuple]:
    """Programs whose runs hold their memories through every part of the engine: (body, global input)."""
    n = 8
    ring = [(i, (i + 1) % n) for i in range(n)]
    x = np.arange(n * n, dtype=np.float32)
    steer = (np.zeros((n * n, 1), np.float32), np.tile(np.arange(n, dtype=np.int32), n),
             np.ones(n * n, np.int32), np.repeat(np.arange(n, dtype=np.int32), n), np.ones(n * n, np.int32))
    return {
        "identity": (lambda v: v, (x,)),
        "ppermute ring": (lambda v: collectives.ppermute(v, "x", ring), (x,)),
        "psum tree": (lambda v: collectives.psum(v, "x", algorithm="tree"), (x,)),
        "all_gather ring": (lambda v: collectives.all_gather(v, "x", tiled=True, algorithm="ring"), (x,)),
        "psum_scatter halving": (lambda v: collectives.psum_scatter(v, "x", tiled=True,
                                                                   algorithm="recursive_halving"), (x,)),
        "ragged_all_to_all": (lambda op, out, *rest: collectives.ragged_all_to_all(op, out, *rest, axis_name="x"),
                              (np.arange(n * n, dtype=np.float32).reshape(-1, 1), *steer)),
    }


@pytest.mark.parametrize("name", list(_bodies()))
def test_a_dropped_run_frees_its_memories_at_once(name: str) -> None:
    """A run's memories go when the last reference to its result does, with the collector off: nothing of the
    run's engine (the calls' way to fail it, the transport's tables and the network's wake-up, the clock) keeps
    them in a reference cycle, which with the runs' objects sent to the oldest generation would hold every
    run's device memory until a full collection (16 MiB per device and run, once, grew a loop of runs by
    128 MiB a run)."""
    import weakref

    body, args = _bodies()[name]
    program = sim.shard_map(body, mesh=sim.Mesh({"x": 8}), in_specs=tuple(P("x") for _ in args), out_specs=P("x"),
                            check_vma=False)
    program.run(*args)
    enabled = gc.isenabled()
    gc.disable()
    try:
        run = program.run(*args)
        memories = [weakref.ref(memory) for memory in run.simulation.memories]
        engine, clock = weakref.ref(run.simulation), weakref.ref(run.simulation.env)
        del run
        program.last_run = None
        alive = [name for name, ref in [("the simulation", engine), ("its clock", clock)] + [
            (f"memory {d}", m) for d, m in enumerate(memories)] if ref() is not None]
    finally:
        if enabled:
            gc.enable()
    assert not alive, f"{name}: {alive} outlive the run (held in a reference cycle)"
