"""A shard_map over some of the mesh's axes under `jax.vmap(..., spmd_axis_name=...)` (finding 27 of
FINDINGS.md).

- `vmap-spmd-axis-partial-shard-map`: the batching rule of shard_map (`_shard_map_batch`) splits the
  vmapped dimension of each operand and result over the `spmd_axis_name` axes (it adds them to the
  shard_map's in_specs and out_specs), but leaves them out of the shard_map's manual axes. Over every mesh
  axis that does not matter (they are manual already); over some (`axis_names=`), the specs name an axis the
  shard_map leaves to the compiler: typed, JAX refuses the types it makes ("Axes mentioned in
  `manual_axis_type` field of ShapedArray should be of type `Manual`"); untyped, the lowering fails
  verification. Fixed in the rule: the spmd axes become manual too.

    import oracles
    oracles.install_jax_fixes(["vmap-spmd-axis-partial-shard-map"])
    jax.vmap(f, spmd_axis_name="x")(xs)   # f: a shard_map over 'y' of a mesh ('x', 'y'); stock JAX: ValueError
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def vmap_spmd_axis_partial_shard_map() -> None:
    """Finding 27: the spmd axes of a vmap join the manual axes of the shard_map it batches."""
    from jax._src import shard_map
    from jax._src.interpreters import batching

    stock = shard_map._shard_map_batch

    def batched(trace: Any, prim: Any, fun: Any, in_tracers: Any, mesh: Any, in_specs: Any, check_vma: bool,
                newly_manual_axes: frozenset, debug_info: Any) -> Any:
        spmd = trace.axis_data.spmd_name
        if spmd is not None:
            newly_manual_axes = frozenset(newly_manual_axes) | (frozenset(spmd) - frozenset(mesh.manual_axes))
        return stock(trace, prim, fun, in_tracers, mesh, in_specs, check_vma, newly_manual_axes, debug_info)

    batching.BatchTrace.process_shard_map = batched


FIXES: dict[str, Callable[[], None]] = {
    "vmap-spmd-axis-partial-shard-map": vmap_spmd_axis_partial_shard_map,
}
