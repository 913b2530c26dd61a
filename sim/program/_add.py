"""The arithmetic of a reduction, timed and traced: a device adding received data into its partial result.

A reducing protocol calls `add_step` where it adds what it received; the device spends the bytes added over
its network's `Costs.reduce_bytes_per_s` (nothing by default), and the step becomes a `CopyRecord` of kind
"add" in the run's trace.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from sim.engine._port import Port
from sim.record._trace import CopyRecord


def add_step(port: Port, size_bytes: int, **detail: Any) -> Generator:
    """Spend the time `port`'s device takes to add `size_bytes` of received data and record it; nothing when
    adding is free (`Costs.reduce_bytes_per_s` infinite)."""
    duration_s = port.transport.costs.reduce_s(size_bytes)
    if duration_s <= 0:
        return
    env = port.transport.env
    start_s = float(env.now)
    port.transport.trace.add(CopyRecord(port.device, port.device, size_bytes, start_s, start_s, start_s + duration_s,
                                        port.collective.name, port.call, dict(detail), kind="add"))
    yield env.timeout(duration_s)
