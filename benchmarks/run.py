"""Time a ~1 GB tiled all_to_all and ragged_all_to_all on 8 devices three ways each: simulator, numpy, JAX.

    python benchmarks/run.py                 # 1000 MB global operand, best of 5
    python benchmarks/run.py --quick         # 64 MB, for a fast look
    python benchmarks/run.py --size-mb 250 --repeat 5 --profile --case ragged_all_to_all

Every stage's result is checked against the numpy reference before its time is shown, so a wrong answer
cannot be timed. See BENCHMARKS.md for what each column means.
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

# The working tree comes first: an editable install made before a package had its `__init__.py` would
# otherwise resolve it as an empty namespace package.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from _cases import CASES, Case
from _jax_stage import WorkerFailed, time_jax
from _profile import report as profile_report
from _report import describe, show
from _stages import Memory, ResultMismatch, measure_memory, time_numpy, time_simulator
from _timing import Timing, peak_resident_gib
from _workload import digest, workload_of
from rich.console import Console

DEFAULT_SIZE_MB = 1000.0
QUICK_SIZE_MB = 64.0


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line; `--size-mb` wins over `--quick`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=None,
                        help=f"global array size in MB (1 MB = 1e6 bytes); default {DEFAULT_SIZE_MB:g}")
    parser.add_argument("--quick", action="store_true", help=f"a small run: {QUICK_SIZE_MB:g} MB")
    parser.add_argument("--repeat", type=int, default=5,
                        help="timed repetitions per stage (default 5); the best is shown")
    parser.add_argument("--no-jax", action="store_true", help="skip the JAX stage (no jax installed)")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one simulator call")
    parser.add_argument("--case", choices=sorted(CASES), action="append",
                        help="time only this exchange (repeatable); default both")
    args = parser.parse_args(argv)
    if args.size_mb is None:
        args.size_mb = QUICK_SIZE_MB if args.quick else DEFAULT_SIZE_MB
    if args.size_mb <= 0 or args.repeat < 1:
        parser.error(f"--size-mb={args.size_mb} must be > 0 and --repeat={args.repeat} must be >= 1")
    return args


def measure(case: Case, args: argparse.Namespace, console: Console) -> tuple[dict[str, Timing], Memory, str]:
    """Every stage's timing of `case`, in table order, the memory one call adds, and the profile text
    (empty unless asked for).

    The in-process arrays are dropped before the JAX worker starts, so the two processes never hold
    their gigabytes at the same time.
    """
    inputs = case.make_inputs()
    console.print(f"[dim]{case.name}: timing numpy ...[/dim]")
    numpy_timing, reference = time_numpy(case, inputs, args.repeat)
    expected_digest = digest(reference)
    console.print(f"[dim]{case.name}: timing simulator ...[/dim]")
    simulator_timing = time_simulator(case, inputs, reference, args.repeat)
    del reference
    gc.collect()
    console.print(f"[dim]{case.name}: measuring memory ...[/dim]")
    memory = measure_memory(case, inputs)
    profile_text = profile_report(case, inputs) if args.profile else ""
    del inputs
    gc.collect()
    timings = {"numpy": numpy_timing}
    if not args.no_jax:
        console.print(f"[dim]{case.name}: timing jax (subprocess, 8 CPU devices) ...[/dim]")
        timings["jax"] = time_jax(case.name, case.workload, args.repeat, expected_digest)
    timings["simulator"] = simulator_timing
    return timings, memory, profile_text


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the tables; 1 if a stage's result disagrees with numpy."""
    args = parse(sys.argv[1:] if argv is None else argv)
    workload = workload_of(args.size_mb * 1e6)
    console = Console(width=200) if not sys.stdout.isatty() else Console()
    for name in args.case or list(CASES):
        case = CASES[name](workload)
        console.print(describe(case, args.repeat))
        try:
            timings, memory, profile_text = measure(case, args, console)
        except (ResultMismatch, WorkerFailed) as error:
            console.print(f"[bold red]benchmark aborted:[/bold red] {error}")
            return 1
        show(case, timings, memory, console)
        if profile_text:
            print(profile_text)
    peak_gib = peak_resident_gib()
    if peak_gib is not None:
        console.print(f"peak resident memory of this process (numpy and simulator stages): {peak_gib:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
