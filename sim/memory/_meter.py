"""`MemoryMeter`: the bytes every device memory of one run holds, counted against the run's memory limit.

A run's memories only grow (a bump allocator frees nothing until the run is dropped), so the bytes they hold
are the sum of every allocation: inputs held, results, staging buffers, received blocks. Each allocation is
charged before its bytes exist; the one that would take the total past the limit raises instead.

>>> meter = MemoryMeter(1000)
>>> meter.charge(0, "a new array", np.dtype("float32"), (100,), 400)
>>> meter.held_bytes
400
>>> try:
...     meter.charge(1, "a new array", np.dtype("float32"), (200,), 800)
... except MemoryLimitError as error:
...     print(str(error)[:101])
device 1: a new array float32[200] (800 B) would bring the run's device memory from 400 B to 1.17 KiB
"""

from __future__ import annotations

import numpy as np

from sim._budget import check_limit, format_bytes
from sim._errors import MemoryLimitError

_KNOB = ("raise the limit with --max-memory SIZE (meshsim) or max_memory_bytes=N (scenarios.load, sim.Mesh), or "
         "for a timing study pass abstract payloads (sim.ShapeDtypeStruct operands, payload = \"abstract\" in a "
         "scenario), which hold no bytes")


class MemoryMeter:
    """The bytes a run's device memories hold, and the limit they may not pass.

    Abstract arrays (`sim.memory._abstract`) hold nothing: their logical bytes are counted in
    `abstract_bytes`, apart, and no limit applies to them.

    `max_memory_bytes` None is the default limit, half the machine's memory (`sim.default_max_memory_bytes`).
    """

    def __init__(self, max_memory_bytes: int | None = None) -> None:
        self.max_memory_bytes = check_limit(max_memory_bytes)
        self.held_bytes = 0
        self.abstract_bytes = 0  # what the run's abstract arrays would hold: counted, never allocated

    def charge(self, device: int, what: str, dtype: np.dtype, shape: tuple[int, ...], size: int) -> None:
        """Count `size` more bytes on `device` (`what`: which kind of array, of `dtype` and `shape`).

        Raises:
            MemoryLimitError: the run's memories would then hold more than `max_memory_bytes`; nothing is
                counted. The message names the device, the array, the total it would make and the limit.
        """
        total = self.held_bytes + size
        if total > self.max_memory_bytes:
            limit = self.max_memory_bytes
            raise MemoryLimitError(
                f"device {device}: {what} {dtype}{list(shape)} ({format_bytes(size)}) would bring the run's device "
                f"memory from {format_bytes(self.held_bytes)} to {format_bytes(total)}, more than "
                f"max_memory_bytes={limit} ({format_bytes(limit)}); {_KNOB}")
        self.held_bytes = total
