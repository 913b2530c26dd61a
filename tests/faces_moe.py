"""A mixture-of-experts layer with ragged dispatch and combine, run through `oracles.simulate_jax`; its runs
saved with `Run.save` for `meshsim draw` / `meshsim explain` (test_faces_jax.py runs this in a child process:
`python tests/faces_moe.py OUT_DIR` writes forward.json; grad.json with the gradient's forward and backward
runs, and their picture and words from Python, grad.svg and grad.txt).

Each device holds its tokens and one expert. The router picks an expert per token; tokens are sorted by
expert, the counts all_gathered, offsets taken from running sums, and the rows dispatched into an empty
buffer on their expert's device, processed, and combined back with the offsets swapped.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from oracles import simulate_jax

DEVICES, TOKENS, WIDTH = 4, 8, 4


def moe_layer(mesh):
    """The layer as a shard_map over the mesh's axis 'e' (one expert per device)."""
    def layer(tokens, router, experts):
        me = lax.axis_index("e")
        with jax.named_scope("route"):
            choice = jnp.argmax(tokens @ router, axis=-1)
            onehot = jax.nn.one_hot(choice, DEVICES, dtype=jnp.int32)
            sizes = onehot.sum(0)
            starts = jnp.cumsum(sizes) - sizes
            slot = starts[choice] + jnp.take_along_axis(jnp.cumsum(onehot, 0) - 1, choice[:, None], 1)[:, 0]
        counts = lax.all_gather(sizes, "e")
        places = (jnp.cumsum(counts, axis=0) - counts).astype(jnp.int32)
        firsts = lax.all_gather(starts, "e")
        sorted_tokens = jnp.zeros_like(tokens).at[slot].set(tokens)
        empty = lax.pcast(jnp.zeros((TOKENS * DEVICES, WIDTH), tokens.dtype), "e", to="varying")
        with jax.named_scope("dispatch"):
            arrived = lax.ragged_all_to_all(  # dispatch
                sorted_tokens, empty, starts, sizes, places[me], counts[:, me], axis_name="e")
        done = jnp.tanh(arrived @ experts[0])
        with jax.named_scope("combine"):
            back = lax.ragged_all_to_all(  # combine
                done, jnp.zeros_like(tokens), places[:, me], counts[:, me], firsts[:, me], sizes, axis_name="e")
        out = back[slot]
        return lax.psum(jnp.sum(out * out), "e")

    return jax.shard_map(layer, mesh=mesh, in_specs=(P("e"), P(), P("e")), out_specs=P())


def main(out: Path) -> None:
    rng = np.random.default_rng(3)
    args = (rng.standard_normal((DEVICES * TOKENS, WIDTH)).astype(np.float32),
            rng.standard_normal((WIDTH, DEVICES)).astype(np.float32),
            rng.standard_normal((DEVICES, WIDTH, WIDTH)).astype(np.float32))
    layer = moe_layer(jax.sharding.AbstractMesh((DEVICES,), ("e",)))
    simulate_jax(jax.jit(layer), *args).run.save(out / "forward.json")
    graded = simulate_jax(jax.jit(jax.grad(layer, argnums=(0, 2))), *args)
    graded.save(out / "grad.json")
    graded.draw(out / "grad.svg")
    (out / "grad.txt").write_text(graded.explain(), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
