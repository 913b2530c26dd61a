"""The benchmark's workload: the global array, its per-device blocks, the numpy exchange and a digest.

Everything here needs numpy only, so the JAX worker process can share it without importing the simulator.
The exchange is a tiled all_to_all over `DEVICES` devices with split_axis=0 and concat_axis=0: device i's
block is cut into `DEVICES` chunks of rows, chunk j goes to device j, and device j stacks the chunks it
receives in sender order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

DEVICES = 8
AXIS_NAME = "x"
DTYPE = np.dtype(np.float32)
COLUMNS = 1250
SEED = 20240611
_ROW_MULTIPLE = DEVICES * DEVICES


@dataclass(frozen=True)
class Workload:
    """The global array's shape: `rows` x `COLUMNS` float32, rows a multiple of DEVICES**2."""

    rows: int
    columns: int = COLUMNS

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.columns)

    @property
    def size_bytes(self) -> int:
        """Bytes of the whole global array (every device's block together)."""
        return self.rows * self.columns * DTYPE.itemsize

    @property
    def block_rows(self) -> int:
        """Rows one device holds."""
        return self.rows // DEVICES

    @property
    def chunk_rows(self) -> int:
        """Rows one device sends to each peer."""
        return self.block_rows // DEVICES


def workload_of(size_bytes: float) -> Workload:
    """The workload whose global array is closest to `size_bytes` (at least one chunk row per pair)."""
    if size_bytes <= 0:
        raise ValueError(f"size_bytes={size_bytes} must be > 0")
    row_bytes = COLUMNS * DTYPE.itemsize
    multiples = max(1, round(size_bytes / (row_bytes * _ROW_MULTIPLE)))
    return Workload(rows=multiples * _ROW_MULTIPLE)


def make_input(workload: Workload, seed: int = SEED) -> np.ndarray:
    """The global input array, the same bytes in every process for the same workload and seed."""
    return np.random.default_rng(seed).standard_normal(workload.shape, dtype=DTYPE)


def numpy_all_to_all(x: np.ndarray, workload: Workload) -> np.ndarray:
    """The reference exchange: every (sender, receiver) chunk copied straight into the receiver's block.

    Returns the global output: device j's block (rows j*block_rows onward) holds, in sender order i,
    chunk j of device i's input block.
    """
    out = np.empty_like(x)
    senders = np.split(x, DEVICES)
    receivers = np.split(out, DEVICES)
    step = workload.chunk_rows
    for j, received in enumerate(receivers):
        for i, sent in enumerate(senders):
            received[i * step:(i + 1) * step] = sent[j * step:(j + 1) * step]
    return out


def digest(array: np.ndarray) -> str:
    """A short hash of `array`'s bytes in C order, to compare results across processes."""
    data = np.ascontiguousarray(array)
    return hashlib.blake2b(memoryview(data).cast("B"), digest_size=16).hexdigest()
