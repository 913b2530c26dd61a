"""ppermute over a tuple of mesh axes numbered as `axis_index` numbers it (finding 29 of FINDINGS.md).

JAX 0.10.2 lowers ppermute with each group's device ids sorted (`_pcollectives_lowering_common`), so over a
tuple whose names are not in the mesh's order, say ('c', 'a') on a mesh ('a', 'c'), its perm's indices follow
the mesh's order while `axis_index(('c', 'a'))` and `all_gather` follow the tuple's. The fix keeps JAX's own
lowering (ppermute's, and on GPU psend's and precv's, which share the helper) and renumbers the perm first:
index i of the tuple's numbering becomes the rank, among the group's sorted ids, of the group's i-th device
(the groups come in the tuple's order). For example:

    import oracles
    oracles.install_jax_fixes(["ppermute-tuple-axis-order"])
    # a ring over ('c', 'a') now moves index i to index i + 1 as axis_index(('c', 'a')) numbers them

The bridge reads `numbers_by_mesh_order()` to run each program as the JAX of this process runs it.
"""

from __future__ import annotations

from typing import Any

_installed: list[bool] = []


def numbers_by_mesh_order() -> bool:
    """Whether JAX in this process numbers a ppermute's perm over a tuple of mesh axes in the mesh's order (stock
    JAX 0.10.2), rather than as `axis_index` numbers the tuple (this fix installed)."""
    return not _installed


def _install() -> None:
    from jax._src.interpreters import mlir
    from jax._src.lax import parallel

    if _installed:
        return

    def renumbering(stock: Any) -> Any:
        def lowering(ctx: Any, *args: Any, axis_name: Any, perm: Any, **params: Any) -> Any:
            group = list(parallel._replica_groups(ctx.module_context.axis_context, axis_name, None)[0])
            ranks = sorted(group)
            rank = [ranks.index(device) for device in group]  # the tuple's index -> the index stock JAX reads
            n = len(group)
            pairs = tuple((rank[s % n], rank[d % n]) for s, d in perm)
            return stock(ctx, *args, axis_name=axis_name, perm=pairs, **params)

        return lowering

    mlir.register_lowering(parallel.ppermute_p, renumbering(mlir._lowerings[parallel.ppermute_p].rule))
    for primitive in (parallel.psend_p, parallel.precv_p):  # GPU only (their CPU rules raise): not run here
        for platform in ("cuda", "rocm"):
            entry = mlir._platform_specific_lowerings[platform].get(primitive)
            if entry is not None:
                mlir.register_lowering(primitive, renumbering(entry.rule), platform=platform)
    _installed.append(True)


FIXES = {"ppermute-tuple-axis-order": _install}
