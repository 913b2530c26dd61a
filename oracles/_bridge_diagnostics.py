"""JAX's answer and the truth beside it: where JAX's own typing is wrong or unchecked, the bridge returns what
JAX returns and records a `Diagnostic` naming the primitive, the user's source line, the devices whose values
differ and the FINDINGS.md entry.

Three kinds are known. A *typing slip*: JAX types an equation's result invariant along a mesh axis although its
value depends on the device (argsort's result, FINDINGS.md 4; ragged_all_to_all typed from its `output`, 5; a
callback of varying arguments, 15; the bits `rng_bit_generator` makes from a varying key, 30); the bridge keeps
each device's value, types it as JAX does, and goes on. A *false replication claim*: an output whose out_specs
entry leaves a mesh axis out holds different values on the devices along it (under `check_vma=False` JAX does not
check the claim; under `check_vma=True` only a slip lets it through, and for `cond` / `while_loop` with a varying
choice, FINDINGS.md 13 and 14, the slip shows only here); JAX returns the first device's value along that axis, and
so does the bridge. A *numbering slip*: JAX numbers the pairs of a ppermute over a tuple of mesh axes in the mesh's
order, not as `axis_index` numbers the tuple (FINDINGS.md 29); the bridge runs the pairs between the devices JAX
pairs.

Each diagnostic is also a `BridgeWarning`; with `strict=True` each raises `JaxSlipError` instead.

>>> Diagnostic("typing slip", "sort", "model.py:12 (dispatch)", ("i",), (1,), 4, "").finding_text
'FINDINGS.md 4'
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from jax._src import source_info_util

from layouts import MeshError
from oracles._bridge_eval import BridgeError

# The primitives JAX 0.10.2 types invariant while their result varies, and the FINDINGS.md entry of each.
SLIPS = {"sort": 4, "ragged_all_to_all": 5, "pure_callback": 15, "io_callback": 15, "pmax": 28, "pmin": 28,
         "rng_bit_generator": 30}
# Control flow whose varying choice JAX leaves out of its result's type (the slip shows in the values).
CHOICES = {"cond": 13, "while": 14}
# A check_vma=False shard_map nested in a checked body: JAX types its results invariant along the enclosing axes.
UNCHECKED_NESTED = 26
# A permutation over a tuple of mesh axes out of the mesh's order: JAX numbers its pairs in the mesh's order.
RENUMBERED = 29


class BridgeWarning(MeshError, UserWarning):
    """JAX's answer is returned, but JAX's typing or its unchecked out_specs make it wrong on some devices (a
    `MeshError` too, so that `warnings.simplefilter("error")` raises it as one of meshsim's errors)."""


class JaxSlipError(BridgeError):
    """With `strict=True`: JAX's typing or an unchecked out_specs claim is wrong on this program."""


@dataclass(frozen=True)
class Diagnostic:
    """One place where JAX's answer is not the truth: what kind, which primitive at which source line, along
    which mesh axes JAX claims invariance, the devices whose values differ from the first device along them,
    the FINDINGS.md entry (None when there is none) and the sentence a warning prints."""

    kind: str
    primitive: str
    line: str
    axes: tuple[str, ...]
    devices: tuple[int, ...]
    finding: int | None
    message: str

    @property
    def finding_text(self) -> str:
        """'FINDINGS.md N', or what stands for it when no entry covers the case."""
        return f"FINDINGS.md {self.finding}" if self.finding is not None else "no FINDINGS.md entry"

    def __str__(self) -> str:
        return self.message


# Each equation's summarized source line, kept with the equation (a warm call's equations are the same
# objects, and summarizing a traceback costs more than the collective it labels).
_LINES_KEPT = 4096
_lines: dict[int, tuple[Any, str]] = {}


def source_line(eqn: Any, fallback: str = "") -> str:
    """The user's source line of `eqn` ('file:line:column (function)'). JAX keeps only the frames of the call
    that traced it: where none is the user's (a body that is a JAX function, like `jnp.argsort`), a
    shard_map is named by its body's function ('<lambda> at file:line') and any other equation by `fallback`
    (the enclosing shard_map's line), else '<unknown line>'."""
    kept = _lines.get(id(eqn))
    if kept is None or kept[0] is not eqn:
        if len(_lines) >= _LINES_KEPT:
            _lines.clear()
        kept = _lines[id(eqn)] = (eqn, _summarized(eqn))
    return kept[1] or fallback or "<unknown line>"


def _summarized(eqn: Any) -> str:
    """`source_line` of `eqn` without a fallback: '' where JAX kept none of the user's frames."""
    try:
        line = source_info_util.summarize(eqn.source_info)
    except Exception:  # an equation built by hand has no traceback
        line = ""
    if not line and eqn.primitive.name == "shard_map":
        info = getattr(eqn.params.get("jaxpr"), "debug_info", None)
        line = f"the shard_map of {info.func_src_info}" if info is not None and info.func_src_info else ""
    return line


def differing(blocks: np.ndarray, mesh_sizes: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    """The devices (row-major over the mesh) whose block differs, bit for bit, from the block of the device
    with coordinate 0 along the mesh dimensions `axes` and its own coordinates along the others.

    `blocks` has one block per device along its first axis.

    >>> differing(np.array([[1], [1], [2], [2]]), (2, 2), (1,)).__len__()
    0
    >>> differing(np.array([[1], [1], [2], [2]]), (2, 2), (0,))
    (2, 3)
    """
    grid = _bits(blocks).reshape(*mesh_sizes, -1)
    first = grid[tuple(slice(0, 1) if k in axes else slice(None) for k in range(len(mesh_sizes)))]
    differs = (grid != first).any(axis=-1).reshape(-1)
    return tuple(int(d) for d in np.flatnonzero(differs))


def _bits(blocks: np.ndarray) -> np.ndarray:
    """`blocks` as unsigned integers of the same width per element (NaNs compare by their bits)."""
    blocks = np.ascontiguousarray(blocks)
    if blocks.dtype.kind in "biu" or blocks.size == 0:
        return blocks.reshape(len(blocks), -1) if blocks.ndim else blocks.reshape(1, -1)
    return blocks.reshape(len(blocks), -1).view(np.uint8)


def slip(kind: str, primitive: str, line: str, axes: tuple[str, ...], devices: tuple[int, ...] | None,
         finding: int | None) -> Diagnostic:
    """A diagnostic with its sentence; `devices` None when they are not known yet (a strict run stops at the
    first device that meets the slip)."""
    if devices is None:
        where = "meshsim's type of it varies there"
    elif devices:
        where = f"devices {list(devices)} differ from the first device along {list(axes)}"
    else:
        where = f"no device's value differs along {list(axes)} on these inputs"
    if kind == "typing slip":
        said = (f"JAX types the result of {primitive!r} at {line} invariant along {list(axes)}, but it depends on "
                f"the device: {where}")
    else:
        said = (f"{primitive} at {line} claims replication along {list(axes)}, but {where}; JAX returns the "
                f"first device's value")
    finding_said = f"FINDINGS.md {finding}" if finding is not None else "no FINDINGS.md entry"
    message = f"{said} ({finding_said}); the bridge returns what JAX returns (strict=True makes this an error)"
    return Diagnostic(kind, primitive, line, tuple(axes), tuple(devices or ()), finding, message)


def renumbered(primitive: str, line: str, names: tuple[str, ...], mesh_axes: tuple[str, ...],
               devices: tuple[int, ...]) -> Diagnostic:
    """A permutation over the mesh axes `names` that JAX 0.10.2 numbers in the mesh's axis order
    (`oracles._bridge_permute`): `devices` receive another device's value than its pairs name."""
    order = tuple(sorted(names, key=mesh_axes.index))
    message = (f"JAX 0.10.2 numbers the pairs of {primitive!r} at {line} over axis_name={names} in the mesh's axis "
               f"order {order}, not as axis_index({names}) numbers the devices: devices {list(devices)} receive "
               f"another device's value than the pairs name (FINDINGS.md {RENUMBERED}); the bridge returns what "
               f"JAX returns (strict=True makes this an error)")
    return Diagnostic("numbering slip", primitive, line, names, devices, RENUMBERED, message)


def label(line: str) -> str:
    """A shard_map's name in a report, from its `source_line`."""
    return line if line.startswith("the shard_map") else f"shard_map at {line}"


def report(found: list[Diagnostic], strict: bool) -> None:
    """Warn of each diagnostic, or with `strict` raise the first."""
    for diagnostic in found:
        if strict:
            raise JaxSlipError(diagnostic.message)
        warnings.warn(diagnostic.message, BridgeWarning, stacklevel=4)
