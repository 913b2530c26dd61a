"""Scenario paths: refusing the package's own code, and running a scenario that is a Python script."""

from __future__ import annotations

import importlib.util
import runpy
from pathlib import Path

import scenarios
from layouts import MeshError
from scenarios import ScenarioError, TimeLimitError, address_space_limit, refuse_script, user_code
from scenarios._errors import read_text

# meshsim's packages: their files are its code, never scenarios (but for the scenario library's scripts).
_PACKAGES = ("layouts", "sim", "collectives", "oracles", "scenarios")
_LIBRARY = Path(scenarios.__file__).resolve().parent / "library"


def check_path(path: str) -> None:
    """Raise `ScenarioError` when `path` is part of meshsim's own packages (outside `scenarios/library/`).

    A module such as `scenarios/_load.py` runs without error and prints nothing, which would read as a
    scenario that did nothing; the rule is that scenario files live outside the packages' code.
    """
    where = Path(path).resolve()
    if where.is_relative_to(_LIBRARY):
        return
    for package in _PACKAGES:
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            if where.is_relative_to(Path(folder).resolve()):
                raise ScenarioError(f"{path}: part of meshsim's own code (the {package!r} package), not a scenario; "
                                    f"a scenario is a TOML file or a Python script outside the packages, "
                                    "e.g. scenarios/library/moe_dispatch.toml")


def run_script(path: str, json_output: bool, allow_code: bool, max_memory_bytes: int | None = None) -> int:
    """Run the Python scenario at `path` as `__main__`; it prints its own results. Returns the exit code 0.

    The script runs under the address-space limit `max_memory_bytes` sets (`scenarios.address_space_limit`;
    None for the default, half the machine's memory).

    Raises:
        CodeNotAllowedError: `allow_code` is False (nothing ran; the message shows the script's first lines).
        ScenarioError: the script ran out of its memory limit; `json_output` was asked for (a script's output
            is its own, not a result document);
            the file cannot be read; the script called `sys.exit` or was interrupted; or it raised a
            `MeshError` (the message carries the error and its notes, e.g. the device it was raised on).
    """
    if json_output:
        raise ScenarioError(f"{path}: --json needs a TOML scenario; a Python scenario prints its own output "
                            f"(run it without --json)")
    read_text(path, "scenario")  # a regular, readable file (a pipe would block the refusal's reading)
    if not allow_code:
        raise refuse_script(path)
    with user_code(path), address_space_limit(max_memory_bytes, path):
        try:
            runpy.run_path(path, run_name="__main__")
        except (TimeLimitError, MemoryError):
            raise
        except MeshError as error:
            notes = "".join(f"\n  {note}" for note in getattr(error, "__notes__", ()))
            raise ScenarioError(f"{path}: {type(error).__name__}: {error}{notes}") from error
    return 0

