"""ragged_all_to_all's algorithms, its explain text and how a sweep feeds it, beside its protocol in `_ragged`.

- 'direct': every member sends each of its non-empty slices at once, one message per slice.
- 'pairwise' (n steps): at step k member i sends its slices for member i + k, then receives member i - k's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives._algorithm import auto_of
from collectives._exchanging import direct, pairwise

DIRECT = direct("direct: every member sends each of its non-empty slices to the member it is for, all at once: one "
                "message per slice, carrying its rows and the output offset its sender gives. Each receiver "
                "writes slice j at that offset of its output; rows no slice writes keep the output's values.",
                messages=False)
PAIRWISE = pairwise("pairwise: in step k member i sends its slices for member i + k, then receives the slices of "
                    "member i - k before the next step; every slice lands where 'direct' puts it.", messages=False)
ALGORITHMS = (DIRECT, PAIRWISE)
ALGORITHMS += (auto_of(ALGORITHMS),)


def teach(params: dict[str, Any], n: int) -> list[str]:
    """Where each slice comes from and lands (the SEND and RECEIVE loops of the docs), then the algorithm."""
    algorithm = next(a for a in ALGORITHMS if a.name == params.get("algorithm", "direct"))
    return [f"Protocol: each device's send table cuts its operand into slices along the leading axis: slice j "
            f"is rows input_offsets[j] : input_offsets[j] + send_sizes[j], for group member j // k of the {n} "
            f"(k slices per member). The sender also says where the slice lands: at row output_offsets[j] of the "
            f"receiver's output. A receiver's recv_sizes must match what its senders send it.",
            f"Algorithm {algorithm.text}"]


def sweep_inputs(x: np.ndarray, index: np.ndarray, count: int, n: int) -> tuple[np.ndarray, ...]:
    """Even splits for a sweep: every device's operand is n blocks of `count` rows, block j to member j;
    the output buffers start zeroed."""
    starts = np.tile(np.arange(n, dtype=np.int32) * count, len(index))
    sizes = np.full(len(index) * n, count, dtype=np.int32)
    return x, np.zeros_like(x), starts, sizes, np.repeat(index * count, n).astype(np.int32), sizes
