"""The meshes of a JAX program, and the CPU devices a comparison with real JAX needs: `cpu_mesh` makes a
classic (Auto) mesh of the first devices, `check_devices` says how to get more before jax starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax._src import mesh as mesh_lib
from jax.extend import core

from oracles._bridge_eval import BridgeError, in_equations


class DeviceCountError(BridgeError):
    """The program's mesh has more devices than this process's JAX has."""


def mesh_axes(mesh: Any) -> dict[str, int]:
    """A JAX mesh's axis names and sizes, in order."""
    return dict(zip(mesh.axis_names, mesh.axis_sizes))


def meshes_of(jaxpr: core.Jaxpr | core.ClosedJaxpr) -> list[dict[str, int]]:
    """The axes of every shard_map's mesh in `jaxpr`, nested ones included."""
    return [mesh_axes(mesh) for mesh in shard_map_meshes(jaxpr)]


def shard_map_meshes(jaxpr: core.Jaxpr | core.ClosedJaxpr) -> list:
    """The mesh of every shard_map in `jaxpr`, nested ones included (theirs abstract)."""
    if isinstance(jaxpr, core.ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "shard_map":
            found.append(eqn.params["mesh"])
        for sub in core.jaxprs_in_params(eqn.params):
            found += shard_map_meshes(sub)
    return found


def check_devices(size: int, axes: Mapping[str, int] | None = None) -> None:
    """Raise DeviceCountError unless this process's JAX has at least `size` devices."""
    available = len(jax.devices())
    if size > available:
        shown = f" {dict(axes)}" if axes else ""
        raise DeviceCountError(
            f"the mesh{shown} has {size} devices but JAX has {available} ({jax.default_backend()}); set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={size} in the environment before jax is imported "
            f"(or run the comparison in a worker process started with it); simulate_jax alone needs no devices")


def cpu_mesh(axes: Mapping[str, int]) -> jax.sharding.Mesh:
    """A `jax.sharding.Mesh` of the first devices, row-major over `axes` (name -> size).

    Raises:
        DeviceCountError: JAX has fewer devices than the mesh.
    """
    size = int(np.prod(list(axes.values())))
    check_devices(size, axes)
    return jax.sharding.Mesh(np.array(jax.devices()[:size]).reshape(tuple(axes.values())), tuple(axes))


def held_sharded(mesh: Any, spec: Any) -> jax.sharding.NamedSharding | None:
    """How jitted JAX holds a shard_map's global output: sharded over the concrete mesh by its out_specs entry
    `spec`; None where no concrete mesh of the shard_map's is here (an abstract one with none set) or the entry
    holds values reduced or unreduced."""
    if not isinstance(mesh, jax.sharding.Mesh):
        concrete = mesh_lib.get_concrete_mesh()
        if concrete.empty or mesh_axes(concrete) != mesh_axes(mesh):
            return None
        mesh = concrete
    if getattr(spec, "unreduced", None) or getattr(spec, "reduced", None):
        return None
    return jax.sharding.NamedSharding(mesh, spec)


# Local work whose result depends on how XLA partitions it: sums and products in another order, per device
# then across them (elementwise work, sorts and extrema give the same bits however they are partitioned).
REORDERING = frozenset({"reduce_sum", "reduce_prod", "dot_general", "cumsum", "cumprod", "cumlogsumexp",
                        "conv_general_dilated"})


def reorders(eqns: Any) -> bool:
    """Whether any of `eqns` (or of their nested bodies) does work in `REORDERING`."""
    return in_equations(eqns, REORDERING)
