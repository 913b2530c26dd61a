"""The facts a `Definition` carries besides its function and rules: what it reduces, how its bytes and
messages scale, how a sweep times it, and how a drawing lays it out.

Each is a small frozen record written in the collective's module, so that the oracle's rounding bound
(`Reduction`), the scenario memory budget (`Sizes`), `meshsim sweep` (`Sweep`) and `meshsim draw` and
`explain` (`Drawing`) read the collective's own record instead of a table of names.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

Chunk = Callable[[Mapping[str, Any], np.ndarray, int, int], np.ndarray]


def _all_of(params: Mapping[str, Any], x: np.ndarray, j: int, n: int) -> np.ndarray:
    """Member j's result reduces all of every member's operand."""
    return x


@dataclass(frozen=True)
class Reduction:
    """What a reducing collective computes element by element.

    Attributes:
        element: the element operation, 'sum', 'max' or 'min' (`collectives._arithmetic`'s names).
        verb: how `meshsim explain` says it ("adds", "takes the element-wise maximum of").
        mean: the sum is then scaled by 1/n and rounded once more (pmean).
        chunk: `chunk(params, x, j, n)`, the part of a member's operand `x` that member j's result reduces
            (psum_scatter: chunk j along `scatter_dimension`); all of it by default.
    """

    element: str
    verb: str
    mean: bool = False
    chunk: Chunk = _all_of

    def __post_init__(self) -> None:
        if self.element not in ("sum", "max", "min"):
            raise ValueError(f"Reduction: element={self.element!r} must be 'sum', 'max' or 'min'")

    @property
    def extreme(self) -> bool:
        """Whether it picks one of the terms (max, min) rather than adding them."""
        return self.element != "sum"


SUM = Reduction("sum", "adds")
MAX = Reduction("max", "takes the element-wise maximum of")
MIN = Reduction("min", "takes the element-wise minimum of")
MEAN = Reduction("sum", "adds, then divides by the group size", mean=True)


class Peers(enum.Enum):
    """Whom a device sends messages to in one call."""

    GROUP = "every member of its group"
    ONE = "at most one other device"
    NONE = "nobody: the result is computed on each device"


@dataclass(frozen=True)
class Sizes:
    """How a call's result and messages scale, for memory budgets.

    Attributes:
        gathered: the result is the group size times the operand (a gather); else at most the operand.
        peers: whom a device sends to; with `Algorithm.messages_per_peer` this bounds the messages.
    """

    gathered: bool
    peers: Peers

    def result_bytes(self, operand_bytes: int, group_size: int) -> int:
        """At most the bytes of a member's result, from its operand's."""
        return operand_bytes * (group_size if self.gathered else 1)

    def messages(self, devices: int, group_size: int, messages_per_peer: int) -> int:
        """At most how many messages a call on `devices` devices in groups of `group_size` sends."""
        if self.peers is Peers.NONE:
            return 0
        if self.peers is Peers.ONE:
            return devices
        return devices * group_size * messages_per_peer


MOVES = Sizes(gathered=False, peers=Peers.GROUP)
GATHERS = Sizes(gathered=True, peers=Peers.GROUP)
LOCAL = Sizes(gathered=False, peers=Peers.NONE)


def _operand_only(x: np.ndarray, index: np.ndarray, count: int, n: int) -> tuple[np.ndarray, ...]:
    return (x,)


_FACTORS = {"2(n-1)/n": lambda n: 2 * (n - 1) / n, "(n-1)/n": lambda n: (n - 1) / n, "1": lambda n: 1.0}


@dataclass(frozen=True)
class Sweep:
    """How `meshsim sweep` times a collective, after nccl-tests (doc/PERFORMANCE.md and `src/*.cu`).

    Attributes:
        nccl: nccl-tests' name of the operation ("AllReduce", "AlltoAll", ...).
        blocks: "whole" (S is one device's buffer), "gathered" (S is the n blocks of the result) or "split"
            (S is the n blocks of each device's operand).
        factor: busbw / algbw as nccl-tests writes it: "2(n-1)/n", "(n-1)/n" or "1".
        call: `call(axis_name, n, algorithm)`, the program every device runs on its arguments.
        redop: nccl-tests' reduction ("sum", "avg", "max", "min", or "none").
        inputs: `inputs(x, index, count, n)`, every argument stacked over the devices from the drawn operand
            `x` (`index[d]` is device d's axis index, `count` the elements of a block); `(x,)` by default.
    """

    nccl: str
    blocks: str
    factor: str
    call: Callable[[Any, int, str], Callable[..., Any]]
    redop: str = "none"
    inputs: Callable[[np.ndarray, np.ndarray, int, int], tuple[np.ndarray, ...]] = _operand_only

    def __post_init__(self) -> None:
        if self.blocks not in ("whole", "gathered", "split") or self.factor not in _FACTORS:
            raise ValueError(f"Sweep: blocks={self.blocks!r} must be 'whole', 'gathered' or 'split' and "
                             f"factor={self.factor!r} one of {sorted(_FACTORS)}")

    def busbw_factor(self, n: int) -> float:
        """busbw / algbw on a group of `n` devices (doc/PERFORMANCE.md, "Summary")."""
        return _FACTORS[self.factor](n)


@dataclass(frozen=True)
class Drawing:
    """How `meshsim draw` lays out a call: each device's strip runs along one axis of its first array.

    Attributes:
        axis: the parameter naming that axis (all_to_all's 'split_axis'), or None for axis 0.
        chunked: a message carries slice i of equal chunks along that axis (else the whole operand, or the
            rows its detail names).
        slices: the call moves ragged slices given by offsets and sizes: `meshsim explain` walks through
            them slice by slice, from the SEND and RECEIVE loops of the docs.
    """

    axis: str | None = None
    chunked: bool = False
    slices: bool = False

    def strip_axis(self, params: Mapping[str, Any]) -> int:
        """The axis a device's strip runs along for a call with `params`."""
        return int(params.get(self.axis, 0)) if self.axis is not None else 0


WHOLE = Drawing()
