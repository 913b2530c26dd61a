"""Ready-made scenario files (TOML) and the runner that loads, validates and plays them on the simulator.

A scenario's `[collective] op` is any collective of `collectives.REGISTRY`, with the parameters and rules
its definition gives.

Its rooms: this package loads, checks and runs scenario files (and reads and writes results files);
`scenarios.sweep` measures timing sweeps, `scenarios.campaign` runs the differential campaign,
`scenarios.fleet` spreads their jobs over Dask workers, and `scenarios.cli` is the `meshsim` command.
"""

from scenarios._address_space import address_space_limit
from scenarios._consent import CodeNotAllowedError, TimeLimitError, refuse_script, user_code
from scenarios._errors import ScenarioError
from scenarios._explore import explore
from scenarios._load import Scenario, load
from scenarios._program import Pass, ProgramResult, ProgramScenario, run_forward
from scenarios._results import append_row, open_for_append, read_rows, write_csv
from scenarios._runner import Provenance, ScenarioResult, run

__all__ = ["CodeNotAllowedError", "Pass", "ProgramResult", "ProgramScenario", "Provenance", "Scenario",
           "ScenarioError", "ScenarioResult", "TimeLimitError", "address_space_limit", "append_row", "explore", "load",
           "open_for_append", "read_rows", "refuse_script", "run", "run_forward", "user_code", "write_csv"]
