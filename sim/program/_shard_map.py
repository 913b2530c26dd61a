"""`shard_map` and `PartitionSpec`: global arrays in, one program per device, global arrays out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from layouts import native_array
from sim._errors import InvalidArgumentError, InvalidTypeError, MeshError
from sim.engine._driver import current
from sim.engine._engine import Simulation, gc_paused
from sim.memory._abstract import abstract_like, global_struct, is_abstract, is_hollow, is_struct, stand_in_refusal
from sim.memory._array import Array
from sim.memory._blocks import place_blocks
from sim.memory._spec import PartitionSpec
from sim.network._mesh import Mesh
from sim.program import _explore
from sim.program._blocks import Aval, assemble, avals_of, block_indices, prepare, row_blocks, settle
from sim.program._flat import FlatPlan, arrays, flat_key, flat_outputs, stacked
from sim.program._run import Run
from sim.program._tree import broadcast_prefix, leaves, tree_map
from sim.program._varying import Varying, _ref, as_array, promote, vma_of
from sim.record._equations import Program


def _is_spec(value: Any) -> bool:
    return isinstance(value, PartitionSpec)


class ShardMapped:
    """A function mapped over a mesh; call it like the original, read `last_run` for the trace.

    Inputs are immutable inside `f`, as JAX arrays are: writing into one raises numpy's "assignment
    destination is read-only". Placing an input block that is one contiguous run of the caller's array
    (rows under `P('x')`) copies nothing: the device memory adopts the caller's bytes. Other blocks are
    copied, and so is an input in non-native byte order (converted to native once, as JAX does).
    Each call's global outputs are allocated once: from the second call with the same input shapes and
    dtypes on, collectives write the devices' blocks straight into them (see `sim.program._blocks`). So a run's
    memories alias the caller's inputs and the outputs returned; write into either and `last_run`'s device
    bytes change with it.
    With `sanitize`, `run` returns a `Run` whose `violations` list every broken rule of every call (see
    `shard_map`) instead of raising at the first call with one.
    """

    def __init__(self, f: Callable, mesh: Mesh, in_specs: Any, out_specs: Any, check_vma: bool,
                 sanitize: bool = False, explore_orders: int = 0, seed: int = 0) -> None:
        self.f, self.mesh, self.in_specs, self.out_specs, self.check_vma = f, mesh, in_specs, out_specs, check_vma
        self.sanitize = sanitize
        self.explore_orders, self.seed = explore_orders, seed
        self.last_run: Run | None = None
        self._avals: dict[str, dict[str, Aval]] = {}  # input signature -> each output's global aval, by path
        self._flat: dict[tuple, FlatPlan] = {}  # flat inputs' shapes and dtypes -> how they are placed
        self._flat_out: dict[int, tuple[tuple, tuple]] = {}  # flat outputs' count -> their specs and paths
        self._assemblies: dict[tuple, Any] = {}  # an output's spec, block shape and dtype -> how it is assembled

    def __call__(self, *args: Any) -> Any:
        return self.run(*args).outputs

    def run(self, *args: Any) -> Run:
        """Run the program once and return outputs with the trace and simulated time; with `explore_orders`,
        also run it under that many perturbed orders, the report in the returned run's `order_report`."""
        if self.explore_orders:
            report = _explore.explore(self, *args, orders=self.explore_orders, seed=self.seed)
            self.last_run = replace(report.run, order_report=report)
            return self.last_run
        return self.run_with(args)

    def run_with(self, args: tuple, **simulation: Any) -> Run:
        """Run the program once on a `Simulation` made with the keywords `simulation` (a `perturbation`,
        `last_arrival_wins`)."""
        with gc_paused():  # placing, running and assembling make many acyclic objects per device
            return self._run_with(args, simulation)

    def _run_with(self, args: tuple, simulation: dict) -> Run:
        simulation = Simulation(self.mesh, self.check_vma, sanitize=self.sanitize, **simulation)
        programs, signature = self._programs(simulation, args)
        # after the inputs are placed, so that no input copy takes an output's region
        prepared = prepare(self.mesh, simulation.memories, self._avals.get(signature, {}))
        try:
            results = simulation.run(programs)
        except MeshError as error:
            if not self.sanitize:
                raise
            self.last_run = Run(None, simulation.trace, simulation.now_s, simulation, stopped=str(error))
            return self.last_run
        finally:
            settle(simulation.memories, prepared)
        def output(path: str, spec: PartitionSpec, *per_device: Any) -> Any:
            # abstract results come back as ShapeDtypeStructs, assembled from shapes alone
            if is_abstract(per_device[0]):
                return global_struct(self.mesh, spec, path, per_device)
            return assemble(self.mesh, spec, path, per_device, prepared.get(path), self._assemblies)

        flat = flat_outputs(self.out_specs, results, self._flat_out)
        if flat is not None:  # a flat tuple of arrays under one spec: no tree to walk
            out_specs, out_paths = flat
            results = [tuple([native_array(leaf) for leaf in result]) for result in results]
            outputs: Any = tuple([output(*leaf) for leaf in zip(out_paths, out_specs, *results)])
        else:
            out_specs = _expand(self.out_specs, results[0], "out_specs")
            results = [native_array(result) if isinstance(result, np.ndarray) else tree_map(native_array, result)
                       for result in results]
            out_paths = _paths(results[0], "out")
            outputs = tree_map(output, out_paths, out_specs, *results)
        avals = avals_of(self.mesh, simulation.memories, out_paths, out_specs, results, outputs, prepared)
        abstract = {path for path, out in zip(leaves(out_paths), leaves(outputs)) if is_struct(out)}
        self._avals[signature] = {path: aval for path, aval in avals.items() if path not in abstract}
        self.last_run = Run(outputs, simulation.trace, simulation.now_s, simulation)
        return self.last_run

    def _programs(self, simulation: Simulation, args: tuple) -> tuple[list[Callable[[], Any]], str]:
        """One program per device, its inputs placed in its memory; and the inputs' signature. Inputs that are
        a flat tuple of plain arrays are placed by the plan their shapes and dtypes made on the first call
        (`sim.program._flat.FlatPlan`: the same signature, blocks and types that call found)."""
        key = flat_key(args)
        plan = self._flat.get(key) if key is not None else None
        if plan is not None:
            held = place_blocks(simulation.memories, [(stacked(x, count), which)
                                                      for x, (count, which) in zip(args, plan.rows)])
            if held is not None:
                return self._started(simulation, args, held, plan.vmas, plan.inputs), plan.signature
        in_specs = _expand(self.in_specs, args, "in_specs")
        paths = _paths(args, "args")
        # an array placed with a Format keeps its layout in every device memory
        layouts = tree_map(lambda x: x.layout if isinstance(x, Array) and x.layout.tiling == () else None, args)
        values = tree_map(_value, args)  # an Array's values are gathered once, not once per device
        tree_map(_placeable, paths, values)
        vmas = tree_map(lambda _, spec: frozenset(spec.axes() if self.check_vma else ()), paths, in_specs)
        signature = _signature(paths, values, layouts)
        rows = _row_stacks(self.mesh, paths, values, layouts, in_specs)
        if key is not None and rows is not None:
            self._flat[key] = FlatPlan(signature, tuple(blocks for _, blocks in rows), tuple(vmas))
        held = place_blocks(simulation.memories, [(stacked(x, count), which) for x, (count, which) in rows]) \
            if rows is not None else None
        if held is not None:
            return self._started(simulation, values, held, vmas), signature
        # every device's block of every input, and its type, found once per input
        indices = tree_map(lambda path, x, spec: _Blocks(block_indices(self.mesh, spec, x.shape, path)),
                           paths, values, in_specs)

        def program(device: int) -> Callable[[], Any]:
            memory, record = simulation.memories[device], simulation.programs[device]

            def place(x: np.ndarray, layout: Any, index: _Blocks, vma: frozenset) -> Varying:
                local = memory.view(memory.place(x[index.by_device[device]], layout)).view(Varying)
                local.flags.writeable = False  # an input is immutable, adopted or copied alike
                local.vma = vma
                local.variable = record.new_var(local.dtype, local.shape, vma)
                record.inputs.append(local.variable)
                return local

            mine = tree_map(place, values, layouts, indices, vmas)
            return lambda: self._finish(record, self._called(mine))

        return [program(d) for d in self.mesh.devices], signature

    def _started(self, simulation: Simulation, values: Any, held: list[list[np.ndarray]], vmas: Any,
                 shared: list | None = None) -> list[Callable[[], Any]]:
        """One program per device over its blocks already held (`held`: each input leaf's views by device, in
        `tree_map`'s order), each block typed and recorded as the device's input as `_programs` does it. The
        input variables are values (a name and a type, the same on every device): with `shared` (a plan's
        list), those of programs numbering them from 0 are made once, kept there."""
        leaf_vmas: list[frozenset] = []
        tree_map(leaf_vmas.append, vmas)
        flat = isinstance(values, tuple) and len(values) == len(held) and not hasattr(values, "_fields") \
            and all(isinstance(v, np.ndarray) for v in values)
        types = [(views[0].dtype, views[0].shape, vma) for views, vma in zip(held, leaf_vmas)]
        programs = []
        for device in self.mesh.devices:
            record = simulation.programs[device]
            first = record.take(len(types))
            if shared is not None and not first:
                if not shared:
                    shared += [Program.numbered(k, *type_) for k, type_ in enumerate(types)]
                made = shared
            else:
                made = [Program.numbered(first + k, *type_) for k, type_ in enumerate(types)]
            record.inputs += made
            mine = []
            for views, (_, _, vma), var in zip(held, types, made):
                local = views[device].view(Varying)  # read-only: the held view is
                local.vma, local.variable = vma, var
                mine.append(local)
            if not flat:
                mine = _rebuilt(values, mine)
            programs.append(partial(self._body, record, mine))
        return programs

    def _body(self, record: Program, args: Any) -> Any:
        """A device's program: `f` on its inputs, its outputs checked and recorded."""
        return self._finish(record, self._called(args))

    def _called(self, args: Any) -> Any:
        """`f` on a device's inputs `args`; numpy refusing an abstract value's stand-in dtype (a value taken out
        of meshsim's hands by `np.asarray`) raises `AbstractValueError` saying so (`stand_in_refusal`)."""
        try:
            return self.f(*args)
        except TypeError as error:
            abstract = not isinstance(error, MeshError) and any(is_abstract(x) for x in leaves(args))
            refusal = stand_in_refusal(error) if abstract else None
            if refusal is None:
                raise
            raise refusal.with_traceback(error.__traceback__) from error

    def output_leaves(self, outputs: Any) -> list[tuple[str, PartitionSpec, np.ndarray]]:
        """Each leaf of `outputs` (a run's global outputs) with its path and out_specs entry."""
        specs = _expand(self.out_specs, outputs, "out_specs")
        return list(zip(leaves(_paths(outputs, "out")), leaves(specs, _is_spec), leaves(outputs)))

    def _finish(self, record: Program, result: Any) -> Any:
        """In the device's own thread: check each output's type against its out_specs entry and raise it to
        vary along every axis the entry splits over (a recorded pvary, as JAX does), then record the
        program's outputs. A Python scalar (a constant, as `axis_size` gives) leaves as JAX's shard_map returns
        it: a 0-d array of its weak type's default dtype."""
        spec = self.out_specs
        if isinstance(result, np.ndarray) and _is_spec(spec):  # one array, one spec: no tree to walk
            if self.check_vma:
                result = promote(_check_type("out", spec, result, current().device), frozenset(spec.axes()))
            record.outputs = [_ref(result)]
            return result
        if type(result) is tuple and _is_spec(spec) and arrays(result):
            if self.check_vma:  # a flat tuple of arrays under one spec: no tree to walk
                device, axes = current().device, frozenset(spec.axes())
                result = tuple([promote(_check_type(f"out[{k}]", spec, leaf, device), axes)
                                for k, leaf in enumerate(result)])
            record.outputs = [_ref(leaf) for leaf in result]
            return result
        result = tree_map(as_array, result)
        out_specs = _expand(self.out_specs, result, "out_specs")
        if self.check_vma:
            device = current().device
            result = tree_map(lambda path, spec, leaf: promote(_check_type(path, spec, leaf, device),
                                                               frozenset(spec.axes())),
                              _paths(result, "out"), out_specs, result)
        record.outputs = [_ref(leaf) for leaf in leaves(result)]
        return result


def shard_map(f: Callable, *, mesh: Mesh, in_specs: Any, out_specs: Any, check_vma: bool = True,
              sanitize: bool = False, explore_orders: int = 0, seed: int = 0) -> ShardMapped:
    """Map `f` over `mesh`: split inputs by `in_specs`, run `f` per device, assemble by `out_specs`.

    `f` may branch on device-dependent values and calls collectives from the `collectives` package.
    An output whose spec does not mention a mesh axis must hold the same value on every device along it.
    Inputs are held in native byte order, as JAX holds them: an array of another byte order (a big-endian
    '>f4' on a little-endian machine) is converted to it once, by a copy, when it is placed (so `f`,
    every collective and the device memories see float32), and outputs come back native too.
    With `explore_orders=N`, each call also runs `f` under N perturbed arrival orders (seeds `seed` to
    `seed + N - 1`; see `sim.explore`) and puts the report in `last_run.order_report`.

    With `sanitize=True` a call whose arguments break a rule does not raise: its violations are recorded
    (`Run.violations`, `Run.report()`) and it runs without the broken pieces where the collective can (a
    ragged_all_to_all skips the bad slices, and the receiver keeps `output`'s rows there). A call that
    cannot run at all (mismatched shapes or dtypes) or any other simulator error ends the run there:
    `Run.stopped` says why, `Run.outputs` is None, and the violations found so far stay in the report.

    >>> import numpy as np
    >>> from sim import Mesh, P, shard_map
    >>> f = shard_map(lambda x: x * 2, mesh=Mesh({'x': 2}), in_specs=P('x'), out_specs=P('x'))
    >>> f(np.arange(4)).tolist()
    [0, 2, 4, 6]
    >>> f(np.arange(4, dtype='>i4')).dtype  # a big-endian input, converted where it enters
    dtype('int32')
    """
    if not isinstance(mesh, Mesh):
        raise InvalidTypeError(f"mesh={mesh!r} must be a sim.Mesh")
    for spec in leaves(in_specs, _is_spec) + leaves(out_specs, _is_spec):
        if not _is_spec(spec):
            raise InvalidTypeError(f"spec {spec!r} must be a PartitionSpec (sim.P)")
        for name in spec.axes():
            mesh.axis_names_of(name)
        if len(set(spec.axes())) != len(spec.axes()):
            raise InvalidArgumentError(f"spec {spec!r} must not use a mesh axis twice")
    _explore.check_orders(explore_orders, seed, allow_zero=True)
    return ShardMapped(f, mesh, in_specs, out_specs, check_vma, sanitize, explore_orders, seed)


class _Blocks:
    """The index of every device's block of one input (a leaf to `tree_map`, where a list would be a node)."""

    def __init__(self, by_device: list[tuple[slice, ...]]) -> None:
        self.by_device = by_device


def _row_stacks(mesh: Mesh, paths: Any, values: Any, layouts: Any, in_specs: Any
                ) -> list[tuple[np.ndarray, tuple[int, list[int]]]] | None:
    """When each input is a non-empty C-contiguous numeric array without a layout whose blocks are runs of
    whole rows (so `sim.memory._blocks.place_blocks` holds every device's block of every input at once): per
    input, in `tree_map`'s order, the array and (its block count, each device's block number). None
    otherwise."""
    found: list[Any] = []

    def blocks(path: str, x: np.ndarray, layout: Any, spec: PartitionSpec) -> None:
        if found and found[-1] is None:
            return
        plain = layout is None and x.size and x.flags.c_contiguous and not x.dtype.hasobject and not is_hollow(x.dtype)
        rows = row_blocks(mesh, spec, x.shape, path) if plain else None
        if rows is None:
            found.append(None)
            return
        found.append((x, rows))

    tree_map(blocks, paths, values, layouts, in_specs)
    if None in found:
        return None
    return found


def _rebuilt(tree: Any, flat: list) -> Any:
    """`tree` with its leaves replaced by `flat`'s, in `tree_map`'s order."""
    at = iter(flat)
    return tree_map(lambda _: next(at), tree)


def _value(x: Any) -> np.ndarray:
    """An input's values: a shape-dtype struct (sim's or JAX's) as an abstract array, sizes without bytes; an
    array in another byte order as a native copy (`layouts.native_array`), as JAX converts it."""
    return abstract_like(x) if is_struct(x) else native_array(x)


def _placeable(path: str, x: np.ndarray) -> None:
    """Raise unless `x`'s bytes can be placed in a device memory (Python objects are references, not bytes)."""
    if x.dtype.hasobject:
        raise InvalidTypeError(f"{path}: dtype {x.dtype} holds Python objects, which a device memory cannot hold "
                               f"(it holds bytes); pass an array of numbers or bools")


def _expand(specs: Any, tree: Any, what: str) -> Any:
    if isinstance(specs, list):
        specs = tuple(specs)
    try:
        return broadcast_prefix(specs, tree, _is_spec)
    except ValueError as error:
        raise InvalidArgumentError(f"{what}={specs!r} does not match the values: {error}") from None


def _paths(node: Any, path: str) -> Any:
    """The tree of each leaf's path from `path` (e.g. `args[0]['w']`), None where the tree holds None (a
    module-level function: a nested one calling itself would be a reference cycle per run)."""
    if isinstance(node, (tuple, list)):
        return type(node)(_paths(c, f"{path}[{i}]") for i, c in enumerate(node))
    if isinstance(node, dict):
        return {k: _paths(v, f"{path}[{k!r}]") for k, v in node.items()}
    return None if node is None else path


def _check_type(path: str, spec: PartitionSpec, leaf: Any, device: int) -> Any:
    """An output may vary only along the mesh axes its out_specs entry names."""
    extra = sorted(vma_of(leaf) - set(spec.axes()))
    if extra:
        raise InvalidArgumentError(
            f"{path}: out_specs entry {spec!r} claims the output is replicated along mesh axis {extra[0]!r}, but "
            f"on device {device} its type varies along {extra} ({leaf.variable.type_str() if leaf.variable else ''}); "
            f"reduce it over {extra[0]!r} (psum, all_gather_invariant) or name {extra[0]!r} in out_specs"
        )
    return leaf


def _signature(paths: Any, values: Any, layouts: Any) -> str:
    """What a call's outputs may depend on besides the program: the inputs' structure, shapes, dtypes and
    layouts (the key of the output avals a later call pre-allocates)."""
    return repr(paths) + repr(tree_map(lambda x, layout: (x.shape, x.dtype.str, layout), values, layouts))
