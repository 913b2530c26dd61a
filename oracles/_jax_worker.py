"""The JAX worker: runs real `jax.lax` collectives under `jax.shard_map` on 8 CPU virtual devices.

Started by `JaxOracle` as `python -m oracles._jax_worker`; reads requests from stdin and writes replies to
stdout in the `oracles._protocol` format until stdin closes. Per-device inputs are stacked along a new
leading axis sharded over all mesh axes, so device d holds exactly its own input; compiled functions are
cached per signature (op, mesh, params, shapes, dtypes).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time
from collections.abc import Callable, Hashable
from typing import Any, BinaryIO

DEVICE_COUNT = 8

# XLA reads its flags once, when the backend starts: they must be in place before jax is imported.
os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    + [f"--xla_force_host_platform_device_count={DEVICE_COUNT}"])
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from oracles._protocol import read_message, write_message  # noqa: E402

# Without x64, JAX silently narrows int64/float64 inputs to 32 bits.
jax.config.update("jax_enable_x64", True)

OPS = ("all_gather", "all_to_all", "ragged_all_to_all")
Compiled = Callable[..., Any]
_compiled: dict[Hashable, tuple[Compiled, str]] = {}


def _freeze(value: Any) -> Hashable:
    """Make params hashable for the cache key (lists become tuples, dicts sorted item tuples)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_freeze(v) for v in value))
    return value


def _mesh(mesh_shape: dict[str, int]) -> Mesh:
    sizes = tuple(mesh_shape.values())
    n = int(np.prod(sizes))
    return Mesh(np.array(jax.devices()[:n]).reshape(sizes), tuple(mesh_shape))


def _lower(body: Callable[..., Any], mesh: Mesh, avals: list[jax.ShapeDtypeStruct]) -> Any:
    """Trace and lower `body` as the per-device program of a shard_map over every mesh axis."""
    spec = PartitionSpec(mesh.axis_names)

    def per_device(*stacked: jax.Array) -> jax.Array:
        return body(*(x[0] for x in stacked))[None]

    mapped = jax.shard_map(per_device, mesh=mesh, in_specs=(spec,) * len(avals), out_specs=spec)
    return jax.jit(mapped).lower(*avals)


def _backend_lacks_ragged(error: Exception) -> bool:
    return "UNIMPLEMENTED" in str(error) and "ragged-all-to-all" in str(error)


def _compile(op: str, mesh: Mesh, params: dict[str, Any],
             avals: list[jax.ShapeDtypeStruct]) -> tuple[Compiled, str]:
    """Compile the real op; for ragged_all_to_all fall back to the decomposition if XLA cannot run it.

    The real op is always traced and lowered first, so its own shape and argument checks apply.
    """
    op_fn = getattr(lax, op)
    lowered = _lower(lambda *xs: op_fn(*xs, **params), mesh, avals)
    try:
        return lowered.compile(), "real"
    except jax.errors.JaxRuntimeError as error:
        if op != "ragged_all_to_all" or not _backend_lacks_ragged(error):
            raise
    group_size = _group_size(mesh, **params)
    body = _ragged_decomposition(group_size=group_size, **params)
    return _lower(body, mesh, avals).compile(), "decomposition"


def _group_size(mesh: Mesh, axis_name: Any, axis_index_groups: Any = None) -> int:
    if axis_index_groups is not None:
        return len(axis_index_groups[0])
    names = axis_name if isinstance(axis_name, (tuple, list)) else (axis_name,)
    return int(np.prod([mesh.shape[name] for name in names]))


def _ragged_decomposition(*, axis_name: Any, axis_index_groups: Any = None,
                          group_size: int) -> Callable[..., jax.Array]:
    """The doc's ragged_all_to_all semantics built from dense JAX collectives (for backends without it).

    Each sender pads every slice to the operand's row count (no valid slice is longer) and one tiled
    all_to_all moves them; the receiver learns where each slice lands and how many rows it really has
    from all_to_alls of `output_offsets` and `send_sizes`, then writes the slices in the doc's loop order.
    """
    def exchange(x: jax.Array) -> jax.Array:
        return lax.all_to_all(x, axis_name, 0, 0, axis_index_groups=axis_index_groups, tiled=True)

    def body(operand: jax.Array, output: jax.Array, input_offsets: jax.Array, send_sizes: jax.Array,
             output_offsets: jax.Array, recv_sizes: jax.Array) -> jax.Array:
        _check_decomposable(operand, output, input_offsets, group_size)
        received = exchange(_padded_slices(operand, input_offsets, send_sizes))
        return _place(output, received, exchange(output_offsets), exchange(send_sizes))

    return body


def _check_decomposable(operand: jax.Array, output: jax.Array, input_offsets: jax.Array,
                        group_size: int) -> None:
    """Reject what the real op lowers but the doc gives no meaning to (XLA does not check these)."""
    if operand.ndim < 1 or operand.shape[1:] != output.shape[1:] or operand.dtype != output.dtype:
        raise ValueError(
            f"ragged_all_to_all operand {operand.dtype}{list(operand.shape)} and output "
            f"{output.dtype}{list(output.shape)} must have rank >= 1, the same dtype and the same "
            "trailing dimensions (the real op lowered, but its result is undefined)")
    if input_offsets.shape[0] % group_size:
        raise ValueError(
            f"ragged_all_to_all offsets have length {input_offsets.shape[0]}, which must be divisible "
            f"by the group size {group_size} (the real op lowered, but its result is undefined)")


def _padded_slices(operand: jax.Array, input_offsets: jax.Array, send_sizes: jax.Array) -> jax.Array:
    """Slice i of `operand`, zero-padded to operand rows, at [i]: shape (K, rows, ...)."""
    rows = operand.shape[0]
    j = jnp.arange(rows)
    gathered = jnp.take(operand, jnp.clip(input_offsets[:, None] + j, 0, rows - 1), axis=0)
    keep = (j < send_sizes[:, None]).reshape(*gathered.shape[:2], *(1,) * (operand.ndim - 1))
    return jnp.where(keep, gathered, jnp.zeros_like(gathered))


def _place(output: jax.Array, received: jax.Array, offsets: jax.Array, sizes: jax.Array) -> jax.Array:
    """Write rows [0, sizes[i]) of received[i] at output rows offsets[i]..., later slices on top."""
    rows = received.shape[1]
    local = jnp.arange(output.shape[0])[None, :] - offsets[:, None]
    hit = (local >= 0) & (local < sizes[:, None])
    trailing = (1,) * (output.ndim - 1)
    result = output
    for i in range(received.shape[0]):  # a Python loop keeps the doc's write order on overlaps
        rows_i = jnp.take(received[i], jnp.clip(local[i], 0, rows - 1), axis=0)
        result = jnp.where(hit[i].reshape(-1, *trailing), rows_i, result)
    return result


def run_case(op: str, mesh_shape: dict[str, int], args: tuple[list[np.ndarray], ...],
             params: dict[str, Any]) -> tuple[list[np.ndarray], str]:
    """Run one collective on per-device inputs; return per-device outputs and the path taken.

    Raises:
        ValueError: `op` is not a supported collective.
        Exception: whatever JAX raises for these arguments, unchanged.
    """
    if op not in OPS:
        raise ValueError(f"op={op!r} must be one of {OPS}")
    mesh = _mesh(mesh_shape)
    sharding = NamedSharding(mesh, PartitionSpec(mesh.axis_names))
    stacked = [np.stack([np.asarray(x) for x in arg]) for arg in args]
    avals = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding) for x in stacked]
    key = (op, tuple(mesh_shape.items()), _freeze(params), tuple((a.shape, str(a.dtype)) for a in avals))
    if key not in _compiled:
        _compiled[key] = _compile(op, mesh, params, avals)
    compiled, path = _compiled[key]
    result = compiled(*(jax.device_put(x, sharding) for x in stacked))
    # a shard's index has no start on a one-device mesh or a zero-size array: place it by its device
    position = {device: i for i, device in enumerate(mesh.devices.flat)}
    outputs: list[np.ndarray] = [np.empty(0)] * mesh.size
    for shard in result.addressable_shards:
        outputs[position[shard.device]] = np.asarray(shard.data)[0]
    return outputs, path


def _crash(params: dict[str, Any]) -> tuple[Any, ...]:
    os._exit(int(params.get("exit_code", 70)))


def _sleep(params: dict[str, Any]) -> tuple[Any, ...]:
    time.sleep(float(params.get("seconds", 3600)))
    return ("ok", [], "sleep")


# Hidden ops that let the tests watch the parent survive a dying or hanging worker.
TEST_OPS: dict[str, Callable[[dict[str, Any]], tuple[Any, ...]]] = {"crash": _crash, "sleep": _sleep}


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """Announce readiness, then answer requests until `requests` closes."""
    write_message(replies, ("ready", {"jax": jax.__version__, "devices": len(jax.devices())}))
    while (request := read_message(requests)) is not None:
        write_message(replies, answer(request))


def main() -> None:
    """Serve on the real stdout; anything else printing to stdout (JAX, XLA) is sent to stderr."""
    faulthandler.enable()  # a segfault inside XLA then leaves a stack in the log the parent reports
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, replies)


# ---------------------------------------------------------------------------------------------- reductions
#
# psum, pmean, pmax, pmin, psum_scatter, ppermute, axis_index and the design note's psum2, pbroadcast,
# all_gather_invariant, pscatter (named in JAX as oracles.jax_oracle.JAX_NAMES says). Outputs are mapped over
# every mesh axis; JAX accepts that for device-invariant results too. pbroadcast and pscatter take an
# operand that is invariant along `axis_name`: it enters through in_specs that leave those axes out, as a
# user would pass it, so the per-device inputs must agree along them. Each device's result is found by the
# device that holds it.

from jax._src.lax import parallel as _parallel  # noqa: E402

from oracles.jax_oracle import JAX_NAMES  # noqa: E402

_LAX_OPS = ("psum", "pmean", "pmax", "pmin", "psum_scatter", "ppermute", "axis_index")
REDUCTION_OPS = (*_LAX_OPS, *JAX_NAMES)
_INVARIANT_OPERAND = ("pbroadcast", "pscatter")


def _axes(axis_name: Any) -> tuple[Any, ...]:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _psum_invariant(x: jax.Array, *, axis_name: Any) -> jax.Array:
    return _parallel.bind_psum_invariant(x, axes=_axes(axis_name), axis_index_groups=None, is_async=False)


def _pvary(x: jax.Array, *, axis_name: Any) -> jax.Array:
    return lax.pcast(x, _axes(axis_name), to="varying")


def _all_gather_invariant(x: jax.Array, *, axis_name: Any, axis: int = 0, tiled: bool = False) -> jax.Array:
    return _parallel.all_gather_invariant(x, _axes(axis_name), axis=axis, tiled=tiled)


def _transposed_all_gather_invariant(x: jax.Array, *, axis_name: Any, axis: int = 0,
                                     tiled: bool = False) -> jax.Array:
    """pscatter as JAX defines it: the linear transpose of all_gather_invariant, applied to `x`."""
    names = _axes(axis_name)
    size = int(np.prod([lax.axis_size(name) for name in names]))
    dim = axis % x.ndim
    example = (lax.slice_in_dim(x, 0, x.shape[dim] // size, axis=dim) if tiled
               else lax.index_in_dim(x, 0, dim, keepdims=False))
    gather = lambda part: _parallel.all_gather_invariant(part, names, axis=axis, tiled=tiled)  # noqa: E731
    (result,) = jax.linear_transpose(gather, lax.pcast(example, names, to="varying"))(x)
    return result


_JAX_FUNCTIONS: dict[str, Callable[..., jax.Array]] = {
    "psum_invariant": _psum_invariant,
    "pvary": _pvary,
    "all_gather_invariant": _all_gather_invariant,
    "transpose(all_gather_invariant)": _transposed_all_gather_invariant,
}


def _reduction_fn(op: str, params: dict[str, Any]) -> Callable[..., jax.Array]:
    fn = getattr(lax, op) if op in _LAX_OPS else _JAX_FUNCTIONS[JAX_NAMES[op]]
    return lambda *xs: fn(*xs, **params)


def _invariant_operand(mesh: Mesh, per_device: list[np.ndarray], axis_name: Any) -> tuple[np.ndarray, PartitionSpec]:
    """One global array and its spec for per-device values that must agree along `axis_name`.

    Raises:
        ValueError: two devices that differ only along `axis_name` hold different values.
    """
    names = _axes(axis_name)
    ids = np.arange(mesh.size).reshape(mesh.devices.shape)
    for d in range(mesh.size):
        coords = np.unravel_index(d, ids.shape)
        twin = int(ids[tuple(0 if a in names else c for a, c in zip(mesh.axis_names, coords))])
        if per_device[d].tobytes() != per_device[twin].tobytes():
            raise ValueError(f"the operand must be invariant along {names}, but device {d} and device {twin} "
                             "hold different values")
    varying = tuple(a for a in mesh.axis_names if a not in names)
    keep = ids[tuple(slice(None) if a in varying else 0 for a in mesh.axis_names)].reshape(-1)
    return np.stack([per_device[int(d)] for d in keep]), PartitionSpec(varying if varying else None)


def _lower_mapped(body: Callable[..., jax.Array], mesh: Mesh, avals: list[jax.ShapeDtypeStruct],
                  in_specs: list[PartitionSpec], check_vma: bool) -> Any:
    def per_device(*stacked: jax.Array) -> jax.Array:
        return body(*(x[0] for x in stacked))[None]

    mapped = jax.shard_map(per_device, mesh=mesh, in_specs=tuple(in_specs),
                           out_specs=PartitionSpec(mesh.axis_names), check_vma=check_vma)
    return jax.jit(mapped).lower(*avals)


def _compile_reduction(op: str, mesh: Mesh, params: dict[str, Any], avals: list[jax.ShapeDtypeStruct],
                       in_specs: list[PartitionSpec]) -> tuple[Compiled, str]:
    """Compile under check_vma=True (JAX's default); psum and pmean reject axis_index_groups there
    (NotImplementedError), so those run under check_vma=False, the only way JAX runs them, and say so."""
    body = _reduction_fn(op, params)
    try:
        return _lower_mapped(body, mesh, avals, in_specs, True).compile(), "real"
    except NotImplementedError:
        if params.get("axis_index_groups") is None:
            raise
    return _lower_mapped(body, mesh, avals, in_specs, False).compile(), "real, check_vma=False"


def run_reduction_case(op: str, mesh_shape: dict[str, int], args: tuple[list[np.ndarray], ...],
                       params: dict[str, Any]) -> tuple[list[np.ndarray], str]:
    """Run one of REDUCTION_OPS on per-device inputs; return per-device outputs and the path taken."""
    mesh = _mesh(mesh_shape)
    arrays = [[np.asarray(x) for x in arg] for arg in args]
    if op in _INVARIANT_OPERAND:
        globals_and_specs = [_invariant_operand(mesh, arg, params["axis_name"]) for arg in arrays]
    else:
        globals_and_specs = [(np.stack(arg), PartitionSpec(mesh.axis_names)) for arg in arrays]
    shardings = [NamedSharding(mesh, spec) for _, spec in globals_and_specs]
    avals = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s) for (x, _), s in zip(globals_and_specs, shardings)]
    key = ("reduction", op, tuple(mesh_shape.items()), _freeze(params),
           tuple((a.shape, str(a.dtype), str(s.spec)) for a, s in zip(avals, shardings)))
    if key not in _compiled:
        _compiled[key] = _compile_reduction(op, mesh, params, avals, [s.spec for s in shardings])
    compiled, path = _compiled[key]
    result = compiled(*(jax.device_put(x, s) for (x, _), s in zip(globals_and_specs, shardings)))
    position = {device: i for i, device in enumerate(mesh.devices.flat)}
    outputs: list[np.ndarray] = [np.empty(0)] * mesh.size
    for shard in result.addressable_shards:
        outputs[position[shard.device]] = np.asarray(shard.data)[0]
    return outputs, path


# ---------------------------------------------------------------------------------------------- layouts
#
# Raw device-buffer bytes for a given Format (oracles._jax_layouts), for the simulator's byte-exact checks.

from oracles import _jax_layouts  # noqa: E402

# ---------------------------------------------------------------------------------------------- programs
#
# Generated shard_map programs (oracles._jax_programs): their output types, and their linear transposes.

from oracles import _jax_programs  # noqa: E402

def _program_case(request: dict[str, Any]) -> tuple[Any, str]:
    params, mesh = request["params"], _mesh(request["mesh_shape"])
    if request["op"] == "program_types":
        return _jax_programs.program_types(mesh, params["program"], params["shapes"]), "real"
    return _jax_programs.program_transpose(mesh, params["program"], params["primals"], params["cotangents"]), "real"


# ---------------------------------------------------------------------------------------------- dispatch


def answer(request: dict[str, Any]) -> tuple[Any, ...]:
    """Turn one request into its reply; an exception from JAX becomes an ("error", kind, message) reply."""
    op = request["op"]
    if op in TEST_OPS:
        return TEST_OPS[op](request["params"])
    if op in _jax_layouts.OPS:
        return _jax_layouts.answer(request, sys.modules[__name__])
    try:
        if op in ("program_types", "program_transpose"):
            outputs, path = _program_case(request)
        elif op in REDUCTION_OPS:
            outputs, path = run_reduction_case(op, request["mesh_shape"], request["args"], request["params"])
        else:
            outputs, path = run_case(op, request["mesh_shape"], request["args"], request["params"])
    except Exception as error:  # noqa: BLE001 -- every JAX complaint goes back to the caller
        return ("error", type(error).__name__, str(error))
    return ("ok", outputs, path)


if __name__ == "__main__":
    main()
