"""`shard_map` and `PartitionSpec`: global arrays in, one program per device, global arrays out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from sim._engine import Simulation
from sim._errors import InvalidArgumentError, InvalidTypeError
from sim._mesh import Mesh
from sim._program import Program
from sim._trace import Trace
from sim._tree import broadcast_prefix, leaves, tree_map
from sim._array import Array
from sim._spec import PartitionSpec
from sim._driver import current
from sim._varying import Varying, _ref, promote, vma_of




def _is_spec(value: Any) -> bool:
    return isinstance(value, PartitionSpec)


@dataclass(frozen=True)
class Run:
    """The outcome of one simulated call: outputs, the message trace, the simulated end time and the typed
    program each device executed."""

    outputs: Any
    trace: Trace
    end_time_s: float
    simulation: Simulation

    @property
    def programs(self) -> list[Program]:
        return self.simulation.programs

    def program(self, device: int = 0) -> Program:
        """What `device` executed, as typed equations; `print` it to see `{V:...}` annotations."""
        return self.simulation.programs[device]


class ShardMapped:
    """A function mapped over a mesh; call it like the original, read `last_run` for the trace."""

    def __init__(self, f: Callable, mesh: Mesh, in_specs: Any, out_specs: Any, check_vma: bool) -> None:
        self.f, self.mesh, self.in_specs, self.out_specs, self.check_vma = f, mesh, in_specs, out_specs, check_vma
        self.last_run: Run | None = None

    def __call__(self, *args: Any) -> Any:
        return self.run(*args).outputs

    def run(self, *args: Any) -> Run:
        """Run the program once and return outputs with the trace and simulated time."""
        in_specs = _expand(self.in_specs, args, "in_specs")
        simulation = Simulation(self.mesh, self.check_vma)
        paths = _paths(args, "args")

        def program(device: int) -> Callable[[], Any]:
            memory, record = simulation.memories[device], simulation.programs[device]

            def place(path: str, x: Any, spec: PartitionSpec) -> Varying:
                # an array placed with a Format keeps its layout in every device memory
                layout = x.layout if isinstance(x, Array) and x.layout.tiling == () else None
                x = np.asarray(x)
                block = x[_split(self.mesh, device, spec, x.shape, path)]
                local = memory.view(memory.store(block, layout)).view(Varying)
                local.vma = frozenset(spec.axes()) if self.check_vma else frozenset()
                local.var = record.new_var(local.dtype, local.shape, local.vma)
                record.inputs.append(local.var)
                return local

            mine = tree_map(place, paths, args, in_specs)
            return lambda: self._finish(record, self.f(*mine))

        results = simulation.run([program(d) for d in self.mesh.devices])
        out_specs = _expand(self.out_specs, results[0], "out_specs")
        results = [tree_map(lambda leaf: np.asarray(leaf), result) for result in results]
        outputs = tree_map(
            lambda path, spec, *per_device: _assemble(self.mesh, spec, path, per_device),
            _paths(results[0], "out"), out_specs, *results,
        )
        self.last_run = Run(outputs, simulation.trace, simulation.now_s, simulation)
        return self.last_run


    def _finish(self, record: Program, result: Any) -> Any:
        """In the device's own thread: check each output's type against its out_specs entry and raise it to
        vary along every axis the entry splits over (a recorded pbroadcast, as JAX does), then record the
        program's outputs."""
        out_specs = _expand(self.out_specs, result, "out_specs")
        if self.check_vma:
            device = current().device
            result = tree_map(lambda path, spec, leaf: promote(_check_type(path, spec, leaf, device),
                                                               frozenset(spec.axes())),
                              _paths(result, "out"), out_specs, result)
        record.outputs = [_ref(leaf) for leaf in leaves(result)]
        return result


def shard_map(f: Callable, *, mesh: Mesh, in_specs: Any, out_specs: Any, check_vma: bool = True) -> ShardMapped:
    """Map `f` over `mesh`: split inputs by `in_specs`, run `f` per device, assemble by `out_specs`.

    `f` may branch on device-dependent values and calls collectives from the `collectives` package.
    An output whose spec does not mention a mesh axis must hold the same value on every device along it.

    >>> f = shard_map(lambda x: x * 2, mesh=Mesh({'x': 2}), in_specs=P('x'), out_specs=P('x'))
    >>> f(np.arange(4)).tolist()
    [0, 2, 4, 6]
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
    return ShardMapped(f, mesh, in_specs, out_specs, check_vma)


def _expand(specs: Any, tree: Any, what: str) -> Any:
    if isinstance(specs, list):
        specs = tuple(specs)
    try:
        return broadcast_prefix(specs, tree, _is_spec)
    except ValueError as error:
        raise InvalidArgumentError(f"{what}={specs!r} does not match the values: {error}") from None


def _paths(tree: Any, root: str) -> Any:
    def walk(node: Any, path: str) -> Any:
        if isinstance(node, (tuple, list)):
            return type(node)(walk(c, f"{path}[{i}]") for i, c in enumerate(node))
        if isinstance(node, dict):
            return {k: walk(v, f"{path}[{k!r}]") for k, v in node.items()}
        return None if node is None else path

    return walk(tree, root)


def _split(mesh: Mesh, device: int, spec: PartitionSpec, shape: tuple[int, ...], path: str) -> tuple[slice, ...]:
    """The block of a global array of `shape` that `device` holds under `spec`."""
    if len(spec) > len(shape):
        raise InvalidArgumentError(f"{path}: spec {spec!r} has {len(spec)} entries but the array has rank {len(shape)}")
    index = []
    for dim, entry in enumerate(spec):
        if entry is None:
            index.append(slice(None))
            continue
        count = mesh.axis_size(entry)
        if shape[dim] % count:
            raise InvalidArgumentError(
                f"{path}: dimension {dim} of size {shape[dim]} must be divisible by the {count} devices of {entry!r}"
            )
        block = shape[dim] // count
        start = mesh.axis_index(device, entry) * block
        index.append(slice(start, start + block))
    return tuple(index)


def _assemble(mesh: Mesh, spec: PartitionSpec, path: str, per_device: tuple) -> np.ndarray:
    """Put per-device blocks together; blocks along axes `spec` leaves out must all be equal."""
    blocks = [np.asarray(b) for b in per_device]
    first = blocks[0]
    for d, block in enumerate(blocks):
        if block.shape != first.shape or block.dtype != first.dtype:
            raise InvalidArgumentError(
                f"{path}: device {d} returned {block.dtype}{list(block.shape)} but device 0 returned "
                f"{first.dtype}{list(first.shape)}; every device must return the same shape and dtype"
            )
    if len(spec) > first.ndim:
        raise InvalidArgumentError(f"{path}: out_specs entry {spec!r} has more entries than rank {first.ndim}")
    unmapped = [a for a in mesh.axis_names if a not in spec.axes()]
    global_shape = list(first.shape)
    for dim, entry in enumerate(spec):
        if entry is not None:
            global_shape[dim] *= mesh.axis_size(entry)
    out = np.zeros(global_shape, first.dtype)
    for d, block in enumerate(blocks):
        coords = mesh.coords(d)
        if any(coords[a] for a in unmapped):
            twin = _twin(mesh, d, unmapped)
            if not _same(block, blocks[twin]):
                axis = next(a for a in unmapped if coords[a] != mesh.coords(twin)[a])
                raise InvalidArgumentError(
                    f"{path}: out_specs entry {spec!r} claims the output is replicated along mesh axis {axis!r}, "
                    f"but device {d} and device {twin} hold different values"
                )
            continue
        out[_split(mesh, d, spec, tuple(global_shape), path)] = block
    return out


def _check_type(path: str, spec: PartitionSpec, leaf: Any, device: int) -> Any:
    """An output may vary only along the mesh axes its out_specs entry names."""
    extra = sorted(vma_of(leaf) - set(spec.axes()))
    if extra:
        raise InvalidArgumentError(
            f"{path}: out_specs entry {spec!r} claims the output is replicated along mesh axis {extra[0]!r}, but "
            f"on device {device} its type varies along {extra} ({leaf.var.type_str() if leaf.var else ''}); "
            f"reduce it over {extra[0]!r} (psum, all_gather_invariant) or name {extra[0]!r} in out_specs"
        )
    return leaf


def _twin(mesh: Mesh, device: int, axes: list[str]) -> int:
    """The device with the same coordinates as `device` except 0 along `axes`."""
    coords = mesh.coords(device)
    twin = 0
    for name in mesh.axis_names:
        twin = twin * mesh.shape[name] + (0 if name in axes else coords[name])
    return twin


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.tobytes() == b.tobytes()
