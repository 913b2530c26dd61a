"""The side-by-side tables: wall seconds, GB/s and ratios of every stage, the simulated time, and memory."""

from __future__ import annotations

from _cases import Case
from _stages import Memory
from _timing import Timing
from _workload import DEVICES, DTYPE
from rich.console import Console
from rich.table import Table

_GB = 1e9


def describe(case: Case, repeat: int) -> str:
    """One line naming the exchange that was timed."""
    workload = case.workload
    return (
        f"{case.name} over {DEVICES} devices: global {DTYPE.name}{list(workload.shape)} operand = "
        f"{workload.size_bytes / _GB:.3f} GB, {workload.size_bytes / DEVICES / 1e6:.1f} MB per device, "
        f"{case.detail}; best of {repeat}"
    )


def gb_per_s(size_bytes: int, seconds: float) -> float:
    """Global array bytes moved per second, in GB/s (1 GB = 1e9 bytes)."""
    return size_bytes / _GB / seconds


def ratio(numerator: Timing | None, denominator: Timing | None) -> str:
    """`numerator`'s best time over `denominator`'s, as text ('-' if either is missing)."""
    if numerator is None or denominator is None:
        return "-"
    return f"{numerator.best_s / denominator.best_s:.2f}x"


def table(case: Case, timings: dict[str, Timing]) -> Table:
    """The table: one row per stage, then the simulator's simulated clock."""
    grid = Table(title=f"{case.name}, side by side")
    for name in ("stage", "best wall s", "all runs s", "GB/s", "/ numpy", "/ jax", "result check"):
        grid.add_column(name, justify="left" if name in ("stage", "result check") else "right")
    numpy_timing, jax_timing = timings.get("numpy"), timings.get("jax")
    size_bytes = case.workload.size_bytes
    for timing in timings.values():
        grid.add_row(
            timing.stage, f"{timing.best_s:.3f}", " ".join(f"{s:.3f}" for s in timing.runs_s),
            f"{gb_per_s(size_bytes, timing.best_s):.2f}", ratio(timing, numpy_timing),
            ratio(timing, jax_timing), timing.check,
        )
    simulated = timings.get("simulator")
    if simulated is not None and simulated.simulated_s:
        grid.add_row(
            "simulated clock", f"{simulated.simulated_s:.3e}", "",
            f"{gb_per_s(size_bytes, simulated.simulated_s):.1f}", "", "", "simulated, not wall-clock",
        )
    return grid


def memory_line(memory: Memory) -> str:
    """Peak resident memory added by one call, in GB and as a ratio of the input plus output bytes."""
    moved = memory.input_bytes + memory.output_bytes

    def added(what: str, size: int | None) -> str:
        return f"{what} n/a" if size is None else f"{what} {size / _GB:.2f} GB ({size / moved:.2f}x)"

    return (f"peak resident memory added by one call, as a ratio of input + output = {moved / _GB:.2f} GB: "
            + ", ".join([added("simulator, repeated call", memory.repeated_call_bytes),
                         added("simulator, first call", memory.first_call_bytes),
                         added("numpy", memory.numpy_bytes)]))


def show(case: Case, timings: dict[str, Timing], memory: Memory | None, console: Console) -> None:
    """Print the table, each stage's note, the memory figures and the two headline ratios."""
    console.print(table(case, timings))
    for timing in timings.values():
        if timing.note:
            console.print(f"  {timing.stage}: {timing.note}")
    if memory is not None:
        console.print(f"  {memory_line(memory)}")
    simulator = timings.get("simulator")
    console.print(
        f"{case.name}: simulator / numpy = {ratio(simulator, timings.get('numpy'))}, "
        f"simulator / jax = {ratio(simulator, timings.get('jax'))} (best wall-clock times, same run)"
    )
