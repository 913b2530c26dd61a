"""The JAX worker's shared set-up: JAX configured once, meshes, lowering under `shard_map`, the compile cache.

Every module of the worker imports this one, so JAX is configured before any of them asks for a device:
8 CPU devices (the backend reads the count when it starts, at the first device query; the parent also
passes `--xla_force_host_platform_device_count` in XLA_FLAGS), x64, without which JAX silently narrows
int64/float64 inputs to 32 bits, and the CPU lowerings of pbroadcast and ragged_all_to_all
(`oracles.install_cpu_lowerings`), so the worker runs JAX's own primitives there too, and MLIR contexts that verify
on the calling thread (`oracles.serial_mlir_verification`). Only the worker process imports jax.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from types import SimpleNamespace
from typing import Any

import jax
import numpy as np
from jax import lax
from jax._src.lax import parallel
from jax.sharding import Mesh, PartitionSpec

from oracles._cpu_lowerings import install_cpu_lowerings
from oracles._serial_verify import serial_mlir_verification

DEVICE_COUNT = 8

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_num_cpu_devices", DEVICE_COUNT)
jax.config.update("jax_enable_x64", True)
install_cpu_lowerings()  # pbroadcast and ragged_all_to_all, which XLA:CPU cannot lower
serial_mlir_verification()  # a program that fails verification raises, never hangs

# What a collective's `JaxBinding.bind` is handed: collectives/ never imports jax itself.
API = SimpleNamespace(lax=lax, parallel=parallel, linear_transpose=jax.linear_transpose)

Compiled = Callable[..., Any]
_compiled: dict[Hashable, tuple[Compiled, str]] = {}


def freeze(value: Any) -> Hashable:
    """`value` made hashable for a cache key (lists become tuples, dicts sorted item tuples)."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(freeze(v) for v in value))
    return value


def cached(key: Hashable, compile_: Callable[[], tuple[Compiled, str]]) -> tuple[Compiled, str]:
    """The compiled function and path stored under `key`, compiled by `compile_()` on first use."""
    if key not in _compiled:
        _compiled[key] = compile_()
    return _compiled[key]


def mesh(mesh_shape: dict[str, int]) -> Mesh:
    """A mesh of the first devices, row-major over the axes of `mesh_shape`."""
    sizes = tuple(mesh_shape.values())
    n = int(np.prod(sizes))
    return Mesh(np.array(jax.devices()[:n]).reshape(sizes), tuple(mesh_shape))


def axes(axis_name: Any) -> tuple[Any, ...]:
    """`axis_name` as a tuple of names."""
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def lower(body: Callable[..., Any], on: Mesh, avals: Sequence[Any], in_specs: Sequence[PartitionSpec], *,
          check_vma: bool = True, in_formats: Sequence[Any] | None = None, out_format: Any = None) -> Any:
    """Trace and lower `body` as the per-device program of a shard_map whose result is mapped over every axis.

    Each argument is a stacked global array whose leading axis is split by its `in_specs`, so a device's
    `body` gets its own block (`x[0]`). With `in_formats`, the jitted function takes and gives those Formats.
    """
    def per_device(*stacked: jax.Array) -> jax.Array:
        return body(*(x[0] for x in stacked))[None]

    mapped = jax.shard_map(per_device, mesh=on, in_specs=tuple(in_specs), out_specs=PartitionSpec(on.axis_names),
                           check_vma=check_vma)
    if in_formats is None:
        return jax.jit(mapped).lower(*avals)
    return jax.jit(mapped, in_shardings=tuple(in_formats), out_shardings=out_format).lower(*avals)


def by_device(result: jax.Array, on: Mesh, read: Callable[[jax.Array], Any]) -> list[Any]:
    """`read(shard)` of every shard of `result`, in device order.

    A shard's index has no start on a one-device mesh or a zero-size array: it is placed by its device.
    """
    position = {device: i for i, device in enumerate(on.devices.flat)}
    found: list[Any] = [None] * on.size
    for shard in result.addressable_shards:
        found[position[shard.device]] = read(shard.data)
    return found
