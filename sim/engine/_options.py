"""`RunOptions`: what every device and every call of one run sees alike, fixed when the run is made."""

from __future__ import annotations

from dataclasses import dataclass

from sim.network._mesh import Mesh


@dataclass(frozen=True)
class RunOptions:
    """The mesh of one run and its switches.

    `check_vma`: device-variance types are inferred and checked. `sanitize`: a call that breaks rules
    records them and runs without the broken pieces where its collective can (`sim.Violation`).
    `last_arrival_wins`: slices that land on the same rows are written in arrival order instead of refused
    (arrival-order exploration). `max_memory_bytes`: the most bytes the run's device memories may hold
    together (every array: inputs, results, staging, received blocks); None for the default, half the
    machine's memory (`sim.default_max_memory_bytes`).

    >>> RunOptions(Mesh({"x": 2})).check_vma
    True
    """

    mesh: Mesh
    check_vma: bool = True
    sanitize: bool = False
    last_arrival_wins: bool = False
    max_memory_bytes: int | None = None
