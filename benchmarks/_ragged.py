"""The ragged workload: uneven slices of every device's rows, some empty, sent to every device.

Numpy only, so the JAX worker shares it. Device i's operand block holds `sizes[i, j]` rows for device j,
packed in destination order from row 0 (`input_offsets`); device j stacks what it receives in sender order
from row 0 of its output block (`output_offsets`), and rows past what it receives keep the output's
initial value (`OUTPUT_FILL`). The sizes come from a fixed seed: uneven, about one slice in seven empty,
and scaled so that no device sends or receives more rows than its block holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from _workload import DEVICES, DTYPE, SEED, Workload

OUTPUT_FILL = -1.0
INDEX_DTYPE = np.dtype(np.int32)  # JAX's default integer type
_EMPTY_FRACTION = 0.15


@dataclass(frozen=True)
class RaggedWorkload:
    """The operand's shape (that of the all_to_all workload) and the seed of the slice sizes."""

    workload: Workload
    seed: int = SEED

    @cached_property
    def sizes(self) -> np.ndarray:
        """`sizes[i, j]`: rows device i sends to device j."""
        rng = np.random.default_rng(self.seed)
        weights = rng.uniform(0.5, 1.5, (DEVICES, DEVICES))
        weights[rng.random((DEVICES, DEVICES)) < _EMPTY_FRACTION] = 0.0
        weights[0, 1] = 0.0  # at least one empty slice, whatever the seed
        most = max(weights.sum(axis=1).max(), weights.sum(axis=0).max())
        return np.floor(weights * (self.workload.block_rows / most)).astype(np.int64)

    @property
    def input_offsets(self) -> np.ndarray:
        """`[i, j]`: where device i's slice for device j starts in its operand block."""
        return np.cumsum(self.sizes, axis=1) - self.sizes

    @property
    def output_offsets(self) -> np.ndarray:
        """`[i, j]`: where device i's slice lands in device j's output block."""
        return np.cumsum(self.sizes, axis=0) - self.sizes

    @property
    def moved_rows(self) -> int:
        """Rows that travel, over all slices."""
        return int(self.sizes.sum())

    def index_arrays(self) -> tuple[np.ndarray, ...]:
        """input_offsets, send_sizes, output_offsets, recv_sizes as global arrays split by `P('x')`: device
        i's entries are `[i * DEVICES:(i + 1) * DEVICES]`."""
        sizes = self.sizes
        arrays = (self.input_offsets, sizes, self.output_offsets, sizes.T)
        return tuple(np.ascontiguousarray(a, dtype=INDEX_DTYPE).reshape(-1) for a in arrays)

    def make_output(self) -> np.ndarray:
        """The global `output` argument: every device's initial output block, all `OUTPUT_FILL`."""
        return np.full(self.workload.shape, OUTPUT_FILL, DTYPE)


def numpy_ragged_all_to_all(operand: np.ndarray, output: np.ndarray, ragged: RaggedWorkload) -> np.ndarray:
    """The reference: a copy of `output` with every slice copied from the sender's rows to the receiver's."""
    out = output.copy()
    rows = ragged.workload.block_rows
    sizes, sources, targets = ragged.sizes, ragged.input_offsets, ragged.output_offsets
    for i in range(DEVICES):
        for j in range(DEVICES):
            size = sizes[i, j]
            if size:
                source, target = i * rows + sources[i, j], j * rows + targets[i, j]
                out[target:target + size] = operand[source:source + size]
    return out
