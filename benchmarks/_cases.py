"""The two benchmarked exchanges, as the in-process stages see them: inputs, numpy evaluation, checks, program.

- `all_to_all`: the tiled all_to_all of `_workload` (split_axis=0, concat_axis=0).
- `ragged_all_to_all`: the uneven slices of `_ragged` over the same operand, into an output block per device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from _ragged import RaggedWorkload, numpy_ragged_all_to_all
from _workload import AXIS_NAME, DEVICES, Workload, make_input, numpy_all_to_all

import collectives
import sim
from oracles import spec


@dataclass(frozen=True)
class Case:
    """One exchange: `make_inputs()` gives the global arguments, `evaluate(*inputs)` the numpy result (the
    reference), `check(inputs, reference)` compares the reference with a second transcription, and
    `program` is one device's part under `sim.shard_map` with `in_specs`."""

    name: str
    workload: Workload
    make_inputs: Callable[[], tuple[np.ndarray, ...]]
    evaluate: Callable[..., np.ndarray]
    check: Callable[[tuple[np.ndarray, ...], np.ndarray], bool]
    transcription: str
    program: Callable[..., Any]
    in_specs: Any
    detail: str = ""


def all_to_all_case(workload: Workload) -> Case:
    """The tiled all_to_all of the global array over the 8 devices."""
    def check(inputs: tuple[np.ndarray, ...], reference: np.ndarray) -> bool:
        chunks = inputs[0].reshape(DEVICES, DEVICES, workload.chunk_rows, workload.columns)
        return bool(np.array_equal(np.swapaxes(chunks, 0, 1).reshape(reference.shape), reference))

    return Case(
        "all_to_all", workload, lambda: (make_input(workload),), lambda x: numpy_all_to_all(x, workload), check,
        "a reshape/swapaxes transcription", _all_to_all, sim.P(AXIS_NAME),
        f"{workload.size_bytes / DEVICES ** 2 / 1e6:.2f} MB per (sender, receiver) chunk")


def ragged_case(workload: Workload) -> Case:
    """The ragged_all_to_all of `RaggedWorkload(workload)`: operand, output and the four index arrays."""
    ragged = RaggedWorkload(workload)

    def make_inputs() -> tuple[np.ndarray, ...]:
        return (make_input(workload), ragged.make_output(), *ragged.index_arrays())

    def check(inputs: tuple[np.ndarray, ...], reference: np.ndarray) -> bool:
        per_device = [np.split(a, DEVICES) for a in inputs]
        expected = spec.ragged_all_to_all(*per_device, {AXIS_NAME: DEVICES}, axis_name=AXIS_NAME)
        return all(np.array_equal(e, r) for e, r in zip(expected, np.split(reference, DEVICES)))

    sizes = ragged.sizes
    detail = (f"{DEVICES * DEVICES} slices of 0 to {sizes.max()} rows ({int((sizes == 0).sum())} empty), "
              f"{ragged.moved_rows / workload.rows:.0%} of the rows move")
    return Case(
        "ragged_all_to_all", workload, make_inputs, lambda x, out, *_: numpy_ragged_all_to_all(x, out, ragged),
        check, "the executable spec (oracles.spec)", _ragged, (sim.P(AXIS_NAME),) * 6, detail)


CASES: dict[str, Callable[[Workload], Case]] = {"all_to_all": all_to_all_case, "ragged_all_to_all": ragged_case}


def _all_to_all(block: np.ndarray) -> np.ndarray:
    """One device's program: the tiled all_to_all of its block over the whole mesh axis."""
    return collectives.all_to_all(block, AXIS_NAME, 0, 0, tiled=True)


def _ragged(*args: np.ndarray) -> np.ndarray:
    """One device's program: ragged_all_to_all of its operand, output and index blocks."""
    return collectives.ragged_all_to_all(*args, axis_name=AXIS_NAME)
