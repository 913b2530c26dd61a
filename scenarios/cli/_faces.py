"""The faces of whole runs on the command line: `meshsim explain` and `meshsim draw` of a `[program]`
scenario (its run, each call labelled with the program line that made it) and of a run saved with
`Run.save` (a `.json` file, e.g. a `simulate_jax` run).

A walkthrough is a list of steps (title, renderables), as `explain` shows them; past `2 * CALL_EDGE` calls
or `2 * LINE_EDGE` messages of a call only the ends show, and a line says how many were left out, unless
`full`.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
from rich.text import Text

import collectives
import scenarios
import sim
from scenarios import ProgramScenario, ScenarioError, run_forward
from scenarios.cli.render import LINE_EDGE, _protocols, array_text, edges, message_table
from scenarios.cli.render import seconds as _seconds

Step = tuple[str, list[Any]]
CALL_EDGE = 8
SAVED = ".json"  # a run saved with `Run.save`
SAVED_COMMANDS = ("draw", "explain", "trace")  # the commands that take one


def is_saved(path: str) -> bool:
    """Whether `path` names a saved run rather than a scenario file."""
    return path.lower().endswith(SAVED)


def refuse_saved(path: str, command: str) -> None:
    """Raise `ScenarioError` when `path` names a saved run, which `meshsim command` does not take.

    Raises:
        ScenarioError: `path` names a saved run; the message says which commands take one.
    """
    if is_saved(path):
        raise ScenarioError(f"{path}: a run saved with Run.save (a {SAVED} file), not a scenario; meshsim {command} "
                            f"takes a scenario file (TOML), while meshsim {', '.join(SAVED_COMMANDS[:-1])} and "
                            f"{SAVED_COMMANDS[-1]} take a saved run")


def saved_runs(path: str) -> tuple[sim.SavedRun, ...]:
    """The runs saved at `path`, in order.

    Raises:
        ScenarioError: the file cannot be read or is not a saved run.
    """
    try:
        return sim.load_runs(path)
    except OSError as error:
        raise ScenarioError(f"{path}: cannot read the file: {error.strerror}") from error
    except sim.MeshError as error:
        raise ScenarioError(str(error)) from error


def program_run(scenario: ProgramScenario) -> sim.Run:
    """The program's run, each call labelled with the line of the program that made it."""
    with sim.located():
        return run_forward(scenario)


def program_steps(scenario: ProgramScenario, full: bool) -> list[Step]:
    """The program, its typed listing, each call (where it was made, its messages), the outputs (summarised
    unless `full`) and the transposes."""
    run = program_run(scenario)
    intro: list[Any] = [Text(scenario.title, style="bold"), Text(scenario.path, style="dim")]
    if scenario.description:
        intro.append(Text(" ".join(scenario.description.split()), style="italic"))
    axes = ", ".join(f"{name}={size}" for name, size in scenario.mesh.shape.items())
    intro += [Text(f"mesh {axes}; arguments: " + ", ".join(f"{a.dtype}{list(a.shape)}" for a in scenario.args)),
              Text(scenario.source.strip(), style="bold")]
    walkthrough = [("The program", intro),
                   ("Its typed listing (device 0)", [Text(
                       "Each variable carries its type and {V:axes}, the mesh axes along which it varies; "
                       "a collective changes that set as its variance rule says.", style="dim"),
                       Text(str(run.program(0)))])]
    walkthrough += call_steps(run.faced(), full)
    outputs = run.outputs if isinstance(run.outputs, tuple) else (run.outputs,)
    threshold = 10**9 if full else 64
    walkthrough.append(("The outputs and the time", [
        *(Text.assemble(f"output {k}: ", array_text(np.asarray(o), threshold=threshold))
          for k, o in enumerate(outputs)),
        Text(f"{sim.record.Traffic.of(run.trace)}; simulated end time {_seconds(run.end_time_s)}")]))
    if scenario.transpose:
        walkthrough.append(("The transposed program", _transposed(scenario)))
    return walkthrough


def saved_steps(path: str, full: bool) -> list[Step]:
    """The walkthrough of the runs saved at `path`: for each, the whole, then each call."""
    runs = saved_runs(path)
    steps: list[Step] = []
    for k, run in enumerate(runs):
        which = "The run" if len(runs) == 1 else f"Run {k + 1} of {len(runs)}"
        steps.append((which, [Text(run.explain().splitlines()[0], style="bold"), Text(path, style="dim")]))
        steps += [(title if len(runs) == 1 else f"Run {k + 1}, {title[0].lower()}{title[1:]}", body)
                  for title, body in call_steps(run, full)]
    return steps


def call_steps(faced: sim.record.Faces | Any, full: bool) -> list[Step]:
    """One step per call of the run: where it was made, what the collective does, its groups and times, and
    its messages by step (bounded)."""
    calls = sim.record.program_calls(faced.trace, faced.calls)
    steps: list[Step] = []
    for call in edges(calls, full, CALL_EDGE, "calls"):
        if isinstance(call, Text):
            steps.append(("More calls", [call]))
            continue
        steps.append((f"Call {call.number} of {len(calls)}: {call.collective}", _call(faced.trace, call, full)))
    return steps


def _call(trace: sim.Trace, call: sim.record.ProgramCall, full: bool) -> list[Any]:
    """One call's step: where it was made, what the collective does, its groups and times, its messages by step."""
    counted = sim.record.counted
    body: list[Any] = [Text(f"made at {sim.record.printable(call.label)}" if call.label else
                            "where it was made is not recorded",
                            style="bold")]
    with contextlib.suppress(sim.InvalidArgumentError):  # a saved file may name a collective not registered here
        body.append(Text(_protocols.protocol(collectives.definition(call.collective), {}, 0)[0]))
    sizes = sorted({len(g) for g in call.groups})
    body.append(Text(("" if call.algorithm is None else f"algorithm {call.algorithm}; ")
                     + f"{counted(len(call.groups), 'group')} of {' or '.join(map(str, sizes))} "
                     + f"{sim.record.plural(sizes[-1], 'device')}; entered from {_seconds(call.enter_s)}, every "
                     + f"group met by {_seconds(call.met_s)}, ended by {_seconds(call.exit_s)}"))
    if len(set(call.met_by_group)) > 1:  # groups that met at different times: when each did
        body += [g if isinstance(g, Text) else Text(f"group {list(g[0])} met at {_seconds(g[1])}")
                 for g in edges(list(zip(call.groups, call.met_by_group)), full, LINE_EDGE, "groups")]
    groups = _protocols.step_groups(trace, call.messages.tolist())
    if not groups:
        body.append(Text("No message is sent: each device computes its result locally.", style="dim"))
    for group in edges(groups, full, LINE_EDGE, "steps of messages"):
        if isinstance(group, Text):
            body.append(group)
            continue
        label, ks = group
        shown = edges(ks, full, LINE_EDGE, "messages")
        body += [Text(f"{label}: {sim.record.Traffic.of(trace, ks)}", style="bold"),
                 message_table(trace, [k for k in shown if not isinstance(k, Text)]),
                 *(k for k in shown if isinstance(k, Text))]
    return body


def _transposed(scenario: ProgramScenario) -> list[Any]:
    """The transposed program's listing and communication, and whether transposing twice gives it back."""
    result = scenarios.run(scenario)
    told: list[Any] = []
    for name, one in (("transposed", result.transposed), ("transposed twice", result.twice)):
        if one is not None:
            told += [Text(f"{name}: {one.traffic}, simulated time {_seconds(one.end_time_s)}", style="bold"),
                     Text(str(one.program))]
    if result.adjoint is not None:
        lhs, rhs = result.adjoint
        told.append(Text(f"adjoint identity: <f(x), ybar> = {lhs:.6g}, <x, t(f)(ybar)> = {rhs:.6g}"))
    return told
