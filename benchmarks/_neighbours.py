"""A sparse neighbour exchange as one ragged_all_to_all: openxla/xla#46982's microbenchmark on the a100-hdr200
preset.

Every device sends a fixed payload to each of its 10 neighbours (the devices 1 to 5 places either side of it,
round the group) and an empty slice to every other member, so the traffic per device is the same at any
device count. A version of XLA that issues a send for every peer slice (`sim.Costs(empty_slices='pay')`,
jax 0.10.0) pays for the empty ones and grows with the device count; one that skips them stays flat.

>>> round(exchange_s(16, "ideal") * 1e6)   # 16 A100s, the links alone: 64 KiB to each neighbour
23
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import collectives
import sim

OFFSETS = (-5, -4, -3, -2, -1, 1, 2, 3, 4, 5)  # a device's neighbours, relative to it
ROWS = 64  # rows per neighbour
COLUMNS = 256  # float32 columns: 64 KiB per neighbour
FREE_COPIES = sim.CopyCost(bandwidth_bytes_per_s=1e30, run_overhead_s=0.0)


def exchange_s(devices: int, calibration: str = "measured", empty_slices: str | None = None) -> float:
    """Simulated seconds of the neighbour exchange on `devices` A100s (nodes of 4), the preset calibrated by
    `calibration`, its `empty_slices` replaced when given."""
    network = sim.Network.preset("a100-hdr200", (devices // 4, 4), calibration)
    if empty_slices is not None:
        network = replace(network, costs=replace(network.costs, empty_slices=empty_slices))
    mesh = sim.Mesh({"x": devices}, network=network, copy_cost=FREE_COPIES)
    args = _arguments(devices)
    f = sim.shard_map(lambda *a: collectives.ragged_all_to_all(*a, axis_name="x"), mesh=mesh,
                      in_specs=(sim.P("x"),) * 6, out_specs=sim.P("x"), check_vma=False)
    run = f.run(*args)
    _check(np.asarray(run.outputs), devices)
    return max(call.exit_s for call in run.calls)


def growth_s(calibration: str = "measured", empty_slices: str | None = None) -> float:
    """How much longer the exchange takes on 64 devices than on 16."""
    return exchange_s(64, calibration, empty_slices) - exchange_s(16, calibration, empty_slices)


def _arguments(n: int) -> list[np.ndarray]:
    """Per-device operands stacked along the leading axis: device i's rows for neighbour slot k hold i."""
    k = len(OFFSETS)
    operand = np.repeat(np.arange(n, dtype=np.float32), k * ROWS)[:, None] * np.ones(COLUMNS, np.float32)
    output = np.full((n * k * ROWS, COLUMNS), -1, np.float32)
    input_offsets, send_sizes = np.zeros((n, n), np.int32), np.zeros((n, n), np.int32)
    output_offsets, recv_sizes = np.zeros((n, n), np.int32), np.zeros((n, n), np.int32)
    for i in range(n):
        for slot, d in enumerate(OFFSETS):
            j = (i + d) % n
            input_offsets[i, j], send_sizes[i, j] = slot * ROWS, ROWS
            output_offsets[i, j] = OFFSETS.index(-d) * ROWS  # where device j keeps what comes from i
            recv_sizes[j, i] = ROWS
    return [operand, output, input_offsets.reshape(-1), send_sizes.reshape(-1), output_offsets.reshape(-1),
            recv_sizes.reshape(-1)]


def _check(outputs: np.ndarray, n: int) -> None:
    """Device j's slot for offset -d holds the rows of device j - d."""
    rows = outputs.reshape(n, len(OFFSETS), ROWS, COLUMNS)
    for slot, d in enumerate(OFFSETS):
        senders = (np.arange(n) + d) % n
        if not np.array_equal(rows[:, slot, 0, 0], senders.astype(np.float32)):
            raise SystemExit("the neighbour exchange wrote the wrong rows")
