"""What a scenario's collective must give, computed from its inputs with numpy alone: each group's results and,
per device, the sender of each row (the ragged one by transcribing the docs' SEND/RECEIVE loop). Nothing here
calls the simulator."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

import scenarios


def groups_of(mesh_shape: dict[str, int], axis_name, axis_index_groups) -> list[list[int]]:
    """Device ids of every collective group, in group order, read off the row-major device grid."""
    names = list(mesh_shape)
    axes = [axis_name] if isinstance(axis_name, str) else list(axis_name)
    grid = np.arange(math.prod(mesh_shape.values())).reshape(tuple(mesh_shape.values()))
    order = [names.index(n) for n in names if n not in axes] + [names.index(n) for n in axes]
    rows = grid.transpose(order).reshape(-1, math.prod(mesh_shape[n] for n in axes))
    if axis_index_groups is None:
        return [[int(d) for d in row] for row in rows]
    return [[int(row[i]) for i in group] for row in rows for group in axis_index_groups]


def ragged_reference(inputs, members: list[int]):
    """The docs' SEND loop, then their RECEIVE loop, for one group; returns results and row senders."""
    g = len(members)
    mailbox = defaultdict(list)
    for src_idx, sender in enumerate(members):
        a = inputs[sender]
        n = len(a["input_offsets"])
        slices_per_device = n // g
        for i in range(n):
            dst_idx = i // slices_per_device
            mailbox[(src_idx, dst_idx)].append(
                a["operand"][a["input_offsets"][i]:a["input_offsets"][i] + a["send_sizes"][i]])
    results, senders = {}, {}
    for dst_idx, receiver in enumerate(members):
        a = inputs[receiver]
        n = len(a["input_offsets"])
        per = n // g
        # all_to_all(output_offsets, tiled=True): block dst_idx of every member, in member order
        output_offsets_ = np.concatenate([inputs[m]["output_offsets"][dst_idx * per:(dst_idx + 1) * per]
                                          for m in members])
        result, written_by = a["output"].copy(), [None] * len(a["output"])
        for i in range(n):
            src_idx = i // per
            data = mailbox[(src_idx, dst_idx)].pop(0)
            start, stop = output_offsets_[i], output_offsets_[i] + a["recv_sizes"][i]
            assert len(data) == stop - start, "the scenario breaks send_sizes == all_to_all(recv_sizes)"
            result[start:stop] = data
            written_by[start:stop] = [members[src_idx]] * (stop - start)
        results[receiver], senders[receiver] = result, written_by
    return results, senders


def gather_reference(inputs, members: list[int], params):
    """Every member ends with all members' x, stacked (or, tiled, concatenated) along `axis`."""
    axis, chunks = params.get("axis", 0), [inputs[m]["x"] for m in members]
    value = np.concatenate(chunks, axis=axis) if params.get("tiled", False) else np.stack(chunks, axis=axis)
    return dict.fromkeys(members, value), axis


def all_to_all_reference(inputs, members: list[int], params):
    """Member r gets chunk r of every member's x along split_axis, joined in member order along concat_axis."""
    split, concat, g = params["split_axis"], params["concat_axis"], len(members)
    results = {}
    for r, receiver in enumerate(members):
        if params.get("tiled", False):
            results[receiver] = np.concatenate([np.split(inputs[m]["x"], g, axis=split)[r] for m in members],
                                               axis=concat)
        else:
            results[receiver] = np.stack([np.take(inputs[m]["x"], r, axis=split) for m in members], axis=concat)
    return results, concat


def sum_reference(inputs, members: list[int], params):
    """Every member ends with the sum of all members' x (integers: no order to get right)."""
    total = sum(inputs[m]["x"] for m in members)
    return dict.fromkeys(members, total)


def permute_reference(inputs, members: list[int], params):
    """Group index dst gets the x of group index src for each pair; the others get zeros."""
    got = {m: np.zeros_like(inputs[m]["x"]) for m in members}
    for src, dst in params["perm"]:
        got[members[dst]] = inputs[members[src]]["x"]
    return got


def reference(scenario: scenarios.Scenario):
    """Expected results and, per device, the sender of each index along the provenance axis (None: the
    collective's messages do not say where they land)."""
    params = scenario.params
    groups = groups_of(scenario.mesh.shape, params["axis_name"], params.get("axis_index_groups"))
    results, senders, axis = {}, {}, 0
    for members in groups:
        if scenario.op in ("psum", "ppermute"):
            results.update((sum_reference if scenario.op == "psum" else permute_reference)(scenario.inputs, members,
                                                                                            params))
            senders.update(dict.fromkeys(members))
            continue
        if scenario.op == "ragged_all_to_all":
            got, who = ragged_reference(scenario.inputs, members)
            results.update(got)
            senders.update(who)
            continue
        compute = gather_reference if scenario.op == "all_gather" else all_to_all_reference
        got, axis = compute(scenario.inputs, members, params)
        for m, value in got.items():
            axis %= value.ndim
            block = value.shape[axis] // len(members)
            results[m], senders[m] = value, [members[j // block] for j in range(value.shape[axis])]
    return results, senders, axis
