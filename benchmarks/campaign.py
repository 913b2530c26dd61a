"""Time the same JAX-checked differential campaign on 1 and on 2 local Dask workers, and their ratio.

    python benchmarks/campaign.py                  # 1,000 cases over every collective, seed 0
    python benchmarks/campaign.py --cases 300 --workers 1 2 4

The campaign is the one `meshsim campaign` runs (`scenarios.campaign._campaign`): the cases are spread evenly over
the registered collectives and cut into the same jobs for every worker count, so each run checks exactly
the same cases (the table checks that the counts agree). A run's wall time counts from the start of its
cluster to its last result: starting the workers and their JAX processes is part of what a user waits for.
Exits 1 if any case disagrees.

Columns: the wall time, cases per second, the cases checked and agreeing, the seconds spent starting the
cluster, the jobs' wall seconds and processor seconds (the Dask worker and its JAX process) summed over
jobs, the most job seconds one worker spent, and the machine's 1-minute load average at the end. When the
jobs' wall seconds grow with the workers but their processor seconds do not, the workers were waiting for
a core (other processes on the machine), not doing more work.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import collectives
from scenarios.campaign import plan
from scenarios.fleet import Job, fleet, run_jobs


def jobs_for(cases: int, seed: int) -> list[Job]:
    """`cases` cases spread evenly over the collectives (the first ones take the remainder), their chunks
    interleaved as `meshsim campaign` interleaves them."""
    ops = list(collectives.REGISTRY)
    share, extra = divmod(cases, len(ops))
    per_op = [plan([op], share + (k < extra), seed) for k, op in enumerate(ops) if share + (k < extra)]
    return [job for chunk in itertools.zip_longest(*per_op) for job in chunk if job is not None]


def timed(workers: int, jobs: list[Job]) -> tuple[float, float, dict[str, dict]]:
    """Run `jobs` on a fresh local cluster of `workers`: the wall time to the last result, the part of it
    spent starting the cluster, and each job's record."""
    records: dict[str, dict] = {}
    start = time.perf_counter()
    with fleet(workers=workers) as client:
        ready_s = time.perf_counter() - start
        run_jobs(client, jobs, lambda job, record: records.update({job.key: record}))
        wall_s = time.perf_counter() - start
    return wall_s, ready_s, records


def busiest(records: dict[str, dict]) -> float:
    """The most seconds one worker spent in jobs (the rest of the wall time is start-up, waiting and Dask)."""
    busy: dict[str, float] = {}
    for record in records.values():
        busy[record["worker"]] = busy.get(record["worker"], 0.0) + record["seconds"]
    return max(busy.values())


def main(argv: list[str]) -> int:
    """Run the campaign once per worker count (the sequence `--repeat` times), print a row per run and the
    ratio of the best wall times, return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000, help="cases in all, over every collective")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to time")
    parser.add_argument("--repeat", type=int, default=1, help="run the sequence of worker counts this many times")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    jobs = jobs_for(args.cases, args.seed)
    print(f"{args.cases} cases of {len(collectives.REGISTRY)} collectives in {len(jobs)} jobs, seed {args.seed}")
    print(f"{'workers':>7}  {'wall s':>7}  {'cases/s':>7}  {'cases':>5}  {'agree':>5}  {'start s':>7}  "
          f"{'job s, sum':>10}  {'cpu s, sum':>10}  {'busiest worker s':>16}  {'load avg':>8}")
    walls: dict[int, float] = {}
    counts = set()
    for workers in args.workers * args.repeat:
        wall_s, ready_s, records = timed(workers, jobs)
        cases = sum(r["cases"] for r in records.values())
        agree = sum(r["agree"] for r in records.values())
        walls[workers] = min(wall_s, walls.get(workers, wall_s))
        counts.add(tuple(sorted((key, r["cases"]) for key, r in records.items())))
        print(f"{workers:>7}  {wall_s:>7.1f}  {cases / wall_s:>7.1f}  {cases:>5}  {agree:>5}  {ready_s:>7.1f}  "
              f"{sum(r['seconds'] for r in records.values()):>10.1f}  "
              f"{sum(r['cpu_seconds'] for r in records.values()):>10.1f}  {busiest(records):>16.1f}  "
              f"{os.getloadavg()[0]:>8.1f}", flush=True)
        if agree != cases or len(counts) != 1:
            print("a case disagrees (run `meshsim campaign` to save it), or the runs checked different cases",
                  file=sys.stderr)
            return 1
    first = args.workers[0]
    for workers in args.workers[1:]:
        print(f"speedup {workers} workers / {first} (best wall times): {walls[first] / walls[workers]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
