"""The JAX worker's layout ops: the raw bytes of CPU device buffers placed or computed with a `Format`.

Imported by `oracles._jax_worker` (which configures JAX first) and handed the worker module, whose mesh
builder, compile cache and ragged fallback it reuses. Two ops:

- "place": `jax.device_put(x, Format(Layout(major_to_minor, tiling), sharding))`; per device: the shard's
  index, the bytes holding its values, `on_device_size_in_bytes()` and the layout JAX reports.
- "layout_collective": a collective under `jax.shard_map` compiled with input and output `Format`s
  (per-device layouts); per device: the result's values and the bytes of its buffer. The reductions and
  the design note's collectives (the worker's `REDUCTION_OPS`) run as the worker runs them without
  layouts: named through `JAX_NAMES`, an operand JAX takes invariant (pbroadcast, pscatter) entering
  over the other mesh axes only, and grouped psum/pmean under `check_vma=False`.

Bytes are read through `unsafe_buffer_pointer()` after `block_until_ready()`, and only the
`prod(shape) * itemsize` bytes XLA:CPU allocates: reading `on_device_size_in_bytes()` of a tiled buffer
would read past its allocation.
"""

from __future__ import annotations

import ctypes
from types import ModuleType
from typing import Any

import jax
import numpy as np
from jax import lax
from jax.experimental.layout import Format, Layout
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

OPS = ("place", "layout_collective")


def answer(request: dict[str, Any], worker: ModuleType) -> tuple[Any, ...]:
    """One layout request as a reply; an exception from JAX becomes an ("error", kind, message) reply."""
    params = request["params"]
    try:
        if request["op"] == "place":
            shards = place(worker, request["args"][0][0], params["layout"], params["sharding"])
            return ("ok", shards, "real")
        outputs, raws, path = layout_collective(worker, request["mesh_shape"], request["args"], params)
    except Exception as error:  # noqa: BLE001 -- every JAX complaint goes back to the caller
        return ("error", type(error).__name__, str(error))
    return ("ok", {"outputs": outputs, "raws": raws}, path)


def _raw(array: jax.Array) -> bytes:
    """The bytes holding a single-device array's values, read through its buffer pointer."""
    size = int(np.prod(array.shape)) * array.dtype.itemsize
    return ctypes.string_at(array.unsafe_buffer_pointer(), size) if size else b""


def _sharding(worker: ModuleType, spec: dict[str, Any]) -> Any:
    if "device" in spec:
        return SingleDeviceSharding(jax.devices()[spec["device"]])
    entries = [tuple(e) if isinstance(e, list) else e for e in spec["spec"]]
    return NamedSharding(worker._mesh(spec["mesh_shape"]), PartitionSpec(*entries))


def place(worker: ModuleType, x: np.ndarray, layout: dict[str, Any], sharding: dict[str, Any]) -> list[dict]:
    """Per-device facts of `x` placed with the Format `layout` + `sharding`, in device order."""
    fmt = Format(Layout(tuple(layout["major_to_minor"]), tiling=tuple(map(tuple, layout["tiling"]))),
                 _sharding(worker, sharding))
    array = jax.device_put(np.asarray(x), fmt)
    array.block_until_ready()
    shards = []
    for shard in array.addressable_shards:
        data = shard.data
        index = tuple((s.start or 0, n if s.stop is None else s.stop) for s, n in zip(shard.index, x.shape))
        reported = data.format.layout
        shards.append({"device": shard.device.id, "index": index, "raw": _raw(data),
                       "on_device_size_in_bytes": data.on_device_size_in_bytes(),
                       "layout": (tuple(reported.major_to_minor), tuple(reported.tiling or ()))})
    return sorted(shards, key=lambda s: s["device"])


def _stacked_format(order: Any, rank: int, sharding: NamedSharding) -> Format:
    """The Format of a stacked (1, *block) array whose block has layout `order` (None: row-major)."""
    order = tuple(range(rank)) if order is None else tuple(order)
    return Format(Layout((0, *(d + 1 for d in order))), sharding)


def _operands(worker: ModuleType, op: str, mesh: Any, args: tuple[list[np.ndarray], ...],
              params: dict[str, Any]) -> list[tuple[np.ndarray, NamedSharding]]:
    """Each argument as one global array and its sharding: device d's block at index d of a new leading
    axis sharded over every mesh axis, or, for an invariant operand, over the other axes only."""
    arrays = [[np.asarray(x) for x in arg] for arg in args]
    if op in worker._INVARIANT_OPERAND:
        pairs = [worker._invariant_operand(mesh, arg, params["axis_name"]) for arg in arrays]
    else:
        pairs = [(np.stack(arg), PartitionSpec(mesh.axis_names)) for arg in arrays]
    return [(x, NamedSharding(mesh, spec)) for x, spec in pairs]


def _compile(worker: ModuleType, op: str, mesh: Any, params: dict[str, Any], avals: list,
             in_formats: list[Format], out_format: Format) -> tuple[Any, str]:
    def lower(body: Any, check_vma: bool = True) -> Any:
        mapped = jax.shard_map(lambda *xs: body(*(x[0] for x in xs))[None], mesh=mesh,
                               in_specs=tuple(f.sharding.spec for f in in_formats),
                               out_specs=PartitionSpec(mesh.axis_names), check_vma=check_vma)
        return jax.jit(mapped, in_shardings=tuple(in_formats), out_shardings=out_format).lower(*avals)

    if op in worker.REDUCTION_OPS:
        body = worker._reduction_fn(op, params)
        try:
            return lower(body).compile(), "real"
        except NotImplementedError:  # psum and pmean with axis_index_groups: see _compile_reduction
            if params.get("axis_index_groups") is None:
                raise
        return lower(body, check_vma=False).compile(), "real, check_vma=False"
    op_fn = getattr(lax, op)
    lowered = lower(lambda *xs: op_fn(*xs, **params))
    try:
        return lowered.compile(), "real"
    except jax.errors.JaxRuntimeError as error:
        if op != "ragged_all_to_all" or not worker._backend_lacks_ragged(error):
            raise
    body = worker._ragged_decomposition(group_size=worker._group_size(mesh, **params), **params)
    return lower(body).compile(), "decomposition"


def layout_collective(worker: ModuleType, mesh_shape: dict[str, int], args: tuple[list[np.ndarray], ...],
                      request: dict[str, Any]) -> tuple[list[np.ndarray], list[bytes], str]:
    """Run `request["op"]` with per-device input layouts `request["in_layouts"]` and result layout
    `request["out_layout"]` (major_to_minor tuples, None for row-major); return values, bytes and path."""
    op, params = request["op"], request["params"]
    mesh = worker._mesh(mesh_shape)
    operands = _operands(worker, op, mesh, args, params)
    in_formats = [_stacked_format(order, x.ndim - 1, sharding)
                  for order, (x, sharding) in zip(request["in_layouts"], operands)]
    out_format = _stacked_format(request["out_layout"], request["out_rank"],
                                 NamedSharding(mesh, PartitionSpec(mesh.axis_names)))
    avals = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding) for x, sharding in operands]
    key = ("layouts", op, tuple(mesh_shape.items()), worker._freeze(params), worker._freeze(request["in_layouts"]),
           worker._freeze(request["out_layout"]),
           tuple((a.shape, str(a.dtype), str(sharding.spec)) for a, (_, sharding) in zip(avals, operands)))
    if key not in worker._compiled:
        worker._compiled[key] = _compile(worker, op, mesh, params, avals, in_formats, out_format)
    compiled, path = worker._compiled[key]
    result = compiled(*(jax.device_put(x, f) for (x, _), f in zip(operands, in_formats)))
    result.block_until_ready()
    position = {device: i for i, device in enumerate(mesh.devices.flat)}
    outputs: list[np.ndarray] = [np.empty(0)] * mesh.size
    raws: list[bytes] = [b""] * mesh.size
    for shard in result.addressable_shards:
        outputs[position[shard.device]] = np.asarray(shard.data)[0]
        raws[position[shard.device]] = _raw(shard.data)
    return outputs, raws, path
