"""`explore`: a scenario run under seeded arrival orders (`sim.explore`), its failures as scenario errors."""

from __future__ import annotations

import sim
from scenarios._address_space import address_space_limit
from scenarios._errors import ScenarioError
from scenarios._load import Scenario
from scenarios._program import ProgramScenario, failed_at
from scenarios._runner import mapped_call


def explore(scenario: Scenario | ProgramScenario, orders: int, seed: int = 0) -> sim.OrderReport:
    """Run `scenario` in the default order and under `orders` seeded perturbations; report what changes.

    A collective scenario's rows are counted within each device's result; a program's within each
    device's block of each output.

    Raises:
        ScenarioError: the default-order run fails (the simulator rejects the inputs, or the program's
            own code raises); bad `orders` or `seed`.
    """
    if isinstance(scenario, ProgramScenario):
        function, args, what = scenario.function, scenario.args, "the program"
    else:
        (function, args), what = mapped_call(scenario), f"[collective] op={scenario.op!r}"
    try:
        with address_space_limit(scenario.mesh.max_memory_bytes, scenario.path):
            return sim.explore(function, *args, orders=orders, seed=seed,
                               stacked=not isinstance(scenario, ProgramScenario))
    except ScenarioError:  # out of memory, said in one line
        raise
    except sim.MeshError as error:
        raise ScenarioError(f"{scenario.path}: the simulator rejected {what}: {error}") from error
    except Exception as error:  # a program's source is the file's own code: its failures are the file's errors
        raise ScenarioError(f"{failed_at(scenario.path, error)}: [program] source failed: {type(error).__name__}: "
                            f"{error}") from error
