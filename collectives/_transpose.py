"""`linear_transpose`: the transpose of a simulated `shard_map` program that is linear in some inputs.

The forward program is run once on example inputs; each device's recorded `Program` is then walked
backwards, every equation replaced by its transpose (the design note's table for collectives:
psum_invariant <-> pvary, all_gather <-> psum_scatter, all_to_all <-> all_to_all, all_gather_invariant <->
pscatter, ppermute <-> the inverse permutation, ragged_all_to_all <-> ragged_all_to_all with offsets
exchanged). The result is itself a `shard_map` program, with in_specs and out_specs swapped, that runs on
the simulator and records its own program, so it can be transposed again.

A collective's equation is replayed and transposed through its `Definition` (`function`, `transpose`),
found in the registry by the name the equation records; the local operations' rules are below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import sim
from collectives._definition import NotLinear, Transposition
from collectives._registry import REGISTRY
from sim import Const, Var

_METHODS = {"getitem", "reshape", "transpose", "astype"}


def linear_transpose(f: sim.ShardMapped, *primals: Any, linear_argnums: tuple[int, ...] | None = None
                     ) -> sim.ShardMapped:
    """The transpose of `f` with respect to the arguments `linear_argnums` (default: all of them).

    `primals` are example arguments (their values matter only for arguments outside `linear_argnums`,
    which the transposed program takes again as its first inputs). The transposed program takes
    `(*other_args, *output_cotangents)` and returns the cotangents of the linear arguments.

    Example on a 2-device mesh {'i': 2}: `f = shard_map(lambda x: psum(x, 'i'), in_specs=P('i'),
    out_specs=P())` transposes to a program that maps `ybar` to `pvary(ybar, 'i')` on each device:
    no data moves.

    Raises:
    A program with `check_vma=False` has no types to tell psum_invariant from psum, so it is transposed the way
    JAX transposes it (the pre-vma rules): each output cotangent is divided by the number of devices its
    out_specs entry replicates it over, psum transposes to psum (pmean to pmean), the other collectives by
    their rules above, and each input cotangent is summed (psum) over the mesh axes its in_specs entry
    leaves out. The transposed program is again unchecked; transposing it again grows, as in JAX (the
    design note's cursed identity: `psum(x / n)`, then `psum(psum(x / n / n))`).

    Raises:
        InvalidArgumentError: `f` is not linear in those arguments, or uses an operation without a
            transpose rule.
    """
    linear = tuple(range(len(primals))) if linear_argnums is None else tuple(linear_argnums)
    in_specs = _flat_specs(f.in_specs, len(primals), "in_specs")
    run = f.run(*primals)
    outputs = run.outputs if isinstance(run.outputs, tuple) else (run.outputs,)
    out_specs = _flat_specs(f.out_specs, len(outputs), "out_specs")
    programs = run.programs
    others = [i for i in range(len(primals)) if i not in linear]

    def body(*args: Any) -> Any:
        program = programs[sim.current().device]
        given = dict(zip((program.inputs[i] for i in others), args[:len(others)]))
        output_cts = args[len(others):]
        if not f.check_vma:
            output_cts = tuple(_divide_unmapped(ct, spec, f.mesh) for ct, spec in zip(output_cts, out_specs))
        cotangents = _backward(program, {program.inputs[i] for i in linear}, given, output_cts)
        result = tuple(cotangents[program.inputs[i]] for i in linear)
        if not f.check_vma:
            result = tuple(_sum_unmapped(ct, in_specs[i], f.mesh) for ct, i in zip(result, linear))
        return result if len(result) > 1 else result[0]

    new_in = tuple(in_specs[i] for i in others) + tuple(out_specs)
    new_out = tuple(in_specs[i] for i in linear)
    return sim.shard_map(body, mesh=f.mesh, in_specs=new_in, out_specs=new_out if len(new_out) > 1 else new_out[0],
                         check_vma=f.check_vma)


def _unmapped(spec: sim.PartitionSpec, mesh: sim.Mesh) -> tuple[str, ...]:
    """The mesh axes `spec` leaves out: the value is claimed equal along them."""
    return tuple(name for name in mesh.shape if name not in spec.axes())


def _divide_unmapped(ct: Any, spec: sim.PartitionSpec, mesh: sim.Mesh) -> Any:
    """An untyped output's cotangent divided by the number of devices its spec replicates it over: every
    one of them holds the whole cotangent, and the transposed body sums their contributions (JAX's rule)."""
    n = int(np.prod([mesh.axis_size(name) for name in _unmapped(spec, mesh)]))
    return ct / n if n != 1 else ct


def _sum_unmapped(ct: Any, spec: sim.PartitionSpec, mesh: sim.Mesh) -> Any:
    """An untyped input's cotangent summed over the axes its spec replicates it along (JAX's rule)."""
    axes = _unmapped(spec, mesh)
    return REGISTRY.ops.psum(ct, axes if len(axes) > 1 else axes[0]) if axes else ct


def _flat_specs(specs: Any, count: int, what: str) -> tuple:
    specs = (specs,) * count if isinstance(specs, sim.PartitionSpec) else tuple(specs)
    if len(specs) != count or not all(isinstance(s, sim.PartitionSpec) for s in specs):
        raise sim.InvalidArgumentError(f"linear_transpose needs flat arrays: {what}={specs!r} must give one "
                                       f"PartitionSpec per array ({count})")
    return tuple(specs)


def _backward(program: sim.Program, linear_inputs: set, given: dict, output_cts: tuple) -> dict:
    """Cotangents of the linear inputs: replay the non-linear part, then walk the linear part backwards."""
    values: dict = dict(given)
    linear = set(linear_inputs)
    for eq in program.equations:
        if any(isinstance(i, Var) and i in linear for i in eq.inputs):
            linear.update(eq.outputs)
        else:
            results = _evaluate(eq, [_value(i, values) for i in eq.inputs])
            values.update(zip(eq.outputs, results if isinstance(results, tuple) else (results,)))
    cts: dict = {}
    for out, ct in zip(program.outputs, output_cts):
        if isinstance(out, Var) and out in linear:
            _add(cts, out, ct)
    for eq in reversed(program.equations):
        out_cts = [cts.pop(o, None) for o in eq.outputs]
        if not any(o in linear for o in eq.outputs) or all(c is None for c in out_cts):
            continue
        is_linear = [isinstance(i, Var) and i in linear for i in eq.inputs]
        primal = [None if lin else _value(i, values) for i, lin in zip(eq.inputs, is_linear)]
        for var, ct in zip(eq.inputs, _transpose(eq, out_cts, primal, is_linear)):
            if ct is not None:
                _add(cts, var, _unbroadcast(ct, var.shape))
    return {v: cts.get(v, _zeros(v)) for v in linear_inputs}


def _value(ref: Any, values: dict) -> Any:
    return ref.value if isinstance(ref, Const) else values[ref]


def _zeros(var: Var) -> np.ndarray:
    return np.zeros(var.shape, var.dtype)


def _add(cts: dict, var: Var, ct: Any) -> None:
    cts[var] = ct if var not in cts else cts[var] + ct


def _unbroadcast(ct: Any, shape: tuple[int, ...]) -> Any:
    """Sum `ct` over the dimensions broadcasting added, back to `shape`."""
    ct_shape = tuple(np.asarray(ct).shape)
    if ct_shape == tuple(shape):
        return ct
    lead = len(ct_shape) - len(shape)
    if lead:
        ct = ct.sum(axis=tuple(range(lead)))
    ones = tuple(i for i, n in enumerate(shape) if n == 1 and ct_shape[lead + i] != 1)
    return ct.sum(axis=ones, keepdims=True) if ones else ct


def _evaluate(eq: sim.Equation, args: list) -> Any:
    """Run a recorded non-linear equation again on `args`."""
    params = dict(eq.params)
    if eq.op in _METHODS:
        x = sim.wrap(args[0], sim.vma_of(args[0])) if not isinstance(args[0], sim.Varying) else args[0]
        method = {"getitem": lambda: x[params["index"]], "reshape": lambda: x.reshape(params["shape"]),
                  "transpose": lambda: x.transpose(params["axes"]), "astype": lambda: x.astype(params["dtype"])}
        return method[eq.op]()
    name, _, method = eq.op.partition(".")
    ufunc = getattr(np, name, None)
    if isinstance(ufunc, np.ufunc):
        return getattr(ufunc, method)(*args, **params) if method else ufunc(*args, **params)
    definition = REGISTRY.get(eq.op)
    if definition is not None:
        # a collective's recorded inputs map one to one onto its positional arguments
        return definition.function(*args, **definition.from_recorded(params))
    raise sim.InvalidArgumentError(f"linear_transpose cannot replay {eq.op!r} (in `{eq}`)")


def _transpose(eq: sim.Equation, cts: list, primal: list, is_linear: list) -> list:
    ct = cts[0] if cts[0] is not None else _zeros(eq.outputs[0])
    definition = REGISTRY.get(eq.op)
    if definition is None:
        rule = _RULES.get(eq.op)
        if rule is None:
            raise sim.InvalidArgumentError(f"linear_transpose: {eq.op!r} has no transpose rule (in `{eq}`); "
                                           f"the program must be linear in the transposed arguments")
        return rule(dict(eq.params), ct, primal, is_linear, eq)
    if isinstance(definition.transpose, NotLinear):
        raise sim.InvalidArgumentError(f"linear_transpose: {eq.op!r} has no transpose rule (in `{eq}`): "
                                       f"{definition.transpose.reason}; the program must be linear in the "
                                       f"transposed arguments")
    params = definition.from_recorded(dict(eq.params))
    return definition.transpose(Transposition(params, ct, primal, is_linear, eq, REGISTRY.ops))


def _nonlinear(eq: sim.Equation) -> None:
    raise sim.InvalidArgumentError(f"linear_transpose: `{eq}` is not linear in the transposed arguments")


def _binary_add(sign: int) -> Callable:
    def rule(params, ct, primal, lin, eq):
        return [ct if lin[0] else None, (ct if sign > 0 else -ct) if lin[1] else None]
    return rule


def _multiply(params, ct, primal, lin, eq):
    if all(lin):
        _nonlinear(eq)
    return [ct * primal[1] if lin[0] else None, primal[0] * ct if lin[1] else None]


def _divide(params, ct, primal, lin, eq):
    if lin[1]:
        _nonlinear(eq)
    return [ct / primal[1], None]


def _sum(params, ct, primal, lin, eq):
    shape = eq.inputs[0].shape
    axis = params.get("axis")
    axes = tuple(range(len(shape))) if axis is None else tuple(np.atleast_1d(axis) % max(len(shape), 1))
    if not params.get("keepdims"):
        ct = ct.reshape(tuple(1 if i in axes else n for i, n in enumerate(shape)))
    return [np.broadcast_to(ct, shape)]


def _getitem(params, ct, primal, lin, eq):
    base = np.zeros(eq.inputs[0].shape, eq.inputs[0].dtype)
    return [sim.apply("scatter_add", _scatter_add(params["index"]), [base, ct], {"index": params["index"]})]


def _scatter_add(index: Any) -> Callable:
    def run(base: np.ndarray, update: np.ndarray) -> np.ndarray:
        out = base.copy()
        np.add.at(out, index, update)
        return out
    return run


def _scatter_add_rule(params, ct, primal, lin, eq):
    return [ct if lin[0] else None, ct[params["index"]] if lin[1] else None]


# The local operations' rules (numpy ufuncs and array methods, as sim records them); each collective's
# rule is its definition's `transpose`.
_RULES: dict[str, Callable] = {
    "add": _binary_add(+1),
    "subtract": _binary_add(-1),
    "negative": lambda params, ct, primal, lin, eq: [-ct],
    "positive": lambda params, ct, primal, lin, eq: [ct],
    "copy": lambda params, ct, primal, lin, eq: [ct],
    "multiply": _multiply,
    "divide": _divide,
    "add.reduce": _sum,
    "broadcast_to": lambda params, ct, primal, lin, eq: [ct],  # _unbroadcast sums the copies
    "getitem": _getitem,
    "scatter_add": _scatter_add_rule,
    "reshape": lambda params, ct, primal, lin, eq: [ct.reshape(eq.inputs[0].shape)],
    "transpose": lambda params, ct, primal, lin, eq: [ct.transpose(tuple(np.argsort(params["axes"])))],
    "astype": lambda params, ct, primal, lin, eq: [ct.astype(eq.inputs[0].dtype)],
}
