"""The JAX worker's dispatch table: for every registered collective, how the worker runs the real op.

Built from `collectives.REGISTRY`: each collective's `JaxBinding` gives the per-device call; operands
that JAX takes invariant (pvary, pscatter) enter through in_specs that leave out their axes, as a
user would pass them, so per-device inputs must agree along those axes; grouped psum and pmean run under
`check_vma=False`, the only way JAX runs them; ragged_all_to_all runs JAX's own primitive, on CPU
through the lowering `oracles.install_cpu_ragged_all_to_all` registers. Results are mapped over every
mesh axis (JAX accepts that for device-invariant results too); each device's result is read from the
device that holds it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import collectives
import sim
from collectives import Definition
from oracles._jax_setup import API, Compiled, axes, by_device, cached, freeze, lower, mesh


@dataclass(frozen=True)
class Route:
    """How the worker runs one collective: its definition."""

    definition: Definition

    def body(self, params: dict[str, Any]) -> Callable[..., Any]:
        """The per-device call of the real op with `params` (the simulator's own parameters dropped).

        A Python scalar the op returns (`lax.axis_size`'s int, a constant JAX folds) leaves as the 0-d array
        JAX's shard_map gives it in JAX's default configuration, an int32 (`sim.as_array`), as meshsim's
        does: the worker runs with x64 on, under which the shard_map would widen it to an int64."""
        call = self.definition.jax.bind(API, self.definition.jax_params(params))
        return lambda *arrays: jax.tree.map(sim.as_array, call(*arrays))

    def operands(self, on: Mesh, args: Sequence[Sequence[np.ndarray]],
                 params: dict[str, Any]) -> list[tuple[np.ndarray, PartitionSpec]]:
        """Each argument as one global array and its spec: device d's block at index d of a new leading axis
        sharded over every mesh axis, or, for an invariant operand, over the other axes only."""
        arrays = [[np.asarray(x) for x in arg] for arg in args]
        if self.definition.invariant_operand:
            return [_invariant_operand(on, arg, params["axis_name"]) for arg in arrays]
        return [(np.stack(arg), PartitionSpec(on.axis_names)) for arg in arrays]

    def compile(self, on: Mesh, params: dict[str, Any],
                lower_: Callable[[Callable[..., Any], bool], Any]) -> tuple[Compiled, str]:
        """Compile the real op with `lower_(body, check_vma)`; return it and the path taken ("real",
        "real, check_vma=False" for grouped psum and pmean, or on CPU the binding's `on_cpu`: "cpu lowering"
        for an op XLA:CPU runs only through the lowering `oracles.install_cpu_lowerings` registers,
        "equivalent" for one it cannot run at all)."""
        body = self.body(params)
        path = self.definition.jax.on_cpu if jax.default_backend() == "cpu" else "real"
        try:
            return lower_(body, True).compile(), path
        except NotImplementedError:
            if not (self.definition.jax.grouped_unchecked and params.get("axis_index_groups") is not None):
                raise
            return lower_(body, False).compile(), "real, check_vma=False"


DISPATCH: dict[str, Route] = {name: Route(d) for name, d in collectives.REGISTRY.items()}


def route(op: str) -> Route:
    """The route of the collective `op`.

    Raises:
        ValueError: `op` is not a registered collective.
    """
    if op not in DISPATCH:
        raise ValueError(f"op={op!r} must be one of {tuple(DISPATCH)}")
    return DISPATCH[op]


def _invariant_operand(on: Mesh, per_device: list[np.ndarray], axis_name: Any) -> tuple[np.ndarray, PartitionSpec]:
    """One global array and its spec for per-device values that must agree along `axis_name`.

    Raises:
        ValueError: two devices that differ only along `axis_name` hold different values.
    """
    names = axes(axis_name)
    ids = np.arange(on.size).reshape(on.devices.shape)
    for d in range(on.size):
        coords = np.unravel_index(d, ids.shape)
        twin = int(ids[tuple(0 if a in names else c for a, c in zip(on.axis_names, coords))])
        if per_device[d].tobytes() != per_device[twin].tobytes():
            raise ValueError(f"the operand must be invariant along {names}, but device {d} and device {twin} "
                             "hold different values")
    varying = tuple(a for a in on.axis_names if a not in names)
    keep = ids[tuple(slice(None) if a in varying else 0 for a in on.axis_names)].reshape(-1)
    return np.stack([per_device[int(d)] for d in keep]), PartitionSpec(varying if varying else None)


def run_case(op: str, mesh_shape: dict[str, int], args: tuple[list[np.ndarray], ...],
             params: dict[str, Any]) -> tuple[list[np.ndarray], str]:
    """Run one collective on per-device inputs; return per-device outputs and the path taken.

    Raises:
        ValueError: `op` is not a registered collective, or its invariant operand varies.
        Exception: whatever JAX raises for these arguments, unchanged.
    """
    way = route(op)
    on = mesh(mesh_shape)
    operands = way.operands(on, args, params)
    shardings = [NamedSharding(on, spec) for _, spec in operands]
    avals = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s) for (x, _), s in zip(operands, shardings)]
    specs = [s.spec for s in shardings]
    key = ("run", op, tuple(mesh_shape.items()), freeze(params),
           tuple((a.shape, str(a.dtype), str(spec)) for a, spec in zip(avals, specs)))
    compiled, path = cached(key, lambda: way.compile(
        on, params, lambda body, check_vma: lower(body, on, avals, specs, check_vma=check_vma)))
    result = compiled(*(jax.device_put(x, s) for (x, _), s in zip(operands, shardings)))
    return by_device(result, on, lambda data: np.asarray(data)[0]), path
