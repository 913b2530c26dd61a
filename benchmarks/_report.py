"""The side-by-side table: wall seconds, GB/s and ratios of every stage, plus the simulated time."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from _timing import Timing
from _workload import DEVICES, DTYPE, Workload

_GB = 1e9


def describe(workload: Workload, repeat: int) -> str:
    """One line naming the exchange that was timed."""
    return (
        f"tiled all_to_all over {DEVICES} devices, split_axis=0, concat_axis=0: global {DTYPE.name}"
        f"{list(workload.shape)} = {workload.size_bytes / _GB:.3f} GB, "
        f"{workload.size_bytes / DEVICES / 1e6:.1f} MB per device, "
        f"{workload.size_bytes / DEVICES ** 2 / 1e6:.2f} MB per (sender, receiver) chunk; best of {repeat}"
    )


def gb_per_s(size_bytes: int, seconds: float) -> float:
    """Global array bytes moved per second, in GB/s (1 GB = 1e9 bytes)."""
    return size_bytes / _GB / seconds


def ratio(numerator: Timing | None, denominator: Timing | None) -> str:
    """`numerator`'s best time over `denominator`'s, as text ('-' if either is missing)."""
    if numerator is None or denominator is None:
        return "-"
    return f"{numerator.best_s / denominator.best_s:.2f}x"


def table(workload: Workload, timings: dict[str, Timing]) -> Table:
    """The table: one row per stage, then the simulator's simulated clock."""
    grid = Table(title="all_to_all, side by side")
    for name in ("stage", "best wall s", "all runs s", "GB/s", "/ numpy", "/ jax", "result check"):
        grid.add_column(name, justify="left" if name in ("stage", "result check") else "right")
    numpy_timing, jax_timing = timings.get("numpy"), timings.get("jax")
    for timing in timings.values():
        grid.add_row(
            timing.stage, f"{timing.best_s:.3f}", " ".join(f"{s:.3f}" for s in timing.runs_s),
            f"{gb_per_s(workload.size_bytes, timing.best_s):.2f}", ratio(timing, numpy_timing),
            ratio(timing, jax_timing), timing.check,
        )
    simulated = timings.get("simulator")
    if simulated is not None and simulated.simulated_s:
        grid.add_row(
            "simulated clock", f"{simulated.simulated_s:.3e}", "",
            f"{gb_per_s(workload.size_bytes, simulated.simulated_s):.1f}", "", "", "simulated, not wall-clock",
        )
    return grid


def show(workload: Workload, repeat: int, timings: dict[str, Timing], console: Console) -> None:
    """Print the table, each stage's note and the two headline ratios."""
    console.print(table(workload, timings))
    for timing in timings.values():
        if timing.note:
            console.print(f"  {timing.stage}: {timing.note}")
    simulator = timings.get("simulator")
    console.print(
        f"simulator / numpy = {ratio(simulator, timings.get('numpy'))}, "
        f"simulator / jax = {ratio(simulator, timings.get('jax'))} (best wall-clock times, same run)"
    )
