"""Every collective of jax 0.10.2's `jax.lax` run on XLA:CPU, for `cpu_lowerings_child.py`.

Each entry is one program on {'i': 4} (an f32[4] block per device) that binds the collective's primitive
under `jax.jit(jax.shard_map(...))`; `survey` runs each with check_vma on and off (the unreduced and reduced
forms exist only with check_vma on) and reports "ok" or the error's type and first line. The forms JAX
keeps out of `jax.lax` (async start/done, unreduced, reduced, all_gather_invariant) are reached through
`jax._src.lax.parallel`, where user code reaches them too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src.lax import parallel
from jax.interpreters import mlir
from jax.sharding import Mesh, PartitionSpec

SURVEY_MESH = 4
PERM = [(0, 1), (1, 2), (2, 3), (3, 0)]


def _ragged(x: jax.Array) -> jax.Array:
    one = jnp.ones(4, jnp.int32)
    return lax.ragged_all_to_all(x, jnp.zeros_like(x), jnp.arange(4, dtype=jnp.int32), one,
                                 one * lax.axis_index("i"), one, axis_name="i")


def _send_recv(x: jax.Array) -> jax.Array:
    token = lax.psend(x, "i", PERM)
    return lax.precv(token, jax.ShapeDtypeStruct(x.shape, x.dtype), "i", PERM)


def _recv(x: jax.Array) -> jax.Array:
    return lax.precv(lax.create_token(), jax.ShapeDtypeStruct(x.shape, x.dtype), "i", PERM) + x


def _send(x: jax.Array) -> jax.Array:
    lax.psend(x, "i", PERM)
    return x


def _unreduced(x: jax.Array) -> jax.Array:
    return lax.pcast(x, "i", to="unreduced")


def _from_reduced(x: jax.Array) -> jax.Array:
    return lax.pcast(x, "i", to="varying")


Program = Callable[[jax.Array], jax.Array]

# name -> (program, runs with check_vma off too); names as the primitive the program binds
PROGRAMS: dict[str, tuple[Program, bool]] = {
    "psum": (lambda x: lax.psum(x, "i") + x, True),
    "pmean": (lambda x: lax.pmean(x, "i") + x, True),
    "pmax": (lambda x: lax.pmax(x, "i") + x, True),
    "pmin": (lambda x: lax.pmin(x, "i") + x, True),
    "pargmax": (lambda x: parallel.pargmax(x, "i") + x, True),
    "psum_scatter": (lambda x: lax.psum_scatter(x, "i", tiled=True).repeat(4), True),
    "all_gather": (lambda x: lax.all_gather(x, "i", tiled=True)[:4], True),
    "all_gather(to='invarying')": (lambda x: lax.all_gather(x, "i", tiled=True, to="invarying")[:4] + x, True),
    "all_gather_invariant": (lambda x: parallel.all_gather_invariant(x, "i", tiled=True)[:4] + x, True),
    "all_to_all": (lambda x: lax.all_to_all(x, "i", 0, 0, tiled=True), True),
    "pswapaxes": (lambda x: lax.pswapaxes(x.reshape(4, 1), "i", 0).reshape(4), True),
    "ragged_all_to_all": (_ragged, True),
    "ppermute": (lambda x: lax.ppermute(x, "i", PERM), True),
    "pshuffle": (lambda x: lax.pshuffle(x, "i", [3, 0, 1, 2]), True),
    "pbroadcast": (lambda x: lax.pbroadcast(x, "i", 1), True),
    "psend": (_send, True),
    "precv": (_recv, True),
    "psend+precv": (_send_recv, True),
    "axis_index": (lambda x: x + lax.axis_index("i"), True),
    "axis_size": (lambda x: x + lax.axis_size("i"), True),
    "pcast(to='varying')": (lambda x: lax.pcast(jnp.float32(1), "i", to="varying") + x, True),
    "psum_start/done": (lambda x: parallel.psum_start(x, "i").done() + x, True),
    "all_gather_start/done": (lambda x: parallel.all_gather_start(x, "i", tiled=True).done()[:4], True),
    "psum_scatter_start/done": (lambda x: parallel.psum_scatter_start(x, "i", tiled=True).done().repeat(4), True),
    "psum_scatter_start/done(tiled=False)": (
        lambda x: parallel.psum_scatter_start(x, "i").done().repeat(4), True),
    "all_to_all_start/done": (lambda x: parallel.all_to_all_start(x, "i", 0, 0, tiled=True).done(), True),
    "ppermute_start/done": (lambda x: parallel.ppermute_start(x, "i", PERM).done(), True),
    "pbroadcast_start/done": (lambda x: parallel.pbroadcast_start(x, "i", 1).done(), True),
    "unreduced_psum": (lambda x: lax.psum(_unreduced(x), "i") + x, False),
    "unreduced_psum_start/done": (lambda x: parallel.psum_start(_unreduced(x), "i").done() + x, False),
    "unreduced_psum_scatter": (lambda x: lax.psum_scatter(_unreduced(x), "i", tiled=True).repeat(4), False),
    "unreduced_psum_scatter_start/done": (
        lambda x: parallel.psum_scatter_start(_unreduced(x), "i", tiled=True).done().repeat(4), False),
    "all_gather(to='reduced')": (
        lambda x: _from_reduced(lax.all_gather(x, "i", tiled=True, to="reduced"))[:4], False),
    "all_gather_reduced_start/done": (lambda x: _from_reduced(parallel.all_gather_done_p.bind(
        parallel.all_gather_reduced(x, "i", tiled=True, is_async=True)))[:4], False),
    "pcast(to='reduced')": (lambda x: _from_reduced(lax.pcast(jnp.ones(4), "i", to="reduced")) + x, False),
}


def attempt(mesh: Mesh, program: Program, check_vma: bool) -> str:
    """'ok', or the type and first line of the error running `program` raises."""
    spec = PartitionSpec("i")
    try:
        jax.block_until_ready(jax.jit(jax.shard_map(program, mesh=mesh, in_specs=spec, out_specs=spec,
                                                    check_vma=check_vma))(jnp.arange(16.0, dtype=jnp.float32)))
    except Exception as error:  # every failure is the survey's answer
        return f"{type(error).__name__}: {str(error).splitlines()[0]}"
    return "ok"


def survey(mesh: Mesh) -> dict[str, dict[bool, str]]:
    """Every program's outcome, check_vma on and (where it applies) off."""
    return {name: {vma: attempt(mesh, program, vma) for vma in ((True, False) if both else (True,))}
            for name, (program, both) in PROGRAMS.items()}


def send_recv(mesh: Mesh) -> dict[str, str]:
    """Register HLO Send and Recv (as JAX's GPU lowerings emit them) as psend's and precv's CPU lowerings
    and report what running psend, then precv alone, gives on XLA:CPU."""
    from jax._src.lib.mlir.dialects import hlo

    def pairs(ctx: Any, axis_name: Any, perm: Any, name: str) -> tuple[Any, dict[str, Any]]:
        full, other = parallel._pcollectives_lowering_common(ctx, axis_name=axis_name, perm=perm, op_name=name)
        return mlir.dense_int_elements(np.asarray(full)), other

    def send(ctx: Any, x: Any, *, axis_name: Any, perm: Any) -> Any:
        full, other = pairs(ctx, axis_name, perm, "psend")
        return hlo.SendOp([x], hlo.create_token(), source_target_pairs=full, **other).results

    def recv(ctx: Any, token: Any, *, out_shape: Any, axis_name: Any, perm: Any) -> Any:
        full, other = pairs(ctx, axis_name, perm, "precv")
        out = mlir.aval_to_ir_type(ctx.module_context, out_shape)
        return [hlo.RecvOp([out, token.type], token, source_target_pairs=full, **other).results[0]]

    mlir.register_lowering(parallel.psend_p, send, platform="cpu")
    mlir.register_lowering(parallel.precv_p, recv, platform="cpu")
    jax.clear_caches()
    return {"psend": attempt(mesh, _send_recv, True), "precv": attempt(mesh, _recv, True)}
