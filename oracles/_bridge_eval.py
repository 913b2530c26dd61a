"""The bridge's jaxpr walker: one evaluator for the host and for each simulated device.

An `Evaluator` runs a jaxpr equation by equation. Calls (`jit`, `closed_call`, `checkpoint`, the custom
derivative wrappers) and control flow (`cond`, `while`, `scan`) are walked here, recursively, so that a
`shard_map` or a collective inside them reaches the simulator; every other equation goes to the
evaluator's `apply`, which the host (`oracles._bridge`) and the devices (`oracles._bridge_device`)
define. Under `shard_map` a device walks its own branch of a `cond` and its own number of `while`
iterations: control flow that depends on device values is interpreted per device, as XLA runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from jax.extend import core

import sim
from oracles._bridge_segments import Segment, steps

Apply = Callable[[core.JaxprEqn, list], list]
Literal = Callable[[core.Literal], Any]


@dataclass(frozen=True)
class Compile:
    """How an evaluator compiles: `local(eqn)` says which equations may join a segment, `kind` names that
    predicate (plans are cached by it), `run(segment, values)` runs one (None: run its equations one by one)."""

    local: Callable[[core.JaxprEqn], bool]
    kind: str
    run: Callable[[Segment, list], list | None]


class BridgeError(sim.InvalidArgumentError):
    """A JAX program the bridge cannot run as asked: what, where, and what to do instead."""


class UnsupportedPrimitiveError(BridgeError):
    """An equation whose primitive the bridge has no meaning for, named with the equation."""


# The parameter holding the body of a call-like primitive, by primitive name.
CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
          "checkpoint": "jaxpr", "remat": "jaxpr", "remat2": "jaxpr", "custom_jvp_call": "call_jaxpr",
          "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr", "custom_lin": None}


class Evaluator:
    """Walks jaxprs: control flow and calls here, every other equation through `apply(eqn, inputs)`.

    `literal(lit)` turns a literal of the jaxpr into a value of this evaluator (a host array, or a
    device-local constant); `stack(values, aval)` stacks a scan's per-iteration outputs. With `compile`
    (a `Compile`), each run of equations its `local` predicate accepts is one `Segment`, run by its `run`
    (compiled with XLA; None to run the equations one by one instead). `ready(values)` turns values that may
    be futures (collectives still in flight) into values, where an equation, a body or the caller reads them.
    """

    def __init__(self, apply: Apply, literal: Literal, stack: Callable[[list, Any], Any],
                 compile: Compile | None = None, ready: Callable[[list], list] | None = None) -> None:
        self.apply, self.literal, self.stack, self.compile = apply, literal, stack, compile
        self.ready = ready or (lambda values: values)

    def run(self, jaxpr: core.Jaxpr | core.ClosedJaxpr, args: Sequence[Any], consts: Sequence[Any] = ()) -> list:
        """The outputs of `jaxpr` on `args` (a closed jaxpr brings its own consts)."""
        if isinstance(jaxpr, core.ClosedJaxpr):
            jaxpr, consts = jaxpr.jaxpr, list(jaxpr.consts)
        env: dict[Any, Any] = dict(zip(jaxpr.constvars, consts))
        env.update(zip(jaxpr.invars, args))
        literal = self.literal
        for step in self._steps(jaxpr):
            if step.__class__ is Segment:
                outs = self.compile.run(step, [env[v] for v in step.invars])
                if outs is not None:
                    env.update(zip(step.outvars, outs))
                    continue
                eqns = step.eqns
            else:
                eqns = (step,)
            for eqn in eqns:
                outs = self.equation(eqn, [literal(v) if isinstance(v, core.Literal) else env[v] for v in eqn.invars])
                for var, value in zip(eqn.outvars, outs):
                    if not isinstance(var, core.DropVar):
                        env[var] = value
        return self.ready([literal(v) if isinstance(v, core.Literal) else env[v] for v in jaxpr.outvars])

    def _steps(self, jaxpr: core.Jaxpr) -> tuple:
        if self.compile is None:
            return tuple(jaxpr.eqns)
        return steps(jaxpr, self.compile.local, self.compile.kind)

    def equation(self, eqn: core.JaxprEqn, ins: list) -> list:
        """One equation's outputs: walked here when it holds a body, else `apply`."""
        name = eqn.primitive.name
        if name in CALLS:
            return self._call(eqn, self.ready(ins))
        handler = CONTROL.get(name)
        return handler(self, eqn, self.ready(ins)) if handler else self.apply(eqn, ins)

    def _call(self, eqn: core.JaxprEqn, ins: list) -> list:
        key = CALLS[eqn.primitive.name]
        body = eqn.params.get(key) if key else None
        if body is None:
            raise UnsupportedPrimitiveError(f"primitive {eqn.primitive.name!r} has no body the bridge can walk "
                                            f"(in `{eqn}`)")
        return self.run(body, ins[len(ins) - len(_invars(body)):])


def _invars(body: Any) -> list:
    return (body.jaxpr if isinstance(body, core.ClosedJaxpr) else body).invars


def _cond(ev: Evaluator, eqn: core.JaxprEqn, ins: list) -> list:
    """`cond`: the branch the index picks (clamped into range, as `lax.switch` does)."""
    branches = eqn.params["branches"]
    index = int(np.clip(int(np.asarray(ins[0])), 0, len(branches) - 1))
    return ev.run(branches[index], ins[1:])


def _while(ev: Evaluator, eqn: core.JaxprEqn, ins: list) -> list:
    """`while`: the body while the condition holds, each with its own consts."""
    p = eqn.params
    cond_consts, rest = ins[:p["cond_nconsts"]], ins[p["cond_nconsts"]:]
    body_consts, carry = rest[:p["body_nconsts"]], rest[p["body_nconsts"]:]
    while bool(np.asarray(ev.run(p["cond_jaxpr"], [*cond_consts, *carry])[0])):
        carry = ev.run(p["body_jaxpr"], [*body_consts, *carry])
    return carry


def _scan(ev: Evaluator, eqn: core.JaxprEqn, ins: list) -> list:
    """`scan`: the body once per row of the scanned inputs, carries threaded, outputs stacked."""
    p = eqn.params
    n_consts, n_carry, length = p["num_consts"], p["num_carry"], p["length"]
    consts, carry, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
    steps = range(length - 1, -1, -1) if p["reverse"] else range(length)
    ys: list[list] = []
    for i in steps:
        outs = ev.run(p["jaxpr"], [*consts, *carry, *(x[i] for x in xs)])
        carry, y = outs[:n_carry], outs[n_carry:]
        ys.append(y)
    if p["reverse"]:
        ys.reverse()
    y_avals = [v.aval for v in eqn.outvars[n_carry:]]
    return [*carry, *(ev.stack([row[k] for row in ys], aval) for k, aval in enumerate(y_avals))]


CONTROL: dict[str, Callable[[Evaluator, core.JaxprEqn, list], list]] = {
    "cond": _cond, "while": _while, "scan": _scan,
}


def contains(jaxpr: core.Jaxpr | core.ClosedJaxpr, primitive: str | Collection[str]) -> bool:
    """Whether `jaxpr` or any jaxpr nested in its equations' parameters has an equation of `primitive` (a name,
    or any of a collection of names)."""
    if isinstance(jaxpr, core.ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    return in_equations(jaxpr.eqns, frozenset((primitive,)) if isinstance(primitive, str) else primitive)


def in_equations(eqns: Sequence[core.JaxprEqn], names: Collection[str]) -> bool:
    """Whether any of `eqns`, or of the equations of the jaxprs in their parameters, is of a primitive in
    `names`."""
    return any(eqn.primitive.name in names or any(contains(sub, names) for sub in core.jaxprs_in_params(eqn.params))
               for eqn in eqns)
