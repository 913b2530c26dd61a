"""Ready-made scenario files (TOML) and the runner that loads, validates and plays them on the simulator."""

from scenarios._errors import ScenarioError
from scenarios._load import Scenario, load
from scenarios._ops import OPS, OpSpec
from scenarios._program import ProgramResult, ProgramScenario
from scenarios._runner import Provenance, ScenarioResult, run

__all__ = ["OPS", "OpSpec", "ProgramResult", "ProgramScenario", "Provenance", "Scenario", "ScenarioError",
           "ScenarioResult", "load", "run"]
