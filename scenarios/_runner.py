"""`run`: a scenario's collective through `sim.shard_map`, with the trace and who wrote each output row."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import layouts
import sim
from scenarios._errors import ScenarioError
from scenarios._load import Scenario
from scenarios._program import ProgramResult, ProgramScenario, run_program
from scenarios._provenance import Provenance, provenance_of
from scenarios.picture import fragment


@dataclass(frozen=True, eq=False)
class ScenarioResult:
    """The outcome of one scenario: each device's result, its provenance, the messages and the end time.

    `outputs[d]` and `provenance[d]` belong to device d; `provenance[d]` is None for a collective whose
    messages do not say where they land (the reductions, ppermute) or that sends none (axis_index,
    pvary, pscatter). `trace` lists every message in the order it was sent. `run` is the simulator's
    own record of the call (`sim.Run`: the trace with each device's calls, `to_perfetto`). In a terminal a
    result is one line (`repr`); in a notebook it shows the picture, the timeline and the tables
    (`_repr_html_`, bounded on big meshes; `meshsim draw -o FILE.html` writes the page with a stepper).
    """

    scenario: Scenario
    outputs: tuple[np.ndarray, ...]
    provenance: tuple[Provenance | None, ...]
    trace: sim.Trace
    end_time_s: float
    run: sim.Run | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        """One line: the scenario, its call, devices, messages, bytes over the network and the end time."""
        said = sim.record.summary(self.trace, self.scenario.mesh.size, self.end_time_s,
                                 self.run.calls if self.run is not None else ())
        return f"ScenarioResult({self.scenario.title!r}: {self.scenario.op}; {said})"

    def _repr_html_(self) -> str:
        """The result in a notebook: the picture, the timeline and the tables, bounded for big meshes (see
        `scenarios.picture.fragment`)."""
        return fragment(self)

    @property
    def inputs(self) -> tuple[dict[str, np.ndarray], ...]:
        """Each device's input arrays, by argument name."""
        return self.scenario.inputs

    @property
    def algorithm(self) -> str | None:
        """The algorithm the call ran ('auto' resolved to its pick; groups that picked differently joined
        by ', '), None when no call ran one."""
        calls = self.run.calls if self.run is not None else ()
        picked = list(dict.fromkeys(c.algorithm for c in calls if c.algorithm is not None))
        return ", ".join(picked) or None

    def to_dict(self, array: Callable[[np.ndarray | Sequence], Any] | None = None,
                messages: int | None = None) -> dict:
        """The whole result as JSON-ready values: arrays as nested lists, missing provenance as None.

        Args:
            array: what each input and output array and each provenance sequence becomes (nested lists by
                default; a writer that streams big arrays passes a function returning a placeholder).
            messages: list only the first this many messages (None: every one).
        """
        array = array or _listed
        scenario, mesh = self.scenario, self.scenario.mesh
        network = mesh.network
        return {
            "scenario": scenario.path,
            "title": scenario.title,
            "mesh": dict(mesh.shape),
            "network": network_facts(network),
            "collective": {"op": scenario.op, **{k: _plain(v) for k, v in scenario.params.items()}},
            "devices": [self._device_dict(d, array) for d in mesh.devices],
            "algorithm": self.algorithm,
            "messages": [message.to_dict() for message in self.trace] if messages is None else
                        [self.trace[k].to_dict() for k in range(min(messages, len(self.trace)))],
            "end_time_s": self.end_time_s,
        }

    def _device_dict(self, device: int, array: Callable[[np.ndarray | Sequence], Any]) -> dict:
        """One device's coordinates, inputs, result, dtype and provenance as JSON-ready values."""
        output, provenance = self.outputs[device], self.provenance[device]
        return {
            "device": device,
            "coords": self.scenario.mesh.coords(device),
            "inputs": {name: array(values) for name, values in self.inputs[device].items()},
            "output": array(output),
            "dtype": str(output.dtype),
            "provenance": None if provenance is None else provenance.to_dict(array),
        }


def run(scenario: Scenario | ProgramScenario, sanitize: bool = False) -> ScenarioResult | ProgramResult:
    """Run `scenario`'s collective on its mesh through `sim.shard_map`.

    With `sanitize` (a collective scenario only), broken rules are recorded in the result's
    `run.violations` rather than raised; a run that stopped early (`run.stopped`) has no outputs.

    Each argument's per-device arrays are stacked along a new leading axis split over all mesh axes, so
    device d's program sees row d; it calls the collective on that row and returns its result as a row.
    An operand that must be invariant along the axes (pvary, pscatter) is split over the other axes
    only, as a JAX user passes it.

    Returns:
        The per-device results, their provenance (derived from the messages), the trace and the end time.

    Raises:
        ScenarioError: the simulator rejected the inputs (any `sim.MeshError`); the message names the file
            and carries the simulator's own, which lists every broken rule with device, argument and rows.
    """
    if isinstance(scenario, ProgramScenario):
        return run_program(scenario)
    mesh, definition = scenario.mesh, scenario.definition
    mapped, args = mapped_call(scenario, sanitize)
    try:
        outcome = mapped.run(*args)
    except sim.MeshError as error:
        raise ScenarioError(f"{scenario.path}: the simulator rejected [collective] op={scenario.op!r}: {error}") \
            from error
    if outcome.stopped is not None:
        return ScenarioResult(scenario, (), (), outcome.trace, outcome.end_time_s, outcome)
    if scenario.payload == "abstract":  # each device's result: its shape and dtype (`sim.ShapeDtypeStruct`)
        each = sim.ShapeDtypeStruct(outcome.outputs.shape[1:], outcome.outputs.dtype)
        return ScenarioResult(scenario, (each,) * mesh.size, (None,) * mesh.size, outcome.trace,
                              outcome.end_time_s, outcome)
    outputs = tuple(_frozen(outcome.outputs[d]) for d in mesh.devices)
    return ScenarioResult(scenario, outputs, provenance_of(outcome.trace, outputs, definition.keeps), outcome.trace,
                          outcome.end_time_s, outcome)


def mapped_call(scenario: Scenario, sanitize: bool = False) -> tuple[sim.ShardMapped, tuple[np.ndarray, ...]]:
    """The scenario's collective as a `shard_map`ped function of stacked per-device arrays, and those arrays:
    device d's program calls the collective on row d and returns its result as a row (`sanitize`: see `run`)."""
    mesh, params, definition = scenario.mesh, scenario.params, scenario.definition
    names = definition.arrays
    devices, in_spec = _holders(scenario)

    def body(*blocks: np.ndarray) -> np.ndarray:
        return definition.call(*(block[0] for block in blocks), **params)[None]

    mapped = sim.shard_map(body, mesh=mesh, in_specs=(in_spec,) * len(names), out_specs=sim.P(mesh.axis_names),
                           sanitize=sanitize)
    return mapped, tuple(_stacked([scenario.inputs[d][name] for d in devices]) for name in names)


def _stacked(arrays: list[np.ndarray]) -> Any:
    """The devices' arrays stacked along a new leading axis; abstract ones as a `sim.ShapeDtypeStruct`."""
    first = arrays[0]
    if sim.memory.is_abstract(first):
        return sim.ShapeDtypeStruct((len(arrays), *first.shape), sim.memory.logical_dtype(first.dtype))
    return np.stack(arrays)


def _holders(scenario: Scenario) -> tuple[list[int], sim.PartitionSpec]:
    """The devices whose inputs are stacked, in order, and the in_spec that splits the stack over the mesh.

    Every device, split over all axes; for an invariant operand, the devices at index 0 along the axes
    (the others hold the same values), split over the other axes.
    """
    mesh = scenario.mesh
    if not scenario.definition.invariant_operand:
        return list(mesh.devices), sim.P(mesh.axis_names)
    along = mesh.axis_names_of(scenario.params["axis_name"])
    others = tuple(a for a in mesh.axis_names if a not in along)
    devices = [d for d in mesh.devices if all(mesh.coords(d)[a] == 0 for a in along)]
    return devices, sim.P(others) if others else sim.P()


def _listed(values: np.ndarray | Sequence) -> list:
    """An array as nested lists (bfloat16 and float8 as the Python floats they hold exactly; NaN as NaN), any
    other sequence as a list."""
    if not isinstance(values, np.ndarray):
        return list(values)
    narrow = values.dtype in layouts.NARROW_FLOATS or values.dtype in layouts.FLOAT8
    return (values.astype(np.float32) if narrow else values).tolist()


def _frozen(array: np.ndarray) -> np.ndarray:
    """A read-only copy of `array`."""
    array = np.array(array)
    array.setflags(write=False)
    return array


def network_facts(network: sim.Network) -> dict:
    """The network's facts as JSON-ready values: its topology, shape, link figures and preset."""
    facts = {"topology": network.topology, "latency_s": network.latency_s,
             "bandwidth_bytes_per_s": network.bandwidth_bytes_per_s, "description": network.describe()}
    if network.shape is not None:
        facts["shape"] = list(network.shape)
    if network.wraparound is not None:
        facts["wraparound"] = list(network.wraparound)
    if network.topology == "hierarchical":
        facts.update(node_size=network.node_size, inter_latency_s=network.inter_latency_s,
                     inter_bandwidth_bytes_per_s=network.inter_bandwidth_bytes_per_s)
    if network.preset_name is not None:
        facts["preset"] = network.preset_name
    facts["store_and_forward"] = network.store_and_forward
    if not network.costs.free:  # the costs besides the wire (a measured preset's): an infinite rate as None
        facts["costs"] = {key: None if value == math.inf else value for key, value in vars(network.costs).items()}
    return facts


def _plain(value: Any) -> Any:
    """A parameter as JSON takes it: a shape-and-dtype (precv's `out_shape`) as its TOML table."""
    if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, np.ndarray):
        return {"shape": list(value.shape), "dtype": str(np.dtype(value.dtype))}
    return value
