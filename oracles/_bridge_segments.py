"""Segments: the local work between collectives, compiled with XLA as JAX compiles it.

A jaxpr is cut into steps (`steps`): each maximal run of equations that an evaluator may compile (its
`compilable` predicate, `local`: no collective, callback or effect, nor any inside a nested body) becomes one
`Segment`; every other equation stays a step of its own, walked or applied one by one. A segment is compiled
once with `jax.jit` (`compiled`), so XLA fuses its work as it fuses it in the user's jitted program (a multiply
and an add become one fused multiply-add, with one rounding), and `execute` runs it: the one place a compiled
segment runs. Plans are cached per jaxpr and compiled functions per `fingerprint`, so a warm call compiles
nothing. For example, a body `psum(a * b + c)` is two steps: the segment [mul, add], then the psum.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax._src import mesh as mesh_lib
from jax._src.lax import parallel
from jax.extend import core

from oracles import _bridge_manual
from oracles._device_time import charge_cost, charging

# Every collective primitive JAX defines; those the registry lacks are refused by name.
PARALLEL = frozenset(p.name for p in vars(parallel).values() if isinstance(p, core.Primitive))
# Casts between JAX's varying, unreduced and reduced types: no data moves, each device keeps its value.
CASTS = frozenset(name for name in PARALLEL if name.endswith(("_cast_p", "_cast"))) | {"preduced"}
# What a compiled segment passes on unchanged: the casts and `pvary` (invariant -> varying), which XLA
# compiles to nothing.
RETYPES = CASTS | {"pvary"}
# Primitives that call back into Python on each device: run one by one, never compiled.
CALLBACKS = frozenset({"pure_callback", "io_callback", "debug_callback", "debug_print"})
# Host primitives that only place or constrain a value: run one by one (the host all-reduces an unreduced
# value there).
PLACEMENTS = frozenset({"reshard", "sharding_constraint"})
# Local primitives whose JAX typing may slip under check_vma (`oracles._bridge_diagnostics.SLIPS`): run one by
# one, where each device's value is watched.
LOCAL_SLIPS = frozenset({"sort", "rng_bit_generator"})
# How many jaxprs keep their plans (a warm program reuses them; the oldest are dropped past this).
_PLANS_KEPT = 1024


@dataclass(eq=False)
class Segment:
    """A run of local equations compiled as one function of `invars` (read by the run, defined before it)
    returning `outvars` (defined in it, read after it); `jitted` is the compiled function, made on first use,
    or None where XLA cannot compile it (`eager` is then True and its equations run one by one)."""

    eqns: tuple[core.JaxprEqn, ...]
    invars: tuple[Any, ...]
    outvars: tuple[Any, ...]
    jitted: Any = None
    eager: bool = False
    ran: bool = False
    manual: bool = False  # compiled inside a shard_map of one device (`oracles._bridge_manual`)
    typed: dict = field(default_factory=dict)  # facts per input types, kept by the evaluator that runs it
    costs: dict = field(default_factory=dict)  # XLA's cost analysis per input types, when time is charged

    def __repr__(self) -> str:
        return f"Segment({' '.join(e.primitive.name for e in self.eqns)})"


_plans: OrderedDict[tuple[int, str], tuple[Any, tuple]] = OrderedDict()


def steps(jaxpr: core.Jaxpr, compilable: Callable[[core.JaxprEqn], bool], kind: str) -> tuple:
    """`jaxpr`'s equations as steps: each maximal run of compilable ones one `Segment`, every other equation
    itself; cached per jaxpr and `kind` (the name of the `compilable` predicate)."""
    key = (id(jaxpr), kind)
    cached = _plans.get(key)
    if cached is not None and cached[0] is jaxpr:
        _plans.move_to_end(key)
        return cached[1]
    plan = _cut(jaxpr, compilable)
    _plans[key] = (jaxpr, plan)
    if len(_plans) > _PLANS_KEPT:
        _plans.popitem(last=False)
    return plan


def _cut(jaxpr: core.Jaxpr, compilable: Callable[[core.JaxprEqn], bool]) -> tuple:
    runs: list[list] = []
    for eqn in jaxpr.eqns:
        if compilable(eqn):
            if not runs or not isinstance(runs[-1], list):
                runs.append([])
            runs[-1].append(eqn)
        else:
            runs.append(eqn)  # type: ignore[arg-type]
    later = _reads_after(jaxpr, runs)
    return tuple(_segment(run, read) if isinstance(run, list) else run for run, read in zip(runs, later))


def _reads_after(jaxpr: core.Jaxpr, runs: list) -> list[set]:
    """For each run, the variables read by the runs after it or by the jaxpr's outputs."""
    seen = {v for v in jaxpr.outvars if not isinstance(v, core.Literal)}
    after: list[set] = []
    for run in reversed(runs):
        after.append(set(seen))
        for eqn in run if isinstance(run, list) else [run]:
            seen.update(v for v in eqn.invars if not isinstance(v, core.Literal))
    return after[::-1]


def _segment(eqns: list, read_after: set) -> Segment:
    defined: set = set()
    invars: list = []
    for eqn in eqns:
        for v in eqn.invars:
            if not isinstance(v, core.Literal) and v not in defined and v not in invars:
                invars.append(v)
        defined.update(v for v in eqn.outvars if not isinstance(v, core.DropVar))
    outvars = [v for eqn in eqns for v in eqn.outvars if v in read_after and not isinstance(v, core.DropVar)]
    return Segment(tuple(eqns), tuple(invars), tuple(dict.fromkeys(outvars)))


def local(eqn: core.JaxprEqn, *, check_vma: bool = False, host: bool = False) -> bool:
    """Whether `eqn` may be compiled into a segment: no collective (casts and pvary, which move no data, may), no
    callback, no effect, and the same for every equation of its nested bodies; on a device under `check_vma`,
    not a primitive whose JAX typing may slip (each device's value is watched there); on the host, no
    shard_map, no PRNG key (a device holds keys as their key data, which its segments wrap and unwrap) and
    no reshard or sharding constraint."""
    name = eqn.primitive.name
    if name in CALLBACKS or eqn.effects or (name in PARALLEL and (host or name not in CASTS)):
        return False
    if name == "shard_map" or (check_vma and name in LOCAL_SLIPS) or (host and name in PLACEMENTS):
        return False
    if host and any(_is_extended(v.aval) for v in (*eqn.invars, *eqn.outvars)):
        return False
    return all(local(inner, check_vma=check_vma, host=host)
               for sub in core.jaxprs_in_params(eqn.params) for inner in sub.eqns)


def _is_extended(aval: Any) -> bool:
    dtype = getattr(aval, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.extended)


def is_key(aval: Any) -> bool:
    """Whether `aval` holds PRNG keys (a typed key array)."""
    dtype = getattr(aval, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def held(aval: Any) -> tuple[np.dtype, tuple[int, ...]]:
    """The dtype and shape of a device's value of `aval`: a key array's are its key data's."""
    if is_key(aval):
        return np.dtype(np.uint32), (*aval.shape, *aval.dtype._impl.key_shape)
    return np.dtype(aval.dtype), tuple(aval.shape)


def compiled(segment: Segment, host: bool = False) -> Any:
    """The segment's function jitted, made once per segment and shared by every segment of the same
    equations on the same input types (a program traced again, or traced with another way of giving its
    mesh, compiles nothing new). A device's segment runs on the bridge's own CPU device (`_local_sharding`);
    a `host` segment, on the user's devices under the user's mesh, as JAX runs it."""
    if segment.jitted is None:
        key = ("host " if host else "manual " if segment.manual else "") + fingerprint(segment)
        if "..." in key or not all(_plain(eqn) for eqn in segment.eqns):
            key = f"{id(segment)}:{key}"  # shown in part only (constants, long arrays): never shared
        segment.jitted = _jitted.get(key)
        if segment.jitted is None:
            here = None if host else _local_sharding()
            function = _function(segment)
            if segment.manual:
                function = _bridge_manual.with_axes(function, segment.invars, _bridge_manual.body_mesh(segment.eqns))
            segment.jitted = _jitted[key] = jax.jit(function, in_shardings=here, out_shardings=here)
            while len(_jitted) > _PLANS_KEPT:
                _jitted.popitem(last=False)
        _jitted.move_to_end(key)
    return segment.jitted


_jitted: OrderedDict[str, Any] = OrderedDict()
_local: list = []  # the synchronous CPU client's one device, as a sharding, once made


def _local_sharding() -> Any:
    """Where segments run: the one device of a CPU client of the bridge's own that runs each computation on the
    calling thread. JAX's CPU client hands every computation to a thread pool and the caller then waits for
    it, which for a segment's small computation costs more than the computation (a segment call took about
    100 us against about 40 us inline). It is the same XLA:CPU compiler, so the code and its bits are those
    of the default client; the user's own JAX calls keep the default client."""
    if not _local:
        from jax._src.lib import xla_client

        client = xla_client.make_cpu_client(asynchronous=False, num_devices=1)
        _local.append(jax.sharding.SingleDeviceSharding(client.local_devices()[0]))
    return _local[0]


def _plain(eqn: core.JaxprEqn) -> bool:
    """Whether `eqn`'s text says all it computes: no body of it closes over constants, which print by name."""
    for value in eqn.params.values():
        for body in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(body, core.ClosedJaxpr) and body.consts:
                return False
    return all(_plain(inner) for sub in core.jaxprs_in_params(eqn.params) for inner in sub.eqns)


def fingerprint(segment: Segment) -> str:
    """The segment's equations and input types as text: equal for segments that compute the same thing."""
    names = {var: f"v{k}" for k, var in enumerate(segment.invars)}
    lines = [" ".join(f"{names[v]}:{v.aval.str_short()}" for v in segment.invars)]
    for eqn in segment.eqns:
        for var in eqn.outvars:
            names.setdefault(var, f"v{len(names)}")
        ins = " ".join(repr(v.val) + ":" + v.aval.str_short() if isinstance(v, core.Literal) else names[v]
                       for v in eqn.invars)
        outs = " ".join(names.get(v, "_") for v in eqn.outvars)
        lines.append(f"{outs} = {eqn.primitive.name}{sorted(eqn.params.items(), key=lambda kv: kv[0])!r} {ins}")
    lines.append(" ".join(names[v] for v in segment.outvars))
    return "\n".join(lines)


def _function(segment: Segment) -> Callable[..., list]:
    """The segment as a function JAX can trace: each equation bound on the traced values, casts passed on."""
    def run(*values: Any) -> list:
        env = {var: _wrapped(value, var.aval) for var, value in zip(segment.invars, values)}
        for eqn in segment.eqns:
            ins = [v.val if isinstance(v, core.Literal) else env[v] for v in eqn.invars]
            if eqn.primitive.name in RETYPES:
                outs = ins
            else:
                with eqn.ctx.manager:
                    out = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(eqn.params))
                outs = out if eqn.primitive.multiple_results else [out]
            env.update((var, o) for var, o in zip(eqn.outvars, outs) if not isinstance(var, core.DropVar))
        return [jax.random.key_data(env[v]) if is_key(v.aval) else env[v] for v in segment.outvars]

    return run


def _wrapped(value: Any, aval: Any) -> Any:
    """A device's value as the segment takes it: key data wrapped as the key array `aval` holds."""
    return jax.random.wrap_key_data(value, impl=aval.dtype._impl.name) if is_key(aval) else value


def execute(segment: Segment, values: Sequence[Any], host: bool = False) -> list[np.ndarray] | None:
    """Run the compiled `segment` on `values` (numpy arrays in its invars' order): its outputs as numpy
    arrays, or None where XLA cannot compile it (the segment is then marked `eager`)."""
    if segment.eager:
        return None
    function = compiled(segment, host)
    local_mesh = not host and _in_mesh()
    try:
        if not local_mesh:
            outs = function(*values)
        else:  # a device's values are local whatever mesh `jax.set_mesh` made current
            with jax.set_mesh(None):
                outs = function(*values)
    except Exception:  # what XLA cannot compile runs one by one, where its errors are explained
        if segment.ran:
            raise
        if not host and not segment.manual and _bridge_manual.body_mesh(segment.eqns) is not None:
            segment.manual, segment.jitted = True, None  # a loop JAX types by variance: bound in a shard_map
            return execute(segment, values, host)
        segment.eager = True
        return None
    segment.ran = True
    if not host and charging():  # its time on the device's compute track (oracles._device_time)
        n = len(segment.eqns)
        charge_cost(_cost(segment, function, values, local_mesh), f"segment of {n} equation{'s' * (n != 1)}")
    return list(outs) if host else [np.asarray(o) for o in outs]  # the host's keep their shardings


def _in_mesh() -> bool:
    """Whether a mesh is current (`jax.set_mesh`, or an abstract one inside a trace)."""
    return not mesh_lib.get_abstract_mesh().empty or not mesh_lib.get_concrete_mesh().empty


def _cost(segment: Segment, function: Any, values: Sequence[Any], local_mesh: bool) -> Any:
    """XLA's cost analysis of `segment` compiled for the types of `values`, made once per types."""
    key = tuple([(v.shape, v.dtype) for v in values])  # numpy arrays (`_bridge_compiled.run`)
    if key not in segment.costs:
        with jax.set_mesh(None) if local_mesh else contextlib.nullcontext():
            segment.costs[key] = function.lower(*values).compile().cost_analysis()
    return segment.costs[key]
