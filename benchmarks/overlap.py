"""Time for compute, and overlap: the collective matmul on a preset, plain and overlapped, against the roofline.

    python benchmarks/overlap.py                 # h100-nvlink, 8 GPUs, the matmul dominating, then the messages
    python benchmarks/overlap.py --json          # the rows as JSON
    python benchmarks/overlap.py --bridge        # and the tutorial's JAX program through oracles.simulate_jax

The program is the all-gather collective matmul of JAX's shard_map tutorial: each of n devices holds a block
of lhs rows [m, K] (bfloat16, as 2-byte words) and its columns of rhs [K, N / n]. In n steps every device
multiplies the lhs block it holds by its rhs columns (`sim.compute` with the matmul's flops and bytes, timed by
the preset's `Roofline`) and passes the block to the next device round the ring (ppermute), so after n steps
it has multiplied every block. Plain, a step's ppermute and matmul follow each other; overlapped, the
ppermute is started first (`sim.start`) and the matmul runs while it flies, as XLA's async collectives do.

The forms, from the preset's own figures (T_math = the roofline of one block's matmul; T_comm = the link's
latency plus the block's bytes over the link bandwidth times the measured protocol efficiency):

    plain:      (n - 1) (T_math + T_comm) + T_math
    overlapped: (n - 1) max(T_math, T_comm) + T_math

Each row checks the result (every device ends with its own block back, after n - 1 shifts and one more
multiplication without a send) and prints the simulated time against its form.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import numpy as np

import collectives
import sim

WORD_BYTES = 2  # bfloat16


def collective_matmul(n: int, m: int, k: int, n_cols: int, overlapped: bool):
    """The device program: n steps of matmul on the held lhs block, shifting it round the ring in n - 1 of
    them (the shift started before the matmul when `overlapped`)."""
    perm = [(i, (i + 1) % n) for i in range(n)]
    flops = 2.0 * m * k * n_cols
    bytes_accessed = float(WORD_BYTES * (m * k + k * n_cols + m * n_cols))

    def body(block):
        for step in range(n):
            last = step == n - 1
            if overlapped and not last:
                pending = sim.start(collectives.ppermute, block, "i", perm)
                sim.compute(flops=flops, bytes_accessed=bytes_accessed, name="block matmul")
                block = pending.result()
            else:
                sim.compute(flops=flops, bytes_accessed=bytes_accessed, name="block matmul")
                block = block if last else collectives.ppermute(block, "i", perm)
        return block

    return body


def forms(network: sim.Network, n: int, m: int, k: int, n_cols: int,
          word_bytes: int = WORD_BYTES) -> tuple[float, float, float, float]:
    """(T_math, T_comm, plain form, overlapped form) from the preset's figures, for words of `word_bytes`."""
    roofline = network.roofline
    t_math = roofline.seconds(2.0 * m * k * n_cols, word_bytes * (m * k + k * n_cols + m * n_cols))
    t_comm = network.latency_s + network.costs.wire_bytes(word_bytes * m * k) / network.bandwidth_bytes_per_s
    return t_math, t_comm, (n - 1) * (t_math + t_comm) + t_math, (n - 1) * max(t_math, t_comm) + t_math


def row(preset: str, n: int, m: int, k: int, n_cols: int) -> dict:
    """Both versions simulated on `preset` with n devices, checked, against their forms."""
    network = sim.Network.preset(preset, (n,))
    mesh = sim.Mesh({"i": n}, network=network)
    lhs = np.arange(n * m * k, dtype=np.uint16).reshape(n * m, k)
    t_math, t_comm, plain_form, over_form = forms(network, n, m, k, n_cols)
    out = {"preset": preset, "devices": n, "block": [m, k], "rhs_columns": n_cols, "t_math_s": t_math,
           "t_comm_s": t_comm}
    for name, overlapped, form in (("plain", False, plain_form), ("overlapped", True, over_form)):
        mapped = sim.shard_map(collective_matmul(n, m, k, n_cols, overlapped), mesh=mesh, in_specs=sim.P("i"),
                               out_specs=sim.P("i"), check_vma=False)
        run = mapped.run(lhs)
        if not np.array_equal(run.outputs, np.roll(lhs, (n - 1) * m, axis=0)):
            raise SystemExit(f"{name}: the blocks did not come round the ring")
        out[name] = {"simulated_s": run.end_time_s, "form_s": form, "ratio": run.end_time_s / form}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--bridge", action="store_true",
                        help="also run the tutorial's JAX program through the bridge (overlap_bridge.py)")
    args = parser.parse_args(argv)
    rows = [row("h100-nvlink", 8, 1024, 8192, 8192), row("h100-nvlink", 8, 1024, 8192, 1024)]
    bridged = _bridge_rows() if args.bridge else []
    if args.json:
        print(json.dumps({"programs": rows, "bridge": bridged}, indent=1))
        return 0
    _table(rows)
    if bridged:
        print("\nthrough the bridge (jax.lax program, 4 devices, float32; last column: device 0's messages "
              "sent while it computes)")
        _table(bridged, overlap=True)
    return 0


def _bridge_rows() -> list[dict]:
    """The rows of `overlap_bridge.py`, run in its own process."""
    script = Path(__file__).resolve().parent / "overlap_bridge.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"overlap_bridge.py failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def _table(rows: list[dict], overlap: bool = False) -> None:
    print(f"{'preset':12} {'n':>2} {'T_math us':>10} {'T_comm us':>10} {'version':>10} {'simulated us':>13} "
          f"{'form us':>10} {'ratio':>6}")
    for r in rows:
        for name in ("plain", "overlapped"):
            v = r[name]
            print(f"{r['preset']:12} {r['devices']:>2} {r['t_math_s'] * 1e6:>10.2f} {r['t_comm_s'] * 1e6:>10.2f} "
                  f"{name:>10} {v['simulated_s'] * 1e6:>13.2f} {v['form_s'] * 1e6:>10.2f} {v['ratio']:>6.3f}"
                  + (f" {v['messages_under_compute']:>4}" if overlap else ""))


if __name__ == "__main__":
    raise SystemExit(main())
