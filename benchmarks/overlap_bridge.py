"""The tutorial's collective matmul as a JAX program through `oracles.simulate_jax` (run by `overlap.py --bridge`
in its own process, since JAX's CPU devices are fixed before it starts; prints the rows as JSON).

The program is the all-gather collective matmul of JAX's shard_map tutorial, written with `jax.lax` on 4
devices: each step multiplies the block of lhs rows a device holds by its rhs columns, writes the product into
its rows of the output, and passes the block on with `lax.ppermute`. Overlapped, that is all: the bridge starts
each ppermute as soon as its block is there, so it flies during the matmul of the same block, as XLA's
asynchronous collective-permute does. Plain, `lax.optimization_barrier` ties each step's block to its product,
so the ppermute waits for the matmul, as XLA's scheduler must. The matmuls are charged by XLA's own
`cost_analysis()` of the compiled segments against the preset's roofline; the forms use the matmul's own
flops and bytes instead (`overlap.forms` at 4-byte words), so the ratio says how much else the segments do.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import json
import sys
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

import oracles
import sim

DEVICES = 4
SHIFT = [(k, (k - 1) % DEVICES) for k in range(DEVICES)]


def collective_matmul(overlapped: bool):
    """The tutorial's body: n matmuls of the held block, the block passed on after each but the last."""
    def body(lhs, rhs):
        me = lax.axis_index("i")
        rows = lhs.shape[0]
        out = jnp.zeros((rows * DEVICES, rhs.shape[1]), lhs.dtype)
        block = lhs
        for step in range(DEVICES):
            out = lax.dynamic_update_slice_in_dim(out, block @ rhs, ((me + step) % DEVICES) * rows, axis=0)
            if step < DEVICES - 1:
                if not overlapped:
                    out, block = lax.optimization_barrier((out, block))
                block = lax.ppermute(block, "i", SHIFT)
        return out
    return body


def overlapping_messages(run: sim.Run, device: int = 0) -> int:
    """How many of the messages `device` sends fly while it computes (a compute span covers their start)."""
    spans = [(c.start_s, c.end_s) for c in run.trace.computes if c.device == device]
    starts = run.trace.column("start_time_s")[(run.trace.column("src") == device)
                                              & (run.trace.column("dst") != device)]
    return sum(any(a <= t < b for a, b in spans) for t in starts.tolist())


def row(preset: str, m: int, k: int, n_cols: int) -> dict:
    """Both versions through the bridge on `preset`, checked against jitted JAX, against their forms."""
    from overlap import forms  # the benchmarks folder is on the path when run as a script

    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("i",))
    lhs = np.random.default_rng(0).standard_normal((DEVICES * m, k)).astype(np.float32)
    rhs = np.random.default_rng(1).standard_normal((k, DEVICES * n_cols)).astype(np.float32)
    network = sim.Network.preset(preset, (DEVICES,))
    t_math, t_comm, plain_form, over_form = forms(network, DEVICES, m, k, n_cols, word_bytes=4)
    out = {"preset": preset, "devices": DEVICES, "block": [m, k], "rhs_columns": n_cols, "t_math_s": t_math,
           "t_comm_s": t_comm}
    for name, overlapped, form in (("plain", False, plain_form), ("overlapped", True, over_form)):
        program = jax.jit(jax.shard_map(collective_matmul(overlapped), mesh=mesh, in_specs=(P("i"), P(None, "i")),
                                        out_specs=P(None, "i")))
        simulated = oracles.simulate_jax(program, lhs, rhs, network=network)
        if not np.array_equal(np.asarray(simulated.outputs), np.asarray(program(lhs, rhs))):
            raise SystemExit(f"{name}: the simulated product differs from jitted JAX's")
        end = simulated.run.end_time_s
        out[name] = {"simulated_s": end, "form_s": form, "ratio": end / form,
                     "messages_under_compute": overlapping_messages(simulated.run)}
    return out


def main() -> int:
    print(json.dumps([row("h100-nvlink", 16, 4096, 4096), row("h100-nvlink", 16, 4096, 256)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
