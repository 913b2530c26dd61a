"""How each implementation answers a generated `Case`, and the comparison of their answers.

`run_simulator` runs a case through `sim.shard_map`, as a user would; `run_spec` through the executable
spec; `run_jax` through a `JaxOracle` (real JAX in its worker process). `differences` lists, as text,
every device and leaf where two answers differ in dtype, shape or bytes (`oracles.compare`, the
package's one comparator, finds them). Hypothesis is not needed here.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import collectives
import sim
from oracles import compare, describe, spec
from oracles._compare import aval as _aval
from oracles._compare import flatten as _flatten
from oracles._compare import show as _show


@dataclass(frozen=True, eq=False, repr=False)
class Case:
    """One collective call: `args[k][d]` is device d's value of positional argument k (an array or a pytree)."""

    op: str
    mesh_shape: dict[str, int]
    args: tuple[tuple[Any, ...], ...]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def devices(self) -> int:
        return int(np.prod(list(self.mesh_shape.values())))

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        lines = [f"Case({self.op} on mesh {self.mesh_shape}: {params})"]
        for name, per_device in zip(collectives.definition(self.op).arrays, self.args):
            for path, first in _flatten(per_device[0]):
                lines.append(f"  {name}{path}: {_aval(first)} per device")
                for d, value in enumerate(per_device):
                    leaf = dict(_flatten(value))[path]
                    lines.append(f"    device {d}: {_show(leaf)}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """Hypothesis prints falsifying examples with this: the same readable text as repr()."""
        printer.text(repr(self))


def _unflatten(like: Any, leaves: list[Any]) -> Any:
    """A pytree shaped like `like` holding `leaves` in `_flatten` order."""
    it = iter(leaves)

    def build(node: Any) -> Any:
        if isinstance(node, dict):
            built = {key: build(node[key]) for key in sorted(node)}
            return {key: built[key] for key in node}
        if isinstance(node, (tuple, list)):
            return type(node)(build(child) for child in node)
        return next(it)

    return build(like)


def run_simulator(case: Case) -> list[Any]:
    """The simulator's per-device results, run the way a user would: one `sim.shard_map` over the mesh.

    Per-device inputs are stacked along a new leading axis sharded over every mesh axis; the body takes
    row [0] and returns its result with a new leading axis, under the same spec.
    """
    definition = collectives.definition(case.op)
    mesh = sim.Mesh(dict(case.mesh_shape))
    spec = sim.P(tuple(case.mesh_shape))
    fn = definition.call
    stacked = [_unflatten(per_device[0], [np.stack([leaf for _, leaf in leaves])
                                          for leaves in zip(*(_flatten(v) for v in per_device))])
               for per_device in case.args]

    def body(*blocks: Any) -> Any:
        result = fn(*(sim.tree_map(lambda x: x[0], b) for b in blocks), **case.params)
        return sim.tree_map(lambda x: x[None], result)

    # Inputs split over every axis are typed varying; pvary and pscatter take invariant operands, so
    # their values are checked untyped (their types are checked in test_vma.py).
    mapped = sim.shard_map(body, mesh=mesh, in_specs=(spec,) * len(stacked), out_specs=spec,
                           check_vma=not definition.invariant_operand)
    out = mapped(*stacked)
    return [sim.tree_map(operator.itemgetter(d), out) for d in range(case.devices)]


def run_spec(case: Case, op_spec: Callable[..., list[np.ndarray]] | None = None) -> list[Any]:
    """The executable spec's per-device results, applied leaf by leaf to pytrees."""
    op_spec = op_spec or spec.of(collectives.definition(case.op))
    if not case.args:  # axis_index: no arrays, one result per device
        return op_spec(dict(case.mesh_shape), **case.params)
    per_leaf_args = [[[dict(_flatten(v))[path] for v in per_device] for per_device in case.args]
                     for path, _ in _flatten(case.args[0][0])]
    per_leaf_out = [op_spec(*args, dict(case.mesh_shape), **case.params) for args in per_leaf_args]
    return [_unflatten(case.args[0][d], [out[d] for out in per_leaf_out]) for d in range(case.devices)]


def run_jax(case: Case, oracle: Any) -> list[Any]:
    """Real JAX's per-device results from the oracle's worker, leaf by leaf for pytrees."""
    if not case.args:  # axis_index: no arrays, one result per device
        return oracle.run(case.op, dict(case.mesh_shape), (), dict(case.params)).outputs
    per_leaf_out = []
    for path, _ in _flatten(case.args[0][0]):
        args = tuple([dict(_flatten(v))[path] for v in per_device] for per_device in case.args)
        per_leaf_out.append(oracle.run(case.op, dict(case.mesh_shape), args, dict(case.params)).outputs)
    return [_unflatten(case.args[0][d], [out[d] for out in per_leaf_out]) for d in range(case.devices)]


def differences(expected: Sequence[Any], actual: Sequence[Any], expected_name: str = "spec",
                actual_name: str = "simulator") -> list[str]:
    """Every device and leaf where `actual` differs from `expected` in dtype, shape or bytes, as text
    (`oracles.compare`, the one comparator of answers, finds them)."""
    return [describe(d, expected_name, actual_name) for d in compare(expected, actual)]


def disagreements(case: Case, oracle: Any = None, *, simulator: Callable[[Case], list[Any]] = run_simulator,
                  reference: Callable[[Case], list[Any]] = run_spec) -> list[str]:
    """Every difference between the simulator, the spec and (given `oracle`) real JAX on `case`, as text.

    All three pairs are compared: simulator against spec, spec against JAX, simulator against JAX, so a
    difference names the two answers that differ. Empty when they agree bit for bit on every device.
    """
    answers = {"spec": reference(case), "simulator": simulator(case)}
    found = differences(answers["spec"], answers["simulator"], "spec", "simulator")
    if oracle is not None:
        answers["jax"] = run_jax(case, oracle)
        found += differences(answers["jax"], answers["spec"], "jax", "spec")
        found += differences(answers["jax"], answers["simulator"], "jax", "simulator")
    return found
