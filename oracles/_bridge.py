"""`simulate_jax`: a real JAX program, traced to a jaxpr, run with its `shard_map`s on the simulated mesh.

The function is traced with `jax.make_jaxpr` and walked (`oracles._bridge_eval`): equations outside any
`shard_map` run on the host with JAX; a `shard_map` equation becomes one `sim.shard_map` run on a
`sim.Mesh` of the JAX mesh's axes, where every device walks the body on its own block
(`oracles._bridge_device`): local primitives with JAX, collectives through meshsim's protocols.

This module imports jax in the calling process. Simulating needs no JAX devices beyond the host's (a
`jax.sharding.AbstractMesh` works); running the program with real JAX too (`compare_jax`) needs as many
CPU devices as the mesh has, which `XLA_FLAGS=--xla_force_host_platform_device_count=N` gives when it
is set before jax is imported. Loading it has JAX's MLIR contexts verify on the calling thread
(`oracles.serial_mlir_verification`), so that `compare_jax` of a program JAX cannot lower raises JAX's error
where stock JAX 0.10.2 may hang for good (FINDINGS.md 24).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax._src import mesh as mesh_lib
from jax.extend import core

import collectives
import sim
from oracles import _bridge_device, _bridge_nested
from oracles._bridge_device import is_key, to_key
from oracles._bridge_diagnostics import (
    CHOICES,
    SLIPS,
    UNCHECKED_NESTED,
    Diagnostic,
    JaxSlipError,
    differing,
    renumbered,
    report,
    slip,
    source_line,
)
from oracles._bridge_eval import BridgeError, Compile, Evaluator, UnsupportedPrimitiveError, contains
from oracles._bridge_mapped import equation_facts, mapped
from oracles._bridge_mapped import run as run_mapped
from oracles._bridge_meshes import held_sharded, mesh_axes, reorders, shard_map_meshes
from oracles._bridge_permute import devices_at
from oracles._bridge_primitives import check_primitives
from oracles._bridge_segments import PLACEMENTS, execute, local
from oracles._bridge_specs import Entry, assemble, every_device
from oracles._bridge_traces import dynamic, kept, traced
from oracles._serial_verify import serial_mlir_verification

serial_mlir_verification()  # a program JAX cannot lower raises, never hangs


@dataclass(frozen=True)
class Simulated:
    """What `simulate_jax` returns: the outputs (numpy arrays, PRNG keys as JAX key arrays, in `f`'s output
    structure), one `sim.Run` per `shard_map` equation executed, in order (`labels` says which: the user's
    source line of each), the traced jaxpr, every `Diagnostic` where JAX's own answer is wrong on some device,
    and each shard_map JAX would run that the bridge did not simulate (`unsimulated`; empty for every
    program the bridge runs whole). `print` it for one line per run and their total."""

    outputs: Any
    runs: tuple[sim.Run, ...]
    jaxpr: core.ClosedJaxpr
    labels: tuple[str, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    unsimulated: tuple[str, ...] = ()

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

    @property
    def messages(self) -> int:
        """Messages sent in every run together."""
        return sum(len(run.trace.messages) for run in self.runs)

    @property
    def time_s(self) -> float:
        """Simulated time of every run together (the runs follow one another)."""
        return float(sum(run.end_time_s for run in self.runs))

    def explain(self, full: bool = False) -> str:
        """Every run in words, one after another, each headed by its shard_map's source line (`sim.Run.explain`:
        call by call, bounded unless `full`). `print` it."""
        labels = self.labels or ("",) * len(self.runs)
        return "\n\n".join(f"run {k + 1} of {len(self.runs)} ({label}):\n{run.explain(full)}"
                           for k, (run, label) in enumerate(zip(self.runs, labels)))

    def draw(self, path: str | Path, full: bool = False) -> str:
        """Draw every run to `path` (`.svg` or `.html`), one under another, as `sim.Run.draw` draws one (a
        gradient's forward and backward runs, say); returns the text written.

        Raises:
            InvalidArgumentError: `path` ends in neither .svg nor .html, or no shard_map ran.
        """
        return sim.draw_runs(path, self.runs, full)

    def save(self, path: str | Path) -> None:
        """Write every run to `path` (`sim.save_runs`), for `meshsim draw` / `meshsim explain` and
        `sim.load_runs` to read back."""
        sim.save_runs(path, self.runs)

    def __str__(self) -> str:
        lines = [f"run {k + 1} of {len(self.runs)} ({label}): {run!r}"
                 for k, (run, label) in enumerate(zip(self.runs, self.labels or ("",) * len(self.runs)))]
        lines.append(f"total: {len(self.runs)} run{'' if len(self.runs) == 1 else 's'}, {self.messages} "
                     f"message{'' if self.messages == 1 else 's'}, {sim.record.seconds(self.time_s)} simulated")
        lines += [f"not simulated: {what}" for what in self.unsimulated]
        lines += [f"{d.kind}: {d}" for d in self.diagnostics]
        return "\n".join(lines)


def simulate_jax(f: Callable[..., Any], *args: Any, network: sim.Network | None = None, strict: bool = False,
                 compiled: bool = True, **options: Any) -> Simulated:
    """Run the JAX function `f` (jitted or not) on `args` with its `shard_map` bodies on the simulated mesh.

    `f` uses `jax.shard_map` over a `jax.sharding.Mesh` (or `AbstractMesh`, given by `mesh=` or made current
    by `jax.set_mesh`) and any `jax.lax` collectives and `jax.numpy` operations, control flow, callbacks,
    checkpoints and PRNG keys included, and may be the output of `jax.grad`, `jax.vjp`, `jax.jvp`, `jax.vmap`
    or `jax.linear_transpose`. Each shard_map runs on a `sim.Mesh` of the same axes with `network`; `options`
    go to `sim.shard_map` (`sanitize`, `explore_orders`, `seed`). Where JAX's own typing is wrong on some
    device (`oracles._bridge_diagnostics`), the outputs are JAX's and each problem is a `BridgeWarning` and a
    `Diagnostic` in `diagnostics`; with `strict=True` it raises `JaxSlipError` instead.

    The local work between collectives (on each device, and on the host between shard_maps) runs as XLA
    computations compiled as JAX compiles them (`oracles._bridge_segments`), so results equal jitted JAX's
    bit for bit; a jitted `f` is traced once per argument signature, each segment compiled and typed once
    and each shard_map's simulated program (`oracles._bridge_mapped`) made once, so a warm call costs the
    simulation and little more. `compiled=False` evaluates every equation on its own,
    as JAX does under `jax.disable_jit()` (the same messages, trace, times and typed programs; floats may
    differ where XLA fuses, e.g. a multiply and an add into one rounding).

    Example on a 4-device mesh: `f = jax.shard_map(lambda x: jax.lax.psum(x, 'i'), mesh=mesh,
    in_specs=P('i'), out_specs=P())`; `simulate_jax(f, jnp.arange(8.0)).outputs` is `[12., 16.]`, and
    `.run.trace` holds the psum's messages.

    Raises:
        BridgeError: `f` has no shard_map, or runs a collective outside one.
        UnsupportedPrimitiveError: an equation the bridge cannot run, named with its primitive and the
            user's source line, before anything runs.
        TypeMismatchError: meshsim's device-variance type of a value differs from the jaxpr's.
        JaxSlipError: with `strict=True`, JAX's typing or an unchecked out_specs claim is wrong here.
        MeshError: a collective's arguments break its rules (as in any simulated run).
    """
    with sim.gc_paused():  # one collection after the call, not one after each of its shard_map runs
        closed, tree = traced(f, args)
        return run_traced(closed, tree, dynamic(f, args), network, dict(options, strict=strict, compiled=compiled))


def run_traced(closed: core.ClosedJaxpr, tree: Any, args: tuple, network: sim.Network | None,
               options: Mapping[str, Any]) -> Simulated:
    """`simulate_jax` of a function already traced to `closed` (its output tree `tree`) on `args`."""
    kept(("checked", id(closed)), lambda: check_primitives(closed) or closed)
    options = dict(options)
    compiled = bool(options.pop("compiled", True))
    host = _Host(network, bool(options.pop("strict", False)), compiled, options)
    evaluator = Evaluator(host.apply, lambda lit: lit.val, lambda values, aval: jax.numpy.stack(values)
                          if values else jax.numpy.zeros(aval.shape, aval.dtype), host.compile if compiled else None)
    with _explicit_context(closed):
        flat = evaluator.run(closed, [canonical(x, aval) for x, aval in zip(jax.tree.leaves(args),
                                                                           closed.in_avals)])
    outputs = jax.tree.unflatten(tree, [x if is_key(aval) else np.asarray(x)
                                        for x, aval in zip(flat, closed.out_avals)])
    report(host.diagnostics, strict=False)
    return Simulated(outputs, tuple(host.runs), closed, tuple(host.labels), tuple(host.diagnostics),
                     tuple(host.unsimulated))


def _explicit_context(closed: core.ClosedJaxpr) -> Any:
    """Where the host's equations run: under the mesh of the program's shard_maps when that mesh has Explicit
    axes and no mesh is current (their results' types name its devices, as `jax.jit` of the program knows
    them from its arguments), else under whatever context the caller set."""
    if not mesh_lib.get_concrete_mesh().empty:
        return contextlib.nullcontext()
    _, mesh = kept(("explicit mesh", id(closed)), lambda: (closed, _explicit_mesh(closed)))  # one walk per trace
    return contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh)


def _explicit_mesh(closed: core.ClosedJaxpr) -> jax.sharding.Mesh | None:
    """The one mesh with Explicit axes among the program's shard_maps', if there is exactly one."""
    found = {id(m): m for m in shard_map_meshes(closed)  # a nested shard_map's is abstract: left out
             if isinstance(m, jax.sharding.Mesh) and jax.sharding.AxisType.Explicit in m.axis_types}
    return next(iter(found.values())) if len(found) == 1 else None


class _Host:
    """The host's side of a program: equations outside any shard_map run with JAX; each shard_map runs on
    the simulated mesh, its run, label and diagnostics kept here."""

    def __init__(self, network: sim.Network | None, strict: bool, compiled: bool, options: Mapping[str, Any]
                 ) -> None:
        self.network, self.strict, self.compiled, self.options = network, strict, compiled, options
        self.runs: list[sim.Run] = []
        self.labels: list[str] = []
        self.diagnostics: list[Diagnostic] = []
        self.unsimulated: list[str] = []
        # each shard_map output by id: (the value, how jitted JAX holds it sharded over the mesh)
        self.holds: dict[int, tuple[np.ndarray, jax.sharding.NamedSharding]] = {}
        self.compile = Compile(lambda eqn: local(eqn, host=True), "host", self.segment)

    def apply(self, eqn: core.JaxprEqn, ins: list) -> list:
        """One host equation's outputs."""
        name = eqn.primitive.name
        if name == "shard_map":
            return self._shard_map(eqn, ins)
        if name in _bridge_device.PARALLEL:
            raise BridgeError(f"primitive {name!r} at {source_line(eqn)} (in `{eqn}`) runs outside jax.shard_map; "
                              f"the bridge runs collectives only inside a shard_map body")
        if name in PLACEMENTS and _unreduced(eqn.invars[0].aval):
            return [self._reduce(eqn, ins[0])]
        if name in PLACEMENTS and not _held_apart(eqn.outvars[0].aval) and not _held_apart(eqn.invars[0].aval):
            return [_placed(ins[0], eqn.outvars[0].aval)]
        if any(contains(sub, "shard_map") for sub in core.jaxprs_in_params(eqn.params)):
            self.unsimulated.append(f"a shard_map inside {name!r} at {source_line(eqn)}, run by JAX")
        if self.holds and reorders((eqn,)):  # as `segment`: partitioned as JAX partitions it
            ins = [self._held(x) for x in ins]
        out = eqn.primitive.bind(*(jax.numpy.asarray(x) for x in ins), **eqn.params)
        return list(out) if eqn.primitive.multiple_results else [out]

    def segment(self, segment: Any, values: list) -> list | None:
        """A host segment's outputs, compiled as JAX compiles the host's work; where it sums or multiplies
        in an order partitioning changes (`reorders`), on the shard_map outputs it reads held sharded as
        jitted JAX holds them, so XLA partitions it as in the user's program (each device's partial sum, then
        the sum of those)."""
        if self.holds and reorders(segment.eqns):
            values = [self._held(value) for value in values]
        return execute(segment, values, host=True)

    def _held(self, value: Any) -> Any:
        found = self.holds.get(id(value))
        return jax.device_put(value, found[1]) if found is not None and found[0] is value else value

    def _shard_map(self, eqn: core.JaxprEqn, ins: list) -> list:
        p, facts = eqn.params, equation_facts(eqn)
        axes, line = facts.axes, facts.line

        def make(watch: _bridge_device.Watch) -> sim.ShardMapped:
            return sim.shard_map(_bridge_device.body(p["jaxpr"], p["check_vma"], watch, tuple(axes), self.compiled),
                                 mesh=sim.Mesh(axes, network=self.network),
                                 in_specs=tuple(Entry.of(s).plain() for s in p["in_specs"]),
                                 out_specs=every_device(axes), check_vma=p["check_vma"], **self.options)

        values = [np.asarray(jax.random.key_data(x)) if key else np.asarray(x) for x, key in zip(ins, facts.in_keys)]
        kept = mapped(eqn, self.network, self.strict, self.compiled, self.options, make, line)
        watch, run = kept.watch, run_mapped(kept, *values)
        self.runs.append(run)
        self.labels.append(facts.label)
        if run.outputs is None:
            raise BridgeError(f"the simulated shard_map at {line} stopped: {run.stopped}")
        self.diagnostics += slips(watch, axes)
        for diagnostic in _bridge_nested.claims(watch, axes):
            if self.strict:
                raise JaxSlipError(diagnostic.message)
            self.diagnostics.append(diagnostic)
        outs = []
        for k, (blocks, entry, key, var) in enumerate(zip(run.outputs, facts.out_entries, facts.out_keys,
                                                          eqn.outvars)):
            found = assemble(np.asarray(blocks), axes, entry, facts.manual)
            if found.differing:
                self._claim(eqn, k, found, watch)
            value = found.value
            sharding = None if key else held_sharded(p["mesh"], p["out_specs"][k])
            if sharding is not None:  # placed so only where the host's work on it is partitioned (`segment`)
                self.holds[id(value)] = (value, sharding)
            outs.append(to_key(value, var.aval) if key else value)
        return outs

    def _reduce(self, eqn: core.JaxprEqn, partials: Any) -> np.ndarray:
        """A reshard of a value held unreduced (one partial per member of its unreduced axes, as a shard_map
        returns it) to a reduced one: the all-reduce JAX runs there, run as a psum on the simulated mesh."""
        aval = eqn.invars[0].aval
        axes, along = mesh_axes(aval.sharding.mesh), _unreduced(aval)
        if _unreduced(eqn.outvars[0].aval):
            raise UnsupportedPrimitiveError(f"primitive {eqn.primitive.name!r} at {source_line(eqn)} keeps a value "
                                            f"unreduced along some axes: the bridge reduces all of {sorted(along)}")
        names = tuple(n for n in axes if n in along)
        spec = sim.P(names if len(names) > 1 else names[0])
        mapped = sim.shard_map(lambda v: collectives.psum(v[0], names if len(names) > 1 else names[0]),
                               mesh=sim.Mesh(axes, network=self.network), in_specs=spec, out_specs=sim.P(),
                               **self.options)
        run = mapped.run(np.asarray(partials))
        self.runs.append(run)
        self.labels.append(f"the all-reduce of {eqn.primitive.name} at {source_line(eqn)}")
        return np.asarray(run.outputs)

    def _claim(self, eqn: core.JaxprEqn, k: int, found: Any, watch: _bridge_device.Watch) -> None:
        """Output `k` differs along axes its out_specs entry leaves out: the false claim, with the finding of
        the slip that let it through (or of the varying choice of a cond / while_loop in the body)."""
        findings = [SLIPS[e.primitive.name] for e, _, _ in watch.slips.values()]
        if eqn.params["check_vma"]:
            findings += [CHOICES[n] for n in CHOICES if contains(eqn.params["jaxpr"], n)]
            findings += [UNCHECKED_NESTED] if _bridge_nested.unchecked_inside(eqn.params["jaxpr"]) else []
        diagnostic = slip("false replication claim", f"shard_map output {k}", source_line(eqn), found.replicated,
                          found.differing, findings[0] if findings else None)
        if self.strict:
            raise JaxSlipError(diagnostic.message)
        self.diagnostics.append(diagnostic)


def slips(watch: _bridge_device.Watch, axes: Mapping[str, int]) -> list[Diagnostic]:
    """A diagnostic per equation where JAX's typing slipped, with the devices whose values differ."""
    names, sizes = list(axes), tuple(axes.values())
    found = []
    for eqn, along, values in watch.slips.values():
        differ: tuple[int, ...] = ()
        if len(values) == int(np.prod(sizes)):  # every device met the equation
            blocks = np.stack([values[d] for d in sorted(values)])
            differ = differing(blocks, sizes, tuple(names.index(a) for a in sorted(along)))
        line = source_line(eqn, watch.where)
        found.append(slip("typing slip", eqn.primitive.name, line, tuple(sorted(along)), differ,
                          SLIPS[eqn.primitive.name]))
    for eqn, along, indices in watch.renumbered.values():
        found.append(renumbered(eqn.primitive.name, source_line(eqn, watch.where), along, tuple(names),
                                devices_at(indices, along, axes)))
    return found


def _unreduced(aval: Any) -> frozenset:
    """The mesh axes a host value of `aval` is held unreduced along."""
    spec = getattr(getattr(aval, "sharding", None), "spec", None)
    return frozenset(getattr(spec, "unreduced", ()) or ())


def _held_apart(aval: Any) -> frozenset:
    """The mesh axes a host value of `aval` is held unreduced or reduced along (empty: held whole)."""
    spec = getattr(getattr(aval, "sharding", None), "spec", None)
    return _unreduced(aval) | frozenset(getattr(spec, "reduced", ()) or ())


def _placed(x: Any, aval: Any) -> Any:
    """A host value after a reshard or sharding constraint between two whole placements: the same value (the
    placement says which devices hold it, never what it is), as an array of `aval`'s dtype.

    >>> _placed(1.5, jax.ShapeDtypeStruct((), np.float32)).dtype
    dtype('float32')
    """
    return x if isinstance(x, (np.ndarray, jax.Array)) else np.asarray(x, aval.dtype)


def canonical(x: Any, aval: Any) -> Any:
    """An argument as JAX takes it in: a numpy array or Python number in the dtype its jaxpr gives it (JAX's
    canonicalisation: float64 and int64 become float32 and int32 unless jax_enable_x64 is on), so the
    simulated run adds in the precision JAX does; anything else (JAX arrays, PRNG keys) as it is.

    Raises:
        BridgeError: `x` is a shape-dtype struct (JAX's or meshsim's): the bridge computes on values.

    >>> canonical(np.arange(3), jax.ShapeDtypeStruct((3,), np.int32)).dtype
    dtype('int32')
    """
    if isinstance(x, (jax.ShapeDtypeStruct, sim.ShapeDtypeStruct)):
        raise BridgeError(f"an argument is {x}, a shape and dtype without values: simulate_jax runs the program's "
                          f"local work with XLA on each device's values, so it takes arrays; a timing study without "
                          f"the bytes runs the collectives as sim.shard_map of sim.ShapeDtypeStruct operands")
    numeric = isinstance(x, (np.ndarray, np.generic, bool, int, float, complex))
    if not numeric or jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended):
        return x
    value = np.asarray(x)
    return value if value.dtype == aval.dtype else value.astype(aval.dtype)
