"""`linear_transpose`: the transpose of a simulated `shard_map` program that is linear in some inputs.

The forward program is run once on example inputs; each device's recorded `Program` is then walked
backwards, every equation replaced by its transpose (the design note's table for collectives:
psum2 <-> pbroadcast, all_gather <-> psum_scatter, all_to_all <-> all_to_all, all_gather_invariant <->
pscatter, ppermute <-> the inverse permutation, ragged_all_to_all <-> ragged_all_to_all with offsets
exchanged). The result is itself a `shard_map` program, with in_specs and out_specs swapped, that runs on
the simulator and records its own program, so it can be transposed again.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

import sim
from sim import Const, Var

_METHODS = {"getitem", "reshape", "transpose", "astype"}


def linear_transpose(f: sim.ShardMapped, *primals: Any, linear_argnums: tuple[int, ...] | None = None
                     ) -> sim.ShardMapped:
    """The transpose of `f` with respect to the arguments `linear_argnums` (default: all of them).

    `primals` are example arguments (their values matter only for arguments outside `linear_argnums`,
    which the transposed program takes again as its first inputs). The transposed program takes
    `(*other_args, *output_cotangents)` and returns the cotangents of the linear arguments.

    Example on a 2-device mesh {'i': 2}: `f = shard_map(lambda x: psum(x, 'i'), in_specs=P('i'),
    out_specs=P())` transposes to a program that maps `ybar` to `pbroadcast(ybar, 'i')` on each device:
    no data moves.

    Raises:
        InvalidArgumentError: `f` is not linear in those arguments, or uses an operation without a
            transpose rule.
    """
    if not f.check_vma:
        raise sim.InvalidArgumentError("linear_transpose needs a program with check_vma=True (its types decide "
                                       "where psum2 and pbroadcast go)")
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
        cotangents = _backward(program, set(program.inputs[i] for i in linear), given, args[len(others):])
        result = tuple(cotangents[program.inputs[i]] for i in linear)
        return result if len(result) > 1 else result[0]

    new_in = tuple(in_specs[i] for i in others) + tuple(out_specs)
    new_out = tuple(in_specs[i] for i in linear)
    return sim.shard_map(body, mesh=f.mesh, in_specs=new_in, out_specs=new_out if len(new_out) > 1 else new_out[0])


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


def _kwargs(eq: sim.Equation) -> dict:
    return dict(eq.params)


def _collective(name: str, *args: Any, **kwargs: Any) -> Any:
    import collectives

    return getattr(collectives, name)(*args, **kwargs)


def _evaluate(eq: sim.Equation, args: list) -> Any:
    """Run a recorded non-linear equation again on `args`."""
    params = _kwargs(eq)
    if eq.op in _METHODS:
        x = sim.wrap(args[0], sim.vma_of(args[0])) if not isinstance(args[0], sim.Varying) else args[0]
        method = {"getitem": lambda: x[params["index"]], "reshape": lambda: x.reshape(params["shape"]),
                  "transpose": lambda: x.transpose(params["axes"]), "astype": lambda: x.astype(params["dtype"])}
        return method[eq.op]()
    name, _, method = eq.op.partition(".")
    ufunc = getattr(np, name, None)
    if isinstance(ufunc, np.ufunc):
        return getattr(ufunc, method)(*args, **params) if method else ufunc(*args, **params)
    if eq.op in _COLLECTIVE_ARGS:
        return _collective(eq.op, *args, **params)
    raise sim.InvalidArgumentError(f"linear_transpose cannot replay {eq.op!r} (in `{eq}`)")


# Collectives whose recorded inputs map one to one onto positional arguments.
_COLLECTIVE_ARGS = {"all_gather", "all_to_all", "psum_scatter", "psum2", "pbroadcast", "all_gather_invariant",
                    "pscatter", "ppermute", "ragged_all_to_all", "psum", "pmax", "pmin", "pmean", "axis_index"}


def _transpose(eq: sim.Equation, cts: list, primal: list, is_linear: list) -> list:
    rule = _RULES.get(eq.op)
    if rule is None:
        raise sim.InvalidArgumentError(f"linear_transpose: {eq.op!r} has no transpose rule (in `{eq}`); "
                                       f"the program must be linear in the transposed arguments")
    ct = cts[0] if cts[0] is not None else _zeros(eq.outputs[0])
    return rule(_kwargs(eq), ct, primal, is_linear, eq)


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


def _collective_rule(name: str, rename: Callable[[dict], dict]) -> Callable:
    def rule(params, ct, primal, lin, eq):
        return [_collective(name, ct, **rename(params))]
    return rule


def _inverse_perm(params: dict) -> dict:
    return {"axis_name": params["axis_name"], "perm": [(dst, src) for src, dst in params["perm"]]}


def _grouped_sum(name: str) -> Callable:
    """psum / pmean over axis_index_groups keep their result varying; summing (or averaging) within each
    group is symmetric, so each is its own transpose. Over the whole axis, pmean is psum2 scaled by 1/n."""
    def rule(params, ct, primal, lin, eq):
        if params.get("axis_index_groups") is not None:
            return [_collective(name, ct, params["axis_name"], axis_index_groups=params["axis_index_groups"])]
        if name == "psum":
            _nonlinear(eq)  # untyped psum (check_vma=False) cannot be told from psum2: refused earlier
        size = sim.current().mesh.axis_size(params["axis_name"])
        return [_collective("pbroadcast", ct, params["axis_name"]) / size]
    return rule


def _ragged(params, ct, primal, lin, eq):
    """JAX's rule: send the received rows back where they came from; rows received are not in `output`."""
    _, _, input_offsets, send_sizes, output_offsets, recv_sizes = primal
    names = {"axis_name": params["axis_name"], "axis_index_groups": params["axis_index_groups"]}
    exchange = lambda a: _collective("all_to_all", a, params["axis_name"], 0, 0, tiled=True,
                                     axis_index_groups=params["axis_index_groups"])
    received_at = exchange(output_offsets)
    operand_ct = output_ct = None
    if lin[0]:
        zeros = np.zeros(eq.inputs[0].shape, eq.inputs[0].dtype)
        operand_ct = _collective("ragged_all_to_all", ct, zeros, received_at, recv_sizes, exchange(input_offsets),
                                 send_sizes, **names)
    if lin[1]:
        keep = np.ones(ct.shape[0], bool)
        for start, size in zip(np.asarray(received_at), np.asarray(recv_sizes)):
            keep[start:start + size] = False
        output_ct = ct * keep.reshape((-1,) + (1,) * (ct.ndim - 1)).astype(ct.dtype)
    return [operand_ct, output_ct, None, None, None, None]


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
    "psum2": _collective_rule("pbroadcast", lambda p: {"axis_name": p["axis_name"]}),
    "pbroadcast": _collective_rule("psum2", lambda p: {"axis_name": p["axes"] if "axes" in p else p["axis_name"]}),
    "all_gather": _collective_rule("psum_scatter", lambda p: {
        "axis_name": p["axis_name"], "scatter_dimension": p["axis"], "axis_index_groups": p["axis_index_groups"],
        "tiled": p["tiled"]}),
    "psum_scatter": _collective_rule("all_gather", lambda p: {
        "axis_name": p["axis_name"], "axis": p["scatter_dimension"], "axis_index_groups": p["axis_index_groups"],
        "tiled": p["tiled"]}),
    "all_to_all": _collective_rule("all_to_all", lambda p: {
        "axis_name": p["axis_name"], "split_axis": p["concat_axis"], "concat_axis": p["split_axis"],
        "axis_index_groups": p["axis_index_groups"], "tiled": p["tiled"]}),
    "all_gather_invariant": _collective_rule("pscatter", lambda p: {
        "axis_name": p["axis_name"], "axis": p["axis"], "tiled": p["tiled"]}),
    "pscatter": _collective_rule("all_gather_invariant", lambda p: {
        "axis_name": p["axis_name"], "axis": p["axis"], "tiled": p["tiled"]}),
    "ppermute": _collective_rule("ppermute", _inverse_perm),
    "ragged_all_to_all": _ragged,
    "psum": _grouped_sum("psum"),
    "pmean": _grouped_sum("pmean"),
}
