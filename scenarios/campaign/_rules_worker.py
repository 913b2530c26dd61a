"""`python -m scenarios.campaign._rules_worker`: a long-lived process that runs the rules campaign's searches.

JAX's transpose and batching rules need a process of their own: 8 CPU devices and the CPU lowerings of
pbroadcast and `ragged_all_to_all` (`oracles.install_cpu_lowerings()`) must be set up before jax is imported. A
Dask worker of `meshsim campaign --kinds transpose vmap` starts one of these, compiling on as many threads
as the worker has (`--compile-threads`, `oracles.size_compile_pool`), and keeps it: each request
is one JSON line on stdin, `{"op", "kind", "examples", "seed"}`, and each answer one JSON line on stdout,
the row `scenarios.campaign._rules_search.search` returns (or `{"error": text}` when the search itself failed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()
os.environ["JAX_PLATFORMS"] = "cpu"


def main(argv: list[str]) -> None:
    """Answer requests until stdin closes; `--compile-threads N` has XLA:CPU compile on N threads."""
    parser = argparse.ArgumentParser(prog="python -m scenarios.campaign._rules_worker")
    parser.add_argument("--compile-threads", type=int, default=None)
    threads = parser.parse_args(argv).compile_threads
    import oracles
    from oracles._processes import planted_kill

    oracles.install_cpu_lowerings()
    from scenarios.campaign._rules_search import search  # configures jax (x64) without starting its backend

    oracles.size_compile_pool(threads)

    out = sys.stdout
    sys.stdout = sys.stderr  # anything else printed must not break the protocol
    for count, line in enumerate(sys.stdin):
        if count == 0:
            planted_kill()
        request = json.loads(line)
        try:
            answer = search(request["op"], request["kind"], request["examples"], request["seed"])
        except Exception:
            answer = {"error": traceback.format_exc(limit=8)}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
