"""The commands around a simulation against the simulation alone: `meshsim run`, `draw` and `explain` of an
all_gather scenario over many devices (one float per device), side by side in one process, best of N.

    python benchmarks/commands.py                        # 1000 devices, run / draw / explain, best of 3
    python benchmarks/commands.py --devices 300 --repeat 5 --commands run draw
    python benchmarks/commands.py --processes            # also each as a fresh process (start-up included)

In process, each repetition times the simulation alone (load the scenario, make its `sim.shard_map` call
and run it, as a script does) and then each command through `scenarios.cli.main` (loading, simulating, provenance and
printing, output to /dev/null), one after the other, so a load on the machine falls on all alike; the
table shows each one's best time and its ratio to the simulation's best. With `--processes` the same again as
fresh processes: `meshsim COMMAND` against a Python process that imports meshsim, loads the scenario and
simulates it, so both pay the interpreter's start and the imports.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))

import scenarios  # noqa: E402
from scenarios._runner import mapped_call  # noqa: E402
from scenarios.cli import main  # noqa: E402

_SCENARIO = """title = "all_gather over {devices} devices"

[mesh]
axes = {{i = {devices}}}

[collective]
op = "all_gather"
axis_name = "i"

[inputs]
seed = 0
shape = [1]
"""
_ALONE = ("import sys; import scenarios; from scenarios._runner import mapped_call; "
          "mapped, args = mapped_call(scenarios.load(sys.argv[1])); mapped.run(*args)")
COMMANDS = ("run", "draw", "explain", "trace", "check")


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1000, help="devices of the all_gather (default 1000)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions; the best is shown (default 3)")
    parser.add_argument("--commands", nargs="+", choices=COMMANDS, default=["run", "draw", "explain"],
                        help="the commands to time (default: run draw explain)")
    parser.add_argument("--processes", action="store_true", help="also time each as a fresh process")
    args = parser.parse_args(argv)
    if args.devices < 1 or args.repeat < 1:
        parser.error(f"--devices={args.devices} and --repeat={args.repeat} must be >= 1")
    return args


def _argv(command: str, path: str, folder: str) -> list[str]:
    """The command line of `command` on `path`, writing any file into `folder`."""
    if command == "draw":
        return ["draw", path, "-o", os.path.join(folder, "picture.svg")]
    if command == "trace":
        return ["trace", path, "-o", os.path.join(folder, "trace.json")]
    return [command, path]


def _quiet(argv: list[str]) -> Callable[[], None]:
    """`meshsim argv` in this process, its output thrown away; a failing command stops the benchmark."""
    def call() -> None:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
            code = main(argv)
        if code:
            raise SystemExit(f"meshsim {' '.join(argv)} exited {code}")
    return call


def _process(argv: list[str]) -> Callable[[], None]:
    """`argv` as a fresh process, its output thrown away; a failing one stops the benchmark."""
    def call() -> None:
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    return call


def _simulate(path: str) -> None:
    """The scenario's simulation alone, as a script runs it: load the file, make the call, run it."""
    mapped, arrays = mapped_call(scenarios.load(path))
    mapped.run(*arrays)


def best_times(stages: dict[str, Callable[[], None]], repeat: int,
               clock: Callable[[], float] = time.perf_counter) -> dict[str, tuple[float, float]]:
    """Each stage's best wall time and best CPU time (of `clock`: this process's, or its children's) over
    `repeat` rounds, the stages run one after the other in each round."""
    best = dict.fromkeys(stages, (float("inf"), float("inf")))
    for _ in range(repeat):
        for name, stage in stages.items():
            gc.collect()
            start, cpu = time.perf_counter(), clock()
            stage()
            wall, used = time.perf_counter() - start, clock() - cpu
            best[name] = (min(best[name][0], wall), min(best[name][1], used))
    return best


def _children_cpu() -> float:
    """The CPU seconds this process's finished children have used."""
    times = os.times()
    return times.children_user + times.children_system


def show(title: str, best: dict[str, tuple[float, float]], alone: str) -> None:
    """A markdown table: each stage's best wall and CPU seconds and their ratios to `alone`'s."""
    print(f"\n{title}\n\n| stage | best wall s | / simulation | best CPU s | / simulation |\n"
          "| --- | ---: | ---: | ---: | ---: |")
    wall, cpu = best[alone]
    for name, (seconds, used) in best.items():
        print(f"| {name} | {seconds:.3f} | {seconds / wall:.2f}x | {used:.3f} | {used / cpu:.2f}x |")


def main_(argv: list[str] | None = None) -> int:
    """Time the simulation and each command, in process and (with `--processes`) as processes."""
    args = parse(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, f"all_gather_{args.devices}.toml")
        Path(path).write_text(_SCENARIO.format(devices=args.devices))
        stages: dict[str, Callable[[], None]] = {"simulation alone": lambda: _simulate(path)}
        stages.update({f"meshsim {c}": _quiet(_argv(c, path, folder)) for c in args.commands})
        print(f"all_gather of one float32 per device over {args.devices} devices, best of {args.repeat}")
        show("In one process (the simulation alone: load the scenario, make its shard_map call, run it)",
             best_times(stages, args.repeat, time.process_time), "simulation alone")
        if args.processes:
            meshsim = [sys.executable, "-m", "scenarios.cli"]
            stages = {"simulation alone": _process([sys.executable, "-c", _ALONE, path])}
            stages.update({f"meshsim {c}": _process([*meshsim, *_argv(c, path, folder)]) for c in args.commands})
            show("As fresh processes (the simulation alone: import, load, simulate)",
                 best_times(stages, args.repeat, _children_cpu), "simulation alone")
    return 0


if __name__ == "__main__":
    sys.exit(main_())
