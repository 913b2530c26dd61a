"""`simulate_jax`: a real JAX program, traced to a jaxpr, run with its `shard_map`s on the simulated mesh.

The function is traced with `jax.make_jaxpr` and walked (`oracles._bridge_eval`): equations outside any
`shard_map` run on the host with JAX; a `shard_map` equation becomes one `sim.shard_map` run on a
`sim.Mesh` of the JAX mesh's axes, where every device walks the body on its own block
(`oracles._bridge_device`): local primitives with JAX, collectives through meshsim's protocols.

This module imports jax in the calling process. Simulating needs no JAX devices beyond the host's (a
`jax.sharding.AbstractMesh` works); running the program with real JAX too (`compare_jax`) needs as many
CPU devices as the mesh has, which `XLA_FLAGS=--xla_force_host_platform_device_count=N` gives when it
is set before jax is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.extend import core

import sim
from oracles import _bridge_device
from oracles._bridge_eval import BridgeError, Evaluator, UnsupportedPrimitiveError, contains


class DeviceCountError(BridgeError):
    """The program's mesh has more devices than this process's JAX has."""


@dataclass(frozen=True)
class Simulated:
    """What `simulate_jax` returns: the outputs (numpy arrays, in `f`'s output structure), one `sim.Run`
    per `shard_map` equation executed, in order, and the traced jaxpr."""

    outputs: Any
    runs: tuple[sim.Run, ...]
    jaxpr: core.ClosedJaxpr

    @property
    def run(self) -> sim.Run:
        """The last `shard_map`'s run (the only one for most programs): its trace, time and programs."""
        if not self.runs:
            raise BridgeError("no shard_map ran (the program's shard_maps sit in branches it did not take)")
        return self.runs[-1]

    @property
    def programs(self) -> list[sim.Program]:
        """Each device's typed program in the last run; `print` one to see its ``{V:...}`` types."""
        return self.run.programs


def simulate_jax(f: Callable[..., Any], *args: Any, network: sim.Network | None = None, **options: Any
                 ) -> Simulated:
    """Run the JAX function `f` (jitted or not) on `args` with its `shard_map` bodies on the simulated mesh.

    `f` uses `jax.shard_map` over a `jax.sharding.Mesh` (or `AbstractMesh`) and any `jax.lax` collectives
    and `jax.numpy` operations, control flow included, and may be the output of `jax.grad`, `jax.vjp`,
    `jax.jvp`, `jax.vmap` or `jax.linear_transpose`. Each shard_map runs on a `sim.Mesh` of the same axes
    with `network`; `options` go to `sim.shard_map` (`sanitize`, `explore_orders`, `seed`).

    Example on a 4-device mesh: `f = jax.shard_map(lambda x: jax.lax.psum(x, 'i'), mesh=mesh,
    in_specs=P('i'), out_specs=P())`; `simulate_jax(f, jnp.arange(8.0)).outputs` is `[12., 16.]`, and
    `.run.trace` holds the psum's messages.

    Raises:
        BridgeError: `f` has no shard_map, runs a collective outside one, or maps only some mesh axes.
        UnsupportedPrimitiveError: an equation the bridge cannot run (named with the equation).
        TypeMismatchError: meshsim's device-variance type of a value differs from the jaxpr's.
        MeshError: a collective's arguments break its rules (as in any simulated run).
    """
    closed, tree = trace(f, args)
    return run_traced(closed, tree, args, network, options)


def run_traced(closed: core.ClosedJaxpr, tree: Any, args: tuple, network: sim.Network | None,
               options: Mapping[str, Any]) -> Simulated:
    """`simulate_jax` of a function already traced to `closed` (its output tree `tree`) on `args`."""
    runs: list[sim.Run] = []

    def apply(eqn: core.JaxprEqn, ins: list) -> list:
        if eqn.primitive.name == "shard_map":
            return _shard_map(eqn, ins, runs, network, options)
        if eqn.primitive.name == "xla_pmap":
            raise UnsupportedPrimitiveError(f"primitive 'xla_pmap' (in `{eqn}`): the bridge simulates "
                                            f"jax.shard_map, not jax.pmap; write the program with jax.shard_map")
        if eqn.primitive.name in _bridge_device.PARALLEL:
            raise BridgeError(f"primitive {eqn.primitive.name!r} (in `{eqn}`) runs outside jax.shard_map; "
                              f"the bridge runs collectives only inside a shard_map body")
        out = eqn.primitive.bind(*(jax.numpy.asarray(x) for x in ins), **eqn.params)
        return list(out) if eqn.primitive.multiple_results else [out]

    host = Evaluator(apply, lambda lit: lit.val, lambda values, aval: jax.numpy.stack(values)
                     if values else jax.numpy.zeros(aval.shape, aval.dtype))
    flat = host.run(closed, [canonical(x, aval) for x, aval in zip(jax.tree.leaves(args), closed.in_avals)])
    outputs = jax.tree.unflatten(tree, [np.asarray(x) for x in flat])
    return Simulated(outputs, tuple(runs), closed)


def canonical(x: Any, aval: Any) -> Any:
    """An argument as JAX takes it in: a numpy array or Python number in the dtype its jaxpr gives it (JAX's
    canonicalisation: float64 and int64 become float32 and int32 unless jax_enable_x64 is on), so the
    simulated run adds in the precision JAX does; anything else (JAX arrays, PRNG keys) as it is.

    >>> canonical(np.arange(3), jax.ShapeDtypeStruct((3,), np.int32)).dtype
    dtype('int32')
    """
    numeric = isinstance(x, (np.ndarray, np.generic, bool, int, float, complex))
    if not numeric or jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended):
        return x
    value = np.asarray(x)
    return value if value.dtype == aval.dtype else value.astype(aval.dtype)


def trace(f: Callable[..., Any], args: tuple) -> tuple[core.ClosedJaxpr, Any]:
    """`f`'s jaxpr on `args` and its output tree; a clear error when `f` has no shard_map."""
    try:
        closed, shape = jax.make_jaxpr(f, return_shape=True)(*args)
    except NameError as error:
        if "unbound axis name" not in str(error):
            raise
        raise BridgeError(f"{error}: a collective names a mesh axis outside any shard_map; wrap the body in "
                          f"jax.shard_map(body, mesh=mesh, in_specs=..., out_specs=...)") from None
    if not contains(closed, "shard_map"):
        raise BridgeError(f"{getattr(f, '__name__', f)!r} has no jax.shard_map: the bridge simulates the mesh "
                          f"a shard_map runs on; wrap the per-device body in jax.shard_map(body, mesh=mesh, "
                          f"in_specs=..., out_specs=...)")
    return closed, jax.tree.structure(shape)


def _shard_map(eqn: core.JaxprEqn, ins: list, runs: list, network: sim.Network | None,
               options: Mapping[str, Any]) -> list:
    p = eqn.params
    axes = mesh_axes(p["mesh"])
    manual = p.get("newly_manual_axes", p.get("manual_axes", frozenset(axes)))
    if set(manual) != set(axes):
        raise BridgeError(f"shard_map over axis_names={sorted(manual)} of a mesh with axes {list(axes)}: the "
                          f"bridge runs shard_maps that map every mesh axis (drop axis_names=)")
    mesh = sim.Mesh(axes, network=network)
    mapped = sim.shard_map(_bridge_device.body(p["jaxpr"], p["check_vma"]), mesh=mesh,
                           in_specs=tuple(_spec(s) for s in p["in_specs"]),
                           out_specs=tuple(_spec(s) for s in p["out_specs"]), check_vma=p["check_vma"], **options)
    run = mapped.run(*(np.asarray(x) for x in ins))
    runs.append(run)
    if run.outputs is None:
        raise BridgeError(f"the simulated shard_map stopped: {run.stopped}")
    return list(run.outputs)


def mesh_axes(mesh: Any) -> dict[str, int]:
    """A JAX mesh's axis names and sizes, in order."""
    return dict(zip(mesh.axis_names, mesh.axis_sizes))


def _spec(spec: Any) -> sim.PartitionSpec:
    return sim.P(*tuple(spec))


def meshes_of(jaxpr: core.Jaxpr | core.ClosedJaxpr) -> list[dict[str, int]]:
    """The axes of every shard_map's mesh in `jaxpr`, nested ones included."""
    if isinstance(jaxpr, core.ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "shard_map":
            found.append(mesh_axes(eqn.params["mesh"]))
        for sub in core.jaxprs_in_params(eqn.params):
            found += meshes_of(sub)
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
