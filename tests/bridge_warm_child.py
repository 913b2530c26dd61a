"""Warm `simulate_jax` calls against the first (cold) call of the same jitted program, in a process with 4 CPU
devices: prints one JSON line mapping each case to what its calls simulated (`tests/test_bridge_warm.py`).

Cases: the expert-parallel MoE layer on 4 devices (forward and gradient, `bridge_moe_layer.moe_layer`), the
collective matmul of the tutorial corpus, and the same on a roofline network (h100-nvlink: compute charged,
collectives as dataflow), each called three times; and a `sanitize` run, a `strict` one and a stepwise one
(`compiled=False`) called twice. Each call is summarised whole (`summary`): the outputs' bytes, every column
of every run's trace, the end times, each device's typed program as text, the run labels and diagnostics.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4".strip()
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax
import jax.numpy as jnp
import numpy as np
from bridge_moe_layer import moe_layer
from bridge_tutorial_programs import collective_matmul
from jax.sharding import AxisType
from row_programs import links

import oracles
import sim
from oracles import _bridge_compiled


def summary(simulated: oracles.Simulated) -> dict:
    """Everything a call simulated, as JSON: outputs (dtype, shape, bytes in hex), each run's trace columns,
    end time and device programs, the labels and the diagnostics."""
    outputs = [np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
               for x in jax.tree.leaves(simulated.outputs)]
    runs = []
    for run in simulated.runs:
        columns = {name: [repr(v) for v in np.asarray(column).tolist()] for name, column in run.trace.columns().items()}
        runs.append({"columns": columns, "end_time_s": repr(run.end_time_s),
                     "programs": [str(program) for program in run.programs],
                     "links": [links(program) for program in run.programs]})
    return {"outputs": [[str(x.dtype), list(x.shape), x.tobytes().hex()] for x in outputs], "runs": runs,
            "labels": list(simulated.labels), "diagnostics": [str(d) for d in simulated.diagnostics]}


def cases() -> dict[str, tuple]:
    """Each case: (jitted function, arguments, simulate_jax keywords)."""
    oracles.install_cpu_ragged_all_to_all()
    rng = np.random.default_rng(4)
    n, experts, width = 4, 8, 4
    moe = moe_layer(n, experts, k=2, capacity=3, check_vma=False)
    moe_args = (rng.standard_normal((6 * n, width)).astype(np.float32),
                rng.standard_normal((width, experts)).astype(np.float32),
                rng.standard_normal((experts, width, 8)).astype(np.float32),
                rng.standard_normal((experts, 8, width)).astype(np.float32), jax.random.key(0))
    grad = jax.grad(lambda *a: jnp.sum(moe(*a) ** 2), argnums=(0, 1, 2, 3))
    mesh = jax.make_mesh((4,), ("i",), axis_types=(AxisType.Auto,))
    matmul = collective_matmul(lambda body, i, o: jax.shard_map(body, mesh=mesh, in_specs=i, out_specs=o))
    matmul_args = (rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((32, 64)).astype(np.float32))
    roofline = sim.Network.preset("h100-nvlink", (4,))
    return {
        "moe forward": (jax.jit(moe), moe_args, {}),
        "moe grad": (jax.jit(grad), moe_args, {}),
        "collective matmul": (jax.jit(matmul), matmul_args, {}),
        "moe forward, roofline": (jax.jit(moe), moe_args, {"network": roofline}),
        "collective matmul, roofline": (jax.jit(matmul), matmul_args, {"network": roofline}),
        "moe forward, sanitize": (jax.jit(moe), moe_args, {"sanitize": True}),
        "moe forward, strict": (jax.jit(moe), moe_args, {"strict": True}),
        "collective matmul, stepwise": (jax.jit(matmul), matmul_args, {"compiled": False}),
    }


def main() -> None:
    found = {}
    for name, (f, args, options) in cases().items():
        calls = 3 if not options or "network" in options else 2
        found[name] = [summary(oracles.simulate_jax(f, *args, **options)) for _ in range(calls)]
        if options.get("compiled", True):
            _bridge_compiled._record = _bridge_compiled.record_now
            try:
                found[f"{name}, recorded as run"] = [summary(oracles.simulate_jax(f, *args, **options))]
            finally:
                _bridge_compiled._record = _bridge_compiled.record_late
    print(json.dumps(found))


if __name__ == "__main__":
    main()
