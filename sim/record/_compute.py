"""`ComputeRecord`: a span of local work on one device, on the device's compute track.

A device program charges its local work with `sim.compute` (counts timed by the network's `sim.Roofline`, or
seconds); the engine records each piece as it runs, beside the messages of the trace (`Trace.computes`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ComputeRecord:
    """One piece of local work: on `device`, from `start_s` to `end_s`, of `flops` floating-point operations,
    `bytes_accessed` bytes of memory traffic and `transcendentals` transcendental functions (zeros when it
    was charged in seconds), under `name` (the user's label, or '' for none). `start_s <= end_s`.

    >>> ComputeRecord(0, 0.0, 2e-6, "matmul", flops=4e6).duration_s
    2e-06
    """

    device: int
    start_s: float
    end_s: float
    name: str = ""
    flops: float = 0.0
    bytes_accessed: float = 0.0
    transcendentals: float = 0.0

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict:
        """Plain JSON-ready fields."""
        return asdict(self)
