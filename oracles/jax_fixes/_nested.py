"""Corrected residual specs of a shard_map nested in another (finding 24 of FINDINGS.md).

- `nested-shard-map-grad-residuals`: reverse mode of a shard_map nested inside another, under
  `check_vma=True`, splits the inner body into a forward and a backward shard_map whose residuals get specs
  from `ShapedArray.nospec`: under `check_vma` it names every axis the residual varies along, the axes the
  enclosing shard_map made manual included, where it should name only the inner shard_map's own (its
  `all_names`, which the `check_vma=False` path uses). A residual that varies along an outer axis then gets a
  spec over an axis already manual: lowering fails ("operates on axis 'y' which is already bound by a
  parent sdy.manual_computation", or a local shape divided by that axis's size a second time). Fixed in
  `nospec`: the varying axes it names are those among `all_names`.

    import oracles
    oracles.install_jax_fixes(["nested-shard-map-grad-residuals"])
    jax.grad(lambda b: jnp.sum(nested(b, w)))(b)    # w (the body multiplies b by w); stock JAX: ValueError
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def nested_shard_map_grad_residuals() -> None:
    """Finding 24: a residual's spec names only the shard_map's own manual axes."""
    from jax._src import core
    from jax.sharding import PartitionSpec as P

    def nospec(self: Any, mesh: Any, check_vma: bool, all_names: Any) -> Any:
        sh_names = (core.order_wrt_mesh(mesh, self.mat.varying & frozenset(all_names))
                    if check_vma else all_names)
        u_names = self.mat.unreduced if check_vma else frozenset()
        r_names = self.mat.reduced if check_vma else frozenset()
        return P(sh_names, unreduced=u_names, reduced=r_names) if sh_names else P(unreduced=u_names,
                                                                                 reduced=r_names)

    core.ShapedArray.nospec = nospec


FIXES: dict[str, Callable[[], None]] = {
    "nested-shard-map-grad-residuals": nested_shard_map_grad_residuals,
}
