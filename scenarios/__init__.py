"""Ready-made scenario files (TOML) and the runner that loads, validates and plays them on the simulator.

A scenario's `[collective] op` is any collective of `collectives.REGISTRY`, with the parameters and rules
its definition gives.
"""

from scenarios._consent import CodeNotAllowedError, TimeLimitError
from scenarios._errors import ScenarioError
from scenarios._explore import explore
from scenarios._load import Scenario, load
from scenarios._program import ProgramResult, ProgramScenario
from scenarios._runner import Provenance, ScenarioResult, run

__all__ = ["CodeNotAllowedError", "ProgramResult", "ProgramScenario", "Provenance", "Scenario", "ScenarioError",
           "ScenarioResult", "TimeLimitError", "explore", "load", "run"]
