"""The JAX worker's layout ops: the raw bytes of CPU device buffers placed or computed with a `Format`.

Part of the JAX worker: meshes, lowering and the compile cache come from `oracles._jax_setup`, and each
collective runs by its route in `oracles._jax_dispatch`. Two ops:

- "place": `jax.device_put(x, Format(Layout(major_to_minor, tiling), sharding))`; per device: the shard's
  index, the bytes holding its values, `on_device_size_in_bytes()` and the layout JAX reports.
- "layout_collective": a collective under `jax.shard_map` compiled with input and output `Format`s
  (per-device layouts); per device: the result's values and the bytes of its buffer. Every collective
  runs as it runs without layouts: an operand JAX takes invariant (pvary, pscatter) enters over the
  other mesh axes only, grouped psum/pmean run under `check_vma=False`, ragged_all_to_all runs through
  the CPU lowering `oracles.install_cpu_ragged_all_to_all` registers.

Bytes are read by `oracles._device_bytes.raw_bytes` (the allocated `prod(shape) * itemsize` bytes only).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.experimental.layout import Format, Layout
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from oracles._device_bytes import raw_bytes
from oracles._jax_dispatch import route
from oracles._jax_setup import by_device, cached, freeze, lower, mesh


def answer_place(request: dict[str, Any]) -> tuple[Any, str]:
    """A "place" request's per-device shards and its path."""
    params = request["params"]
    return place(request["args"][0][0], params["layout"], params["sharding"]), "real"


def answer_layout_collective(request: dict[str, Any]) -> tuple[Any, str]:
    """A "layout_collective" request's per-device values and result bytes, and its path."""
    outputs, raws, path = layout_collective(request["mesh_shape"], request["args"], request["params"])
    return {"outputs": outputs, "raws": raws}, path


def _sharding(spec: dict[str, Any]) -> Any:
    if "device" in spec:
        return SingleDeviceSharding(jax.devices()[spec["device"]])
    entries = [tuple(e) if isinstance(e, list) else e for e in spec["spec"]]
    return NamedSharding(mesh(spec["mesh_shape"]), PartitionSpec(*entries))


def place(x: np.ndarray, layout: dict[str, Any], sharding: dict[str, Any]) -> list[dict]:
    """Per-device facts of `x` placed with the Format `layout` + `sharding`, in device order."""
    fmt = Format(Layout(tuple(layout["major_to_minor"]), tiling=tuple(map(tuple, layout["tiling"]))),
                 _sharding(sharding))
    array = jax.device_put(np.asarray(x), fmt)
    array.block_until_ready()
    shards = []
    for shard in array.addressable_shards:
        data = shard.data
        index = tuple((s.start or 0, n if s.stop is None else s.stop) for s, n in zip(shard.index, x.shape))
        reported = data.format.layout
        shards.append({"device": shard.device.id, "index": index, "raw": raw_bytes(data),
                       "on_device_size_in_bytes": data.on_device_size_in_bytes(),
                       "layout": (tuple(reported.major_to_minor), tuple(reported.tiling or ()))})
    return sorted(shards, key=lambda s: s["device"])


def _stacked_format(order: Any, rank: int, sharding: NamedSharding) -> Format:
    """The Format of a stacked (1, *block) array whose block has layout `order` (None: row-major)."""
    order = tuple(range(rank)) if order is None else tuple(order)
    return Format(Layout((0, *(d + 1 for d in order))), sharding)


def layout_collective(mesh_shape: dict[str, int], args: tuple[list[np.ndarray], ...],
                      request: dict[str, Any]) -> tuple[list[np.ndarray], list[bytes], str]:
    """Run `request["op"]` with per-device input layouts `request["in_layouts"]` and result layout
    `request["out_layout"]` (major_to_minor tuples, None for row-major); return values, bytes and path."""
    op, params = request["op"], request["params"]
    way, on = route(op), mesh(mesh_shape)
    operands = [(x, NamedSharding(on, spec)) for x, spec in way.operands(on, args, params)]
    in_formats = [_stacked_format(order, x.ndim - 1, sharding)
                  for order, (x, sharding) in zip(request["in_layouts"], operands)]
    out_format = _stacked_format(request["out_layout"], request["out_rank"],
                                 NamedSharding(on, PartitionSpec(on.axis_names)))
    avals = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding) for x, sharding in operands]
    specs = [sharding.spec for _, sharding in operands]
    key = ("layouts", op, tuple(mesh_shape.items()), freeze(params), freeze(request["in_layouts"]),
           freeze(request["out_layout"]), tuple((a.shape, str(a.dtype), str(spec)) for a, spec in zip(avals, specs)))
    compiled, path = cached(key, lambda: way.compile(on, params, lambda body, check_vma: lower(
        body, on, avals, specs, check_vma=check_vma, in_formats=in_formats, out_format=out_format)))
    result = compiled(*(jax.device_put(x, f) for (x, _), f in zip(operands, in_formats)))
    result.block_until_ready()
    shards = by_device(result, on, lambda data: (np.asarray(data)[0], raw_bytes(data)))
    return [values for values, _ in shards], [raw for _, raw in shards], path
