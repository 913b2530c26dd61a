"""`compare_jax`: a JAX program run by real JAX and through the bridge, output by output.

Each output agrees when its dtype and shape are the same and its bytes (row-major) are identical; a
comparison may allow a tolerance for float outputs whose reduction order differs from XLA's (`rtol`,
`atol`). Where a layout is given (JAX's output carries a `Format` whose `major_to_minor` is not
row-major, e.g. from `jax.jit(f, out_shardings=Format(Layout((1, 0)), sharding))`), each device's buffer
is also read byte for byte and compared with meshsim's answer for that shard encoded in the same layout
by `layouts.encode`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

import layouts
from collectives import REGISTRY
from oracles._bridge import Simulated, run_traced
from oracles._bridge_device import is_key
from oracles._bridge_eval import BridgeError, contains
from oracles._bridge_meshes import check_devices, mesh_axes, meshes_of
from oracles._bridge_specs import Entry, assemble, jax_blocks
from oracles._bridge_traces import dynamic, trace
from oracles._device_bytes import raw_bytes


class LoweringMissingError(BridgeError):
    """Real JAX cannot run the program on this backend until a lowering is installed."""


@dataclass(frozen=True)
class OutputAgreement:
    """One output of `f` both ways: its path, JAX's and meshsim's dtype and shape, and the verdict."""

    path: str
    jax_dtype: np.dtype
    sim_dtype: np.dtype
    jax_shape: tuple[int, ...]
    sim_shape: tuple[int, ...]
    equal_bytes: bool
    close: bool
    max_abs_diff: float
    layout: tuple[int, ...] | None = None  # JAX's major_to_minor, where it is not row-major
    equal_device_bytes: bool | None = None  # every device buffer == meshsim's shard in `layout`

    @property
    def agrees(self) -> bool:
        """Same dtype and shape, values identical (or within the comparison's tolerance), and where a layout
        is given, every device buffer's bytes identical."""
        same = self.jax_dtype == self.sim_dtype and self.jax_shape == self.sim_shape and self.close
        return same and self.equal_device_bytes is not False

    def __str__(self) -> str:
        verdict = "bit-identical" if self.equal_bytes else ("close" if self.agrees else "DIFFERS")
        laid_out = ("" if self.layout is None else
                    f", device bytes in layout {self.layout} {'equal' if self.equal_device_bytes else 'DIFFER'}")
        return (f"{self.path}: {verdict} (jax {self.jax_dtype}{list(self.jax_shape)}, meshsim "
                f"{self.sim_dtype}{list(self.sim_shape)}, max |diff| {self.max_abs_diff:g}{laid_out})")


@dataclass(frozen=True)
class JaxComparison:
    """`compare_jax`'s report: an `OutputAgreement` per output, JAX's outputs and meshsim's run."""

    outputs: tuple[OutputAgreement, ...]
    expected: list[np.ndarray]
    simulated: Simulated

    @property
    def agrees(self) -> bool:
        """Every output agrees, and the bridge simulated every shard_map JAX ran (work it did not simulate is
        never reported as agreeing: `simulated.unsimulated` names it)."""
        return all(o.agrees for o in self.outputs) and not self.simulated.unsimulated

    def __str__(self) -> str:
        """One line per output, then the simulated runs (each with its source line) and their total, what was
        not simulated and every diagnostic."""
        return "\n".join([*(str(o) for o in self.outputs), str(self.simulated)])


def compare_jax(f: Callable[..., Any], *args: Any, rtol: float = 0.0, atol: float = 0.0, **options: Any
                ) -> JaxComparison:
    """Run `f(*args)` with real JAX and through `simulate_jax`, and compare every output.

    With the default tolerances an output agrees only when it is bit-identical; `rtol`/`atol` accept float
    outputs within `numpy.isclose` of JAX's (for algorithms that add in another order). `options` go to
    `simulate_jax`. `f` is compared as JAX runs it: a jitted `f` (one with `.lower`) against the bridge's
    compiled segments, as XLA compiles it, an unjitted one against equation-by-equation evaluation
    (`compiled=False`), as eager JAX runs it op by op; `compiled=` chooses otherwise.

    Raises:
        DeviceCountError: the program's mesh has more devices than JAX here.
        LoweringMissingError: JAX cannot run a collective XLA:CPU has no lowering for (ragged_all_to_all,
            pbroadcast) until `oracles.install_cpu_lowerings()` registers one.
        BridgeError, MeshError: as `simulate_jax`.
    """
    closed, tree = trace(f, args)
    for axes in meshes_of(closed):
        check_devices(int(np.prod(list(axes.values()))), axes)
    expected = _run_jax(f, args, closed)
    options.setdefault("compiled", hasattr(f, "lower"))
    simulated = run_traced(closed, tree, dynamic(f, args), options.pop("network", None), options)
    paths = [jax.tree_util.keystr(path) or "out" for path, _ in jax.tree_util.tree_flatten_with_path(expected)[0]]
    found = [_readable(x) for x in jax.tree.leaves(simulated.outputs)]
    arrays = jax.tree.leaves(expected)
    wanted = [_readable(x) for x in arrays]
    rows = tuple(with_device_bytes(agreement(path, w, s, rtol, atol), a, s)
                 for path, w, s, a in zip(paths, wanted, found, arrays))
    return JaxComparison(rows, wanted, simulated)


def _readable(x: Any) -> np.ndarray:
    """An output as numpy: a PRNG key array as its key data; an array JAX holds unreduced (which JAX cannot
    read whole) as each partial value, stacked as the bridge returns it (`oracles._bridge_specs`)."""
    if is_key(x):
        return np.asarray(jax.random.key_data(x))
    spec = getattr(getattr(x, "sharding", None), "spec", None)
    if spec is not None and getattr(spec, "unreduced", None):
        mesh = x.sharding.mesh
        return assemble(jax_blocks(x, mesh), mesh_axes(mesh), Entry.of(spec)).value
    return np.asarray(x)


def with_device_bytes(row: OutputAgreement, array: Any, found: Any) -> OutputAgreement:
    """`row`, with its device buffers compared byte for byte when JAX's `array` has a non-row-major layout."""
    layout = getattr(getattr(array, "format", None), "layout", None)
    order = getattr(layout, "major_to_minor", None)
    if order is None or tuple(order) == tuple(range(np.ndim(array))) or row.sim_shape != row.jax_shape:
        return row
    return dataclasses.replace(row, layout=tuple(order), equal_device_bytes=device_bytes_equal(array, found))


def device_bytes_equal(array: Any, found: Any) -> bool:
    """Whether every addressable shard of the JAX `array` holds, byte for byte, meshsim's global answer
    `found` at that shard's index encoded in the array's layout."""
    order = tuple(array.format.layout.major_to_minor)
    for shard in array.addressable_shards:
        mine = layouts.encode(np.ascontiguousarray(np.asarray(found)[shard.index]), layouts.Layout(order))
        if raw_bytes(shard.data) != mine.tobytes():
            return False
    return True


def _run_jax(f: Callable[..., Any], args: tuple, closed: Any) -> Any:
    try:
        return jax.block_until_ready(f(*args))
    except Exception as error:  # XLA's runtime error class is not public; its message names the opcode
        text = str(error)
        lacking = [] if "UNIMPLEMENTED" not in text and "not found for platform" not in text else [
            d.jax.name for d in REGISTRY.values() if d.jax.on_cpu == "cpu lowering"
            and any(contains(closed, primitive) for primitive in d.jax.primitives)]
        if lacking:
            raise LoweringMissingError(
                f"JAX cannot run {', '.join(lacking)} on this backend (XLA:CPU has no lowering of its own); call "
                "oracles.install_cpu_lowerings() (or, for ragged_all_to_all alone, "
                "oracles.install_cpu_ragged_all_to_all()) before the program is first lowered, then compare again "
                "(simulate_jax alone runs it without the lowering)") from error
        raise


def agreement(path: str, wanted: np.ndarray, found: np.ndarray, rtol: float, atol: float) -> OutputAgreement:
    """Compare one output: dtype, shape, bytes, and (for numbers) closeness within the tolerances."""
    found = np.asarray(found)
    same = wanted.dtype == found.dtype and wanted.shape == found.shape
    equal = same and wanted.tobytes() == found.tobytes()
    diff = 0.0
    close = equal
    if same and not equal and (wanted.dtype.kind in "fciub" or jax.dtypes.issubdtype(wanted.dtype, np.floating)):
        a, b = wanted.astype(np.complex128 if wanted.dtype.kind == "c" else np.float64), found.astype(
            np.complex128 if found.dtype.kind == "c" else np.float64)
        diff = float(np.nanmax(np.abs(a - b))) if a.size else 0.0
        close = (rtol > 0 or atol > 0) and bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
    return OutputAgreement(path, wanted.dtype, found.dtype, wanted.shape, found.shape, equal, close, diff)
