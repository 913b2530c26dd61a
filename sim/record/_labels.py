"""Where a collective call was made: the label a call is recorded with (`CallRecord.label`).

A device's `Program.label` is what the device runs now, set by `sim.labelled` (the bridge sets the user's
source line and JAX's name stack around every collective it runs); work started with `sim.start` keeps the
label it was started under, its own while it runs. A call entered without one is labelled
with the line of the program that made it while `located()` is in effect (the faces turn it on for the runs
they show: finding the line walks the device's stack, which a plain run does not pay for).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_SIM = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY = (_SIM + os.sep, os.path.join(os.path.dirname(_SIM), "collectives") + os.sep)
_locating = [0]  # how many `located()` blocks are open


@contextmanager
def located() -> Iterator[None]:
    """Within the block, calls entered without a label are labelled with the program line that made them."""
    _locating[0] += 1
    try:
        yield
    finally:
        _locating[0] -= 1


def call_label(label: str | None, suspended: Any) -> str | None:
    """The label of a call a device's program (or work it started, `sim.start`) enters now, suspended in the
    greenlet `suspended` under `label` (its `sim.labelled` label): `label`, else (inside `located()`) the
    innermost line of the greenlet's stack outside the simulator and the collectives ('file:line
    (function)'), else None."""
    if label is not None or not _locating[0]:
        return label
    frame: FrameType | None = suspended.gr_frame
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not _library(path):
            return f"{_short(frame.f_code.co_filename)}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back
    return None


def _library(path: str) -> bool:
    """Whether `path` is a file of the simulator or the collectives (or of greenlet, which drives them)."""
    return path.startswith(_LIBRARY) or f"{os.sep}greenlet{os.sep}" in path


def _short(path: str) -> str:
    """A file name as a label shows it: relative to the working directory when inside it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if relative.startswith("..") else relative
