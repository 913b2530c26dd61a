"""`check`: one collective call's simulator results against the executable spec and real JAX, bit for bit.

The call is described without the scenario layer (`Call`: op, mesh shape, per-device arguments, parameters)
and the simulator's answer is handed in, so whoever ran the simulator (the `meshsim check` command, a test)
keeps its trace. The spec always answers; real JAX answers when an oracle is given, else the report says
why it did not (`jax_unavailable`).

>>> call = Call("psum", {"i": 2}, ((np.array([1]), np.array([2])),), {"axis_name": "i"})
>>> check(call, [np.array([3]), np.array([3])], None, jax_skipped="not asked").agree
True
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import collectives
from layouts import InvalidArgumentError
from oracles import spec
from oracles._compare import Difference, compare
from oracles._reordered import compare_reordered, reorders
from oracles.jax_oracle import MAX_DEVICES, JaxOracle, OracleError

# Why JAX may answer by another route than the op itself, by the path the oracle reports.
PATHS = {
    "real": "JAX ran the op itself",
    "cpu lowering": "XLA:CPU cannot compile {op}: JAX ran its own primitive, with its own checks, through the "
                    "lowering oracles.install_cpu_lowerings() registers",
    "equivalent": "XLA:CPU cannot run {op} and no lowering can be registered for it: JAX ran the equivalent its "
                  "docs give",
}


def path_text(op: str, path: str) -> str:
    """What the oracle's `path` means for the collective `op`, with its binding's note on how."""
    binding = collectives.definition(op).jax
    text = PATHS.get(path, path).format(op=op)
    return f"{text}: {binding.cpu_note}" if path == binding.on_cpu and binding.cpu_note else text


@dataclass(frozen=True, eq=False)
class Call:
    """One collective call: `args[k][d]` is device d's array for positional argument k of `op`."""

    op: str
    mesh_shape: dict[str, int]
    args: tuple[tuple[np.ndarray, ...], ...]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def devices(self) -> int:
        """How many devices the mesh has."""
        return int(np.prod(list(self.mesh_shape.values())))


@dataclass(frozen=True, eq=False)
class Comparison:
    """The simulator's answer against one reference ("spec" or "jax"): every difference, or why it was skipped."""

    reference: str
    differences: tuple[Difference, ...] = ()
    skipped: str | None = None

    def on(self, device: int, path: str = "") -> list[Difference]:
        """The differences of `device`'s leaf at `path` (and any that concern the whole answer)."""
        return [d for d in self.differences if d.device is None or (d.device == device and d.path in (path, ""))]


@dataclass(frozen=True, eq=False)
class Report:
    """What `check` found: each implementation's per-device answers and the simulator's comparisons.

    `answers` maps "simulator", "spec" and (when JAX ran) "jax" to per-device results; `spec` and `jax` are
    the comparisons of the simulator with each; `jax_path` is the oracle's route ("real" or
    "cpu lowering", see `PATHS`); `jax_rejected` is JAX's error when it refused a call the simulator ran.
    """

    call: Call
    answers: dict[str, list[np.ndarray]]
    spec: Comparison
    jax: Comparison
    jax_path: str | None = None
    jax_rejected: OracleError | None = None

    @property
    def disagreements(self) -> int:
        """How many differences there are, counting a call JAX refused as one."""
        return len(self.spec.differences) + len(self.jax.differences) + (self.jax_rejected is not None)

    @property
    def agree(self) -> bool:
        """Whether every reference that answered agrees with the simulator on every device, bit for bit."""
        return self.disagreements == 0


def check(call: Call, simulator: Sequence[np.ndarray], oracle: JaxOracle | None, *,
          jax_skipped: str | None = None) -> Report:
    """Compare `simulator` (per-device results of `call`) with the executable spec and, given `oracle`, JAX.

    Args:
        call: the collective call the simulator ran.
        simulator: its per-device results, device order.
        oracle: the JAX oracle to ask, or None to skip JAX.
        jax_skipped: why JAX was skipped (required when `oracle` is None; see `jax_unavailable`).

    Raises:
        OracleFailure: the JAX worker died or hung (no verdict: not a disagreement).
    """
    if oracle is None and not jax_skipped:
        raise InvalidArgumentError(f"jax_skipped={jax_skipped!r} must say why JAX is skipped when oracle=None")
    definition = collectives.definition(call.op)
    params = definition.jax_params(call.params)  # the spec and JAX take JAX's parameters only
    answers = {"simulator": list(simulator), "spec": run_spec(call, params)}
    against_spec = Comparison("spec", tuple(_compare(call, answers["spec"], answers["simulator"])))
    if oracle is None:
        return Report(call, answers, against_spec, Comparison("jax", skipped=jax_skipped))
    try:
        result = oracle.run(call.op, call.mesh_shape, call.args, params)
    except OracleError as error:
        return Report(call, answers, against_spec, Comparison("jax", skipped="JAX rejected the call"),
                      jax_rejected=error)
    answers["jax"] = list(result.outputs)
    against_jax = Comparison("jax", tuple(_compare(call, answers["jax"], answers["simulator"])))
    return Report(call, answers, against_spec, against_jax, jax_path=result.path)


def bit_for_bit(call: Call) -> bool:
    """Whether `call`'s answers must agree bit for bit (else within the bound of `oracles._reordered`: a
    float reduction with an algorithm that adds in another order)."""
    return not (call.args and reorders(call.op, call.params, np.asarray(call.args[0][0]).dtype))


def _compare(call: Call, expected: Sequence[Any], actual: Sequence[Any]) -> list[Difference]:
    if bit_for_bit(call):
        return compare(expected, actual)
    return compare_reordered(call.op, call.params, call.mesh_shape, call.args[0], expected, actual)


def run_spec(call: Call, params: Mapping[str, Any]) -> list[np.ndarray]:
    """The executable spec's per-device results of `call` with JAX's `params`."""
    op_spec = spec.of(collectives.definition(call.op))
    if not call.args:  # axis_index: no arrays, one result per device
        return op_spec(dict(call.mesh_shape), **params)
    return op_spec(*(list(arg) for arg in call.args), dict(call.mesh_shape), **params)


def jax_unavailable(call: Call) -> str | None:
    """Why the JAX oracle cannot run `call` (too many devices, jax not installed), or None when it can."""
    if call.devices > MAX_DEVICES:
        return (f"the mesh has {call.devices} devices and the JAX oracle runs at most {MAX_DEVICES} "
                f"(CPU devices in one worker); checked against the spec only")
    if importlib.util.find_spec("jax") is None:
        return "jax is not installed (pip install -e '.[jax]'); checked against the spec only"
    return None
