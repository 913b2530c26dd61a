"""A `shard_map` equation run on the simulated mesh: each device walks the body on its own values.

Inside the body, a device evaluates every local primitive with JAX on its own block (`primitive.bind`,
under an empty mesh context: a device's values are local whatever mesh `jax.set_mesh` made current; the result
recorded in the device's typed `sim.Program` under the primitive's name), and runs every collective primitive
as meshsim's collective, found by `collectives.REGISTRY.by_primitive` and called through its `Definition`:
its messages go through the simulated network into the run's trace. PRNG keys live on a device as their key
data (`jax.random.key_data`) and are wrapped again around each primitive that takes one. After each equation
the value's device-variance type is checked against the jaxpr's (`{V:...}`, `{U:...}`) under `check_vma=True`,
so a collective whose meshsim type rule disagrees with JAX's stops the run there; where JAX's own typing is the
one known to slip (`oracles._bridge_diagnostics.SLIPS`), the device keeps its value, takes JAX's type and the
slip is noted in the run's `Watch`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax._src import mesh as mesh_lib
from jax.extend import core

import sim
from collectives import REGISTRY, Definition
from oracles import _bridge_compiled, _bridge_nested, _bridge_positional
from oracles._bridge_compiled import aval_vma as _vma
from oracles._bridge_diagnostics import SLIPS, JaxSlipError, renumbered, slip, source_line
from oracles._bridge_eval import BridgeError, Compile, Evaluator, UnsupportedPrimitiveError
from oracles._bridge_labels import call_label
from oracles._bridge_permute import PERMUTES, devices_at, jax_pairs
from oracles._bridge_segments import CASTS, PARALLEL, RETYPES, is_key, local
from oracles._bridge_specs import Entry
from oracles._device_time import charge_equation, charging, done, hoisted, ready, start_collective
from oracles.jax_fixes._permute_order import numbers_by_mesh_order

# JAX's parameter names where meshsim's differ; every other parameter keeps its name, and those a
# collective does not take (`axis_size`, JAX's own bookkeeping) are dropped.
_RENAMED = {"axes": "axis_name", "all_gather_dimension": "axis"}
# The all_to_all primitive splits and concatenates in place whatever its `tiled` says: `lax.all_to_all`
# adds and removes the untiled axis around it with expand_dims and squeeze.
_FIXED = {"all_to_all": {"tiled": True}}
# JAX's collectives of unreduced and reduced values, and meshsim's collective that moves the same data (a
# device holds an unreduced value as its own partial, a reduced one whole).
ALIASES = {"unreduced_psum": "psum_invariant", "unreduced_reduce_scatter": "reduce_scatter",
           "all_gather_reduced": "all_gather_invariant"}
# JAX's asynchronous collectives: `X_start` runs collective X (its messages cross the network then) and
# `X_done` hands its result on; in between, the device's future holds the result.
STARTS = frozenset(name for name in PARALLEL if name.endswith("_start"))
DONES = frozenset(name for name in PARALLEL if name.endswith("_done"))


class TypeMismatchError(BridgeError):
    """meshsim's device-variance type of a value differs from the one in the jaxpr."""


@dataclass
class Watch:
    """What one simulated shard_map met: each device's value at each typing slip, by equation, and at each
    unchecked replication claim of a nested shard_map."""

    strict: bool = False
    where: str = ""  # the shard_map's source line, for equations whose own JAX did not keep
    slips: dict[int, tuple[core.JaxprEqn, frozenset, dict[int, np.ndarray]]] = field(default_factory=dict)
    # a nested shard_map's outputs whose out_specs claim replication along some of its axes, unchecked
    # (check_vma=False): each device's value at each visit, by (equation, output)
    claims: dict[tuple[int, int], tuple[core.JaxprEqn, int, tuple[str, ...], dict[int, list]]] = field(
        default_factory=dict)
    # permutations over a tuple of mesh axes that JAX numbers in the mesh's order: (equation, tuple, the indices
    # whose sender differs from the one the pairs name) by equation (oracles._bridge_permute)
    renumbered: dict[int, tuple[core.JaxprEqn, tuple[str, ...], tuple[int, ...]]] = field(default_factory=dict)

    def reset(self) -> None:
        """Forget what an earlier run met."""
        self.slips, self.claims, self.renumbered = {}, {}, {}

    def note(self, eqn: core.JaxprEqn, axes: frozenset, device: int, value: np.ndarray) -> None:
        """Device `device` computed `value` where JAX types `eqn`'s result invariant along `axes`."""
        if self.strict:
            line = source_line(eqn, self.where)
            raise JaxSlipError(slip("typing slip", eqn.primitive.name, line, tuple(sorted(axes)), None,
                                    SLIPS[eqn.primitive.name]).message)
        self.slips.setdefault(id(eqn), (eqn, axes, {}))[2][device] = np.array(value, copy=True)


def body(jaxpr: core.Jaxpr, check_vma: bool, watch: Watch, axes: tuple[str, ...], compiled: bool = True
         ) -> Callable[..., tuple]:
    """The per-device program of a shard_map equation whose body is `jaxpr`: each output comes back with one
    leading row (the device's block), typed along every mesh axis `axes`, for the bridge to assemble as JAX
    does (`oracles._bridge_specs`); with `compiled`, the local work between collectives runs as compiled
    segments (`oracles._bridge_compiled`)."""
    if jaxpr.constvars:
        raise BridgeError(f"shard_map body with constvars={jaxpr.constvars} cannot be run; JAX closes over "
                          f"constants as inputs, so this jaxpr was not made by jax.make_jaxpr")
    evaluator = _evaluator(check_vma, watch, compiled)
    everywhere = frozenset(axes) if check_vma else frozenset()

    def program(*args: Any) -> tuple:
        # where work takes time, collectives start as soon as their operands are ready (oracles._device_time)
        run = hoisted(jaxpr, _moves_data) if charging() else jaxpr
        outs = evaluator.run(run, list(args))
        return tuple(_row(out, everywhere) for out in outs)

    return program


def _evaluator(check_vma: bool, watch: Watch, compiled: bool) -> Evaluator:
    """A device's walker of a body: collectives as meshsim's, local runs as compiled segments (`compiled`)."""
    compile = Compile(lambda eqn: local(eqn, check_vma=check_vma), f"device check_vma={check_vma}",
                      lambda segment, values: _bridge_compiled.run(segment, ready(values), check_vma))
    return Evaluator(lambda eqn, ins: _apply(eqn, ins, check_vma, watch, compiled), _literal, _stack,
                     compile if compiled else None, ready)


def _nested(eqn: core.JaxprEqn, ins: list, check_vma: bool, watch: Watch, compiled: bool) -> list:
    """A shard_map in the body, on the same devices (`oracles._bridge_nested`): the device's blocks of its
    operands along its axes, its body walked (its collectives typed by its own `check_vma`), each output
    gathered whole along them again."""
    p, line = eqn.params, source_line(eqn, watch.where)
    specs = [Entry.of(s) for s in (*p["in_specs"], *p["out_specs"])]
    if any(entry.unreduced for entry in specs):
        raise BridgeError(f"the shard_map at {line} is nested in a shard_map body with an unreduced spec: the "
                          f"bridge holds a nested shard_map's values whole (drop unreduced= there)")
    context, checked = sim.current(), p["check_vma"]
    device, program = context.device, context.program
    outer_label, context.check_vma = program.label, checked
    try:
        args = [sim.wrap(_bridge_nested.block(x, entry, context.mesh, device), _vma(v.aval) if checked else frozenset())
                for x, entry, v in zip(ins, specs, p["jaxpr"].invars)]
        outs = _evaluator(checked, watch, compiled).run(p["jaxpr"], args)
        program.label = _label(eqn, watch.where)
        wholes = [_bridge_nested.whole(out, entry, checked) for out, entry in zip(outs, specs[len(ins):])]
    finally:
        program.label, context.check_vma = outer_label, check_vma
    for k, entry in enumerate(specs[len(ins):]):
        claimed = () if checked else tuple(sorted(set(p["newly_manual_axes"]) - set(entry.axes())))
        if claimed:  # unchecked: whether the devices along them agree is found once the run is over
            noted = watch.claims.setdefault((id(eqn), k), (eqn, k, claimed, {}))[3]
            noted.setdefault(device, []).append(np.array(wholes[k], copy=True))
    return [sim.wrap(np.asarray(value), _vma(var.aval) if check_vma else frozenset())
            for value, var in zip(wholes, eqn.outvars)]


def _row(out: Any, vma: frozenset) -> sim.Varying:
    """A device's output as one leading row, typed `vma`, still the program's output variable; read-only (the
    run copies it into the global output, and a row is never a fresh allocation whose region it could take)."""
    if out.__class__ is sim.Varying:  # a view of it with one leading row (its own `reshape` would record one)
        row = np.ndarray.reshape(out, (1, *out.shape))
        row.vma, row.variable = vma, out.variable
    else:
        row = sim.wrap(np.asarray(out)[None], vma)
        row.variable = getattr(out, "variable", None)
    row.flags.writeable = False
    return row


def to_key(data: Any, aval: Any) -> Any:
    """Key data (`jax.random.key_data`'s uint32 array) as the key array of `aval`'s implementation."""
    return jax.random.wrap_key_data(np.asarray(data), impl=aval.dtype._impl.name)


def _literal(lit: core.Literal) -> np.ndarray:
    if is_key(lit.aval):
        return np.asarray(jax.random.key_data(lit.val))
    return np.asarray(lit.val, dtype=lit.aval.dtype)


def _stack(values: list, aval: Any) -> Any:
    if not values:
        return sim.wrap(np.zeros(aval.shape, aval.dtype), _vma(aval))
    return np.stack(values)


def _apply(eqn: core.JaxprEqn, ins: list, check_vma: bool, watch: Watch, compiled: bool) -> list:
    ins = ready(ins)  # an operand still in flight is waited for here, where it is first read
    name = eqn.primitive.name
    if name == "shard_map":
        return _nested(eqn, ins, check_vma, watch, compiled)
    positional = _memo(eqn, "positional", lambda: _bridge_positional.split(eqn)) \
        if name in _bridge_positional.REDUCTIONS else None
    if positional is not None:  # a reduction over a vmap axis: on the device first, then over the named axes
        ins = _bridge_positional.reduce(eqn, positional[0], ins)
        if positional[1] is None:
            return _typed(eqn, ins, check_vma, watch)
        eqn = positional[1]
    definition = _definition(name)
    if definition is not None:
        renumbering = _renumbering(eqn) if name in PERMUTES else None
        if renumbering is not None:
            _note_renumbering(eqn, watch, renumbering[1])
        program = sim.current().program  # faces: each call labelled with its line, as `sim.labelled` labels it
        outer, program.label = program.label, _label(eqn, watch.where)
        try:
            if name in STARTS:  # a future: its messages fly beside the device's work until done (oracles._device_time)
                return start_collective(lambda: _collective(definition, eqn, ins), len(eqn.outvars))
            if charging():  # dataflow: the device goes on with work that does not read the outputs
                check = (lambda k, out: _check_type(eqn, eqn.outvars[k], out, watch)) if check_vma else None
                return start_collective(lambda: _collective(definition, eqn, ins), len(eqn.outvars), check)
            outs = _collective(definition, eqn, ins)
        finally:
            program.label = outer
    elif name in DONES:
        outs = done(ins)
    elif name in CASTS:
        outs = [sim.wrap(np.asarray(x), _vma(v.aval) if check_vma else frozenset(), name, {}, [x])
                for x, v in zip(ins, eqn.outvars)]
    elif name in PARALLEL:
        raise UnsupportedPrimitiveError(
            f"primitive {name!r} at {source_line(eqn, watch.where)} (in `{eqn}`) is a JAX collective meshsim does not "
            f"implement; the bridge runs these: {sorted(p for d in REGISTRY.values() for p in d.jax.primitives)}")
    else:
        outs = _local(eqn, ins, watch.where)
    return _typed(eqn, outs, check_vma, watch)


def _typed(eqn: core.JaxprEqn, outs: list, check_vma: bool, watch: Watch) -> list:
    """`outs`, each checked against the type the jaxpr gives it under `check_vma`."""
    if check_vma:
        for var, out in zip(eqn.outvars, outs):
            _check_type(eqn, var, out, watch)
    return outs


def _moves_data(eqn: core.JaxprEqn) -> bool:
    """Whether `eqn` is a collective that sends messages (not a cast between varying and invariant types)."""
    return eqn.primitive.name not in RETYPES and _definition(eqn.primitive.name) is not None


def _definition(primitive: str) -> Definition | None:
    """meshsim's collective that runs JAX's primitive `primitive`, or None for a local one (found once per name:
    every equation of every device asks)."""
    try:
        return _definitions[primitive]
    except KeyError:
        pass
    name = primitive.removesuffix("_start") if primitive in STARTS else primitive
    try:
        found = REGISTRY.by_primitive(ALIASES.get(name, name))
    except KeyError:
        found = None
    _definitions[primitive] = found
    return found


_definitions: dict[str, Definition | None] = {}


def _local(eqn: core.JaxprEqn, ins: list, where: str) -> list:
    """A local primitive, evaluated by JAX on this device's values and recorded in its program."""
    in_avals = [v.aval for v in eqn.invars]
    out_avals = [v.aval for v in eqn.outvars]

    def evaluate(*plain: np.ndarray) -> Any:
        operands = [to_key(x, a) if is_key(a) else jax.numpy.asarray(x) for x, a in zip(plain, in_avals)]
        try:
            with mesh_lib.use_abstract_mesh(mesh_lib.empty_abstract_mesh):
                result = eqn.primitive.bind(*operands, **eqn.params)
        except Exception as error:
            raise UnsupportedPrimitiveError(
                f"device {sim.current().device}: primitive {eqn.primitive.name!r} at {source_line(eqn, where)} (in "
                f"`{eqn}`) could not be evaluated on one device's values: {type(error).__name__}: {error}"
            ) from error
        results = result if eqn.primitive.multiple_results else (result,)
        plain_out = tuple(np.asarray(jax.random.key_data(r)) if is_key(a) else np.asarray(r)
                          for r, a in zip(results, out_avals))
        return plain_out if eqn.primitive.multiple_results else plain_out[0]

    out = sim.apply(eqn.primitive.name, evaluate, list(ins), _recorded(eqn.params))
    charge_equation(eqn)  # its time on the device's compute track (oracles._device_time)
    return list(out) if eqn.primitive.multiple_results else [out]


def _recorded(params: dict) -> dict:
    """The parameters a program records: bodies are shown by name, not printed whole."""
    return {k: ("<jaxpr>" if isinstance(v, (core.Jaxpr, core.ClosedJaxpr)) else v) for k, v in params.items()}


# What each collective equation met so far calls meshsim with (its keywords, its label), kept with it: a warm
# call walks the same equations.
_KEPT = 4096
_kept: dict[tuple[int, str], tuple[Any, Any]] = {}


def _memo(eqn: core.JaxprEqn, kind: str, make: Callable[[], Any]) -> Any:
    """`make()` for `eqn`, made once per equation and `kind`."""
    found = _kept.get((id(eqn), kind))
    if found is None or found[0] is not eqn:
        if len(_kept) >= _KEPT:
            _kept.clear()
        found = _kept[(id(eqn), kind)] = (eqn, make())
    return found[1]


def _label(eqn: core.JaxprEqn, where: str) -> str:
    return _memo(eqn, f"label {where}", lambda: call_label(eqn, where))


def _keywords(definition: Definition, eqn: core.JaxprEqn) -> dict[str, Any]:
    """The keywords meshsim's collective takes for `eqn`: JAX's parameters renamed, those it lacks dropped."""
    params = {_RENAMED.get(k, k): v for k, v in eqn.params.items()}
    params.update(_FIXED.get(eqn.primitive.name.removesuffix("_start"), {}))
    kwargs = {k: v for k, v in params.items() if definition.takes(k)}
    names = kwargs.get("axis_name")
    if isinstance(names, (tuple, list)) and len(names) == 1:
        kwargs["axis_name"] = names[0]
    return kwargs


def _collective(definition: Definition, eqn: core.JaxprEqn, ins: list) -> list:
    """A collective primitive run as meshsim's collective: its messages cross the simulated network."""
    kwargs = dict(_memo(eqn, f"keywords {definition.name}", lambda: _keywords(definition, eqn)))
    if eqn.primitive.name in PERMUTES:
        renumbering = _renumbering(eqn)
        if renumbering is not None:  # JAX's pairs, in meshsim's numbering (FINDINGS.md 29)
            kwargs["perm"] = renumbering[0]
    if len(definition.arrays) == 1 and len(ins) > 1:
        # psum and its kin bind every leaf of a pytree at once: meshsim takes the pytree
        return list(definition.function(tuple(ins), **kwargs))
    out = definition.function(*ins, **kwargs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _renumbering(eqn: core.JaxprEqn) -> tuple[tuple, tuple[int, ...]] | None:
    """Where this process's JAX numbers the pairs of `eqn` (a permutation over a tuple of mesh axes) otherwise
    than `axis_index` does: JAX's pairs in meshsim's numbering, and the indices whose sender differs."""
    names = eqn.params["axis_name"]
    if not isinstance(names, tuple) or len(names) < 2 or not numbers_by_mesh_order():
        return None
    mesh = sim.current().mesh.shape
    if not set(names) <= set(mesh):  # a vmap axis among them: FINDINGS.md 18's, not this
        return None
    return _memo(eqn, "renumbering", lambda: jax_pairs(eqn.params["perm"], names, mesh))


def _note_renumbering(eqn: core.JaxprEqn, watch: Watch, indices: tuple[int, ...]) -> None:
    """Report that JAX runs `eqn`'s pairs between other devices than they name: the tuple indices `indices`
    receive from another device (an error with `strict`)."""
    if id(eqn) in watch.renumbered:
        return
    names = eqn.params["axis_name"]
    if watch.strict:
        mesh = sim.current().mesh.shape
        raise JaxSlipError(renumbered(eqn.primitive.name, source_line(eqn, watch.where), names, tuple(mesh),
                                      devices_at(indices, names, mesh)).message)
    watch.renumbered[id(eqn)] = (eqn, names, indices)


def _check_type(eqn: core.JaxprEqn, var: Any, out: Any, watch: Watch) -> None:
    expected, found = _vma(var.aval), sim.vma_of(out)
    if expected == found:
        return
    device = sim.current().device
    if eqn.primitive.name in SLIPS and expected < found and isinstance(out, sim.Varying):
        watch.note(eqn, found - expected, device, np.asarray(out))
        out.vma = expected
        return
    raise TypeMismatchError(
        f"device {device}: `{eqn}` at {source_line(eqn, watch.where)}: meshsim's result varies along "
        f"{sorted(found)}, the jaxpr says {sorted(expected)} ({var}:{var.aval.str_short()}); meshsim's "
        f"device-variance rule for {eqn.primitive.name!r} disagrees with JAX's")
