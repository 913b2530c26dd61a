"""`OneCore`: the Dask worker plugin that binds each worker of a local cluster to a core of its own.

Imported by `scenarios.fleet._fleet` when it starts a local cluster (it needs `distributed`, the dask extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from oracles._compile_pool import bind_threads


class OneCore(WorkerPlugin):
    """Binds worker k of a local cluster (its name, 0, 1, ...) to `cores[k]`: every thread it has, and so
    every thread and process it starts from then on (they inherit the binding)."""

    idempotent = True  # one registration per cluster; a worker the nanny restarts gets it again
    name = "meshsim-one-core"

    def __init__(self, cores: Sequence[int]) -> None:
        self.cores = list(cores)

    def setup(self, worker: Any) -> None:
        bind_threads({self.cores[int(worker.name) % len(self.cores)]})
