"""The differential campaign: generated calls of every collective run on the simulator, the spec and real
JAX (forward), and JAX's own transpose and batching rules against meshsim's, as fleet jobs; disagreements
shrunk and written as scenario files.

Hypothesis is imported only where cases are generated: importing this package does not import it, and
the names that need it (`cases` and its strategies, `search`) load their module when first used.
"""

from importlib import import_module
from typing import Any

from scenarios.campaign._answers import Case, differences, disagreements, run_jax, run_simulator, run_spec
from scenarios.campaign._campaign import (
    BATCHED,
    KINDS,
    LINEAR,
    Disagreement,
    WorkerSetupError,
    chunk_key,
    chunk_seed,
    plan,
    run_chunk,
    worker_oracle,
)
from scenarios.campaign._finding import scenario_text
from scenarios.campaign._rules_jobs import RulesWorkerError, run_rules_chunk

# name -> the module defining it, imported on first use because it imports Hypothesis
_CASES = ("DTYPES", "INDEX_DTYPES", "MAX_DEVICES", "Fill", "Filler", "axis_names", "cases", "collective_axes",
          "device_groups", "dtypes", "fills", "index_groups", "meshes", "small_dims")
_GENERATING = dict.fromkeys(_CASES, "scenarios.campaign._cases")
_GENERATING["search"] = "scenarios.campaign._rules_search"


def __getattr__(name: str) -> Any:
    if name in _GENERATING:
        return getattr(import_module(_GENERATING[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BATCHED", "KINDS", "LINEAR", "Case", "Disagreement", "RulesWorkerError", "WorkerSetupError", "chunk_key",
    "chunk_seed", "differences", "disagreements", "plan", "run_chunk", "run_jax", "run_rules_chunk", "run_simulator",
    "run_spec", "scenario_text", "worker_oracle", *_GENERATING,
]
