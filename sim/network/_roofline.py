"""`Roofline`: how long a device takes for a piece of local work, from its peak rates.

A piece of work is counted as XLA's cost analysis counts it (`compiled.cost_analysis()`): floating-point
operations, bytes moved to and from the device's memory, and transcendental functions (exp, log, tanh...).
Its time is the slowest of the rates it needs, the roofline:

    max(flops / peak_flops_per_s, bytes_accessed / memory_bytes_per_s, transcendentals / transcendentals_per_s)

Transcendentals run on units of their own (a GPU's special function units, 16 results per clock per
multiprocessor on A100 and H100: CUDA C++ Programming Guide, "Arithmetic Instructions"), so when their rate
is known they are a third bound; where no rate is published (`transcendentals_per_s=None`), each counts as
one floating-point operation against the peak, a lower bound on its time.

>>> Roofline(peak_flops_per_s=1e12, memory_bytes_per_s=1e11).seconds(flops=4e9, bytes_accessed=1e8)
0.004
>>> Roofline(1e12, 1e11, transcendentals_per_s=1e10).seconds(transcendentals=1e8)
0.01
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim._errors import InvalidArgumentError, InvalidTypeError


@dataclass(frozen=True)
class Roofline:
    """A device's peak rates: floating-point operations per second (the matrix units' dense peak), bytes per
    second to and from its memory, and transcendentals per second (None: counted as flops).

    Attributes:
        peak_flops_per_s: dense floating-point operations per second (> 0).
        memory_bytes_per_s: bytes per second between the device and its memory (> 0).
        transcendentals_per_s: transcendental functions per second (> 0), or None to count each as one flop.
    """

    peak_flops_per_s: float
    memory_bytes_per_s: float
    transcendentals_per_s: float | None = None

    def __post_init__(self) -> None:
        rates = [("peak_flops_per_s", self.peak_flops_per_s), ("memory_bytes_per_s", self.memory_bytes_per_s)]
        if self.transcendentals_per_s is not None:
            rates.append(("transcendentals_per_s", self.transcendentals_per_s))
        for name, value in rates:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidTypeError(f"{name}={value!r} must be a number")
            if not (math.isfinite(value) and value > 0):
                raise InvalidArgumentError(f"{name}={value} must be a finite number > 0")

    def seconds(self, flops: float = 0.0, bytes_accessed: float = 0.0, transcendentals: float = 0.0) -> float:
        """The time of work of `flops` floating-point operations, `bytes_accessed` bytes of memory traffic and
        `transcendentals` transcendental functions: the slowest of the three bounds (see the module)."""
        if self.transcendentals_per_s is None:
            return max((flops + transcendentals) / self.peak_flops_per_s, bytes_accessed / self.memory_bytes_per_s)
        return max(flops / self.peak_flops_per_s, bytes_accessed / self.memory_bytes_per_s,
                   transcendentals / self.transcendentals_per_s)

    def describe(self) -> str:
        """The rates in a few words, e.g. '197 TFLOP/s, 819 GB/s'."""
        text = f"{self.peak_flops_per_s / 1e12:g} TFLOP/s, {self.memory_bytes_per_s / 1e9:g} GB/s"
        if self.transcendentals_per_s is not None:
            text += f", {self.transcendentals_per_s / 1e12:g} T transcendentals/s"
        return text
