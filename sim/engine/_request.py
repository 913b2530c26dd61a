"""`Request`: what a device program may hand its SimPy process besides a collective call."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any


class Request:
    """A step a device program asks its process to carry out in simulated time (local work, starting or
    waiting for a lane: `sim.engine._lanes`): `drive(program)` is a SimPy generator returning what the
    program gets back."""

    def drive(self, program: Any) -> Generator:
        raise NotImplementedError
