"""The catalogue of bad inputs: each gets a clear error naming device, argument, slice and rule."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import sim
from sim import P


def per_device(mesh_axes: dict, body, *args_per_device):
    """Run `body` on every device of `mesh_axes` with that device's own arguments (lists by device)."""
    mesh = sim.Mesh(mesh_axes)
    stacked = [np.stack([np.asarray(a) for a in arg]) for arg in args_per_device]
    spec = P(mesh.axis_names)
    f = sim.shard_map(lambda *xs: body(*(x[0] for x in xs))[None], mesh=mesh,
                      in_specs=(spec,) * len(stacked), out_specs=spec)
    return f(*stacked)


def ragged(operands, outputs, input_offsets, send_sizes, output_offsets, recv_sizes, **kw):
    def body(*a):
        return collectives.ragged_all_to_all(*a, axis_name="x", **kw)
    return per_device({"x": len(operands)}, body, operands, outputs, input_offsets, send_sizes,
                      output_offsets, recv_sizes)


DOCS = dict(  # the docs' valid example, modified one field at a time below
    operands=[[1, 2, 2], [3, 4, 0]], outputs=[[0] * 4, [0] * 4],
    input_offsets=[[0, 1], [0, 1]], send_sizes=[[1, 2], [1, 1]],
    output_offsets=[[0, 0], [1, 2]], recv_sizes=[[1, 1], [2, 1]],
)


def docs(**changes):
    return lambda: ragged(**{**DOCS, **changes})


def gather(x_per_device, mesh_axes=None, **kw):
    n = len(x_per_device)
    return lambda: per_device(mesh_axes or {"i": n}, lambda x: collectives.all_gather(x, **kw), x_per_device)


def a2a(x_per_device, *a, **kw):
    return lambda: per_device({"i": len(x_per_device)}, lambda x: collectives.all_to_all(x, *a, **kw),
                              x_per_device)


def shard(f, mesh_axes, in_specs, out_specs, *args, check_vma=True):
    mesh = sim.Mesh(mesh_axes)
    return lambda: sim.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma)(*args)


def grouped_after(groups, cached):
    """A psum over `groups` on a mesh of 4 where a psum over the int groups `cached` (equal to `groups` as
    numbers: 0.0 == 0, True == 1) already ran: the groups are checked, not matched to a table kept for ints."""
    mesh = sim.Mesh({"i": 4})

    def psum(groups):
        return sim.shard_map(lambda x: collectives.psum(x, "i", axis_index_groups=groups), mesh=mesh,
                             in_specs=P("i"), out_specs=P("i"), check_vma=False)(np.arange(4.0))

    def call():
        psum(cached)
        return psum(groups)
    return call


FOUR = [np.arange(2) + 10 * d for d in range(4)]

BAD_INPUTS = [
    # (id, call, error type, message pattern)
    # ml_dtypes' float8_e5m2 files itself under numpy's kind 'f': moved, but not reduced, like every float8 type
    ("psum of float8_e5m2", lambda: per_device({"i": 2}, lambda x: collectives.psum(x, "i"),
                                               [np.ones(2, "float8_e5m2")] * 2),
     sim.InvalidTypeError, r"device 0: psum: x has dtype float8_e5m2; the float8 types are moved, not reduced"),
    ("psum_scatter of float8_e4m3fn", lambda: per_device({"i": 2}, lambda x: collectives.psum_scatter(x, "i"),
                                                         [np.ones(2, "float8_e4m3fn")] * 2),
     sim.InvalidTypeError, r"device 0: psum_scatter: x has dtype float8_e4m3fn; the float8 types are moved, not "
                           r"reduced .*convert x to bfloat16 or float32 before the psum_scatter"),
    ("ppermute of int4", lambda: per_device({"i": 2}, lambda x: collectives.ppermute(x, "i", [(0, 1)]),
                                            [np.ones(2, "int4")] * 2),
     sim.InvalidTypeError, r"device 0: ppermute: x has dtype int4; it must be numeric.*int4 types are not modelled"),
    ("all_gather of int4", lambda: per_device({"i": 2}, lambda x: collectives.all_gather(x, "i"),
                                              [np.ones(2, "int4")] * 2),
     sim.InvalidTypeError, r"device 0: all_gather: x has dtype int4; it must be numeric"),
    ("shard_map of an object array", lambda: sim.shard_map(lambda v: v, mesh=sim.Mesh({"i": 2}), in_specs=P("i"),
                                                            out_specs=P("i"))(np.array([1, "a"], dtype=object)),
     sim.InvalidTypeError, r"args\[0\]: dtype object holds Python objects, which a device memory cannot hold"),
    ("all_gather(axis_name='z')", gather(FOUR, axis_name="z"), sim.InvalidArgumentError,
     r"device 0: all_gather: axis_name='z': unknown axis 'z'; the mesh has axes \('i',\)"),
    ("all_gather(groups=[[0,1],[1,2]])", gather(FOUR, axis_name="i", axis_index_groups=[[0, 1], [1, 2]]),
     sim.InvalidArgumentError, r"must cover every axis index exactly once \(missing \[3\], repeated \[1\]"),
    ("all_gather(groups=[[0,1,2],[3]])", gather(FOUR, axis_name="i", axis_index_groups=[[0, 1, 2], [3]]),
     sim.InvalidArgumentError, r"all groups must be the same size, got sizes \[3, 1\] \(in group order\)"),
    ("all_gather(groups=[[0,1],[2,5]])", gather(FOUR, axis_name="i", axis_index_groups=[[0, 1], [2, 5]]),
     sim.InvalidArgumentError, r"out of range \[5\]"),
    ("all_gather(axis=3)", gather(FOUR, axis_name="i", axis=3), sim.InvalidArgumentError,
     r"device 0: all_gather: axis=3 must be in \[-2, 2\) for rank 2"),
    ("all_gather(scalar, tiled=True)", gather([np.int32(d) for d in range(4)], axis_name="i", tiled=True),
     sim.InvalidArgumentError, r"tiled=True needs x of rank >= 1"),
    ("all_gather(axis=1.0)", gather(FOUR, axis_name="i", axis=1.0), sim.InvalidTypeError,
     r"axis=1.0 must be an int"),
    ("all_gather(strings)", gather([np.array(["a"])] * 4, axis_name="i"), sim.InvalidTypeError,
     r"x has dtype <U1; it must be numeric"),
    ("all_gather(axis_name=('i','i'))", gather(FOUR, axis_name=("i", "i")), sim.InvalidArgumentError,
     r"must not repeat an axis"),
    ("all_to_all(split size != group)", a2a([np.zeros((3, 2))] * 4, "i", 0, 0), sim.InvalidArgumentError,
     r"x.shape\[split_axis=0\]=3 must equal the group size 4 when tiled=False"),
    ("all_to_all(tiled, not divisible)", a2a([np.zeros((6, 2))] * 4, "i", 0, 1, tiled=True),
     sim.InvalidArgumentError, r"x.shape\[split_axis=0\]=6 must be divisible by the group size 4"),
    ("all_to_all(concat_axis=2)", a2a([np.zeros((4, 2))] * 4, "i", 0, 2), sim.InvalidArgumentError,
     r"concat_axis=2 must be in \[0, 2\)"),
    ("all_to_all(split_axis=-1)", a2a([np.zeros((2, 4))] * 4, "i", -1, 0), sim.InvalidArgumentError,
     r"split_axis=-1 must be in \[0, 2\) for rank 2"),
    ("all_gather(axis_name=())", gather(FOUR, axis_name=()), sim.InvalidArgumentError,
     r"axis_name=\(\) must name at least one mesh axis"),
    ("all_to_all(scalar)", a2a([np.float32(1)] * 4, "i", 0, 0), sim.InvalidArgumentError,
     r"x must have rank >= 1"),
    ("ragged(input_offsets float)", docs(input_offsets=[[0.0, 1.0]] * 2), sim.InvalidTypeError,
     r"device 0: ragged_all_to_all: input_offsets has dtype float64; it must be an integer type"),
    ("ragged(mixed index dtypes)", docs(send_sizes=[np.array([1, 2], np.int32), np.array([1, 1], np.int32)]),
     sim.InvalidTypeError, r"input_offsets is int64, send_sizes is int32, output_offsets is int64, recv_sizes is "
     r"int64; the four offset and size arrays must share one integer dtype"),
    ("ragged(send_sizes rank 2)", docs(send_sizes=[[[1, 2]], [[1, 1]]]), sim.InvalidArgumentError,
     r"send_sizes has shape \(1, 2\); it must be rank 1"),
    ("ragged(lengths differ)", docs(recv_sizes=[[1, 1, 0], [2, 1, 0]]), sim.InvalidArgumentError,
     r"len\(input_offsets\)=2, len\(send_sizes\)=2, len\(output_offsets\)=2, len\(recv_sizes\)=3 must all"),
    ("ragged(length 3 on 2 devices)", docs(input_offsets=[[0, 1, 1]] * 2, send_sizes=[[1, 2, 0], [1, 1, 0]],
                                           output_offsets=[[0, 0, 0], [1, 2, 0]], recv_sizes=[[1, 1, 0], [2, 1, 0]]),
     sim.InvalidArgumentError, r"len\(input_offsets\)=3 must be divisible by the group size 2"),
    ("ragged(send slice past operand)", docs(input_offsets=[[0, 2], [0, 1]]), sim.InvalidArgumentError,
     r"device 0, slice 1: input_offsets\[1\]=2 plus send_sizes\[1\]=2 runs outside operand rows \[0, 3\)"),
    ("ragged(negative input offset)", docs(input_offsets=[[0, 1], [-1, 1]]), sim.InvalidArgumentError,
     r"device 1, slice 0: input_offsets\[0\]=-1 plus send_sizes\[0\]=1 runs outside operand rows"),
    ("ragged(receive slice past output)", docs(output_offsets=[[0, 3], [1, 2]]), sim.InvalidArgumentError,
     r"device 1, slice 0: output_offsets\[1\]=3 of device 0 plus recv_sizes\[0\]=2 runs outside output rows \[0, 4\)"),
    ("ragged(negative send size)", docs(send_sizes=[[1, -2], [1, 1]]), sim.InvalidArgumentError,
     r"device 0, slice 1: send_sizes\[1\]=-2 must be >= 0"),
    ("ragged(negative recv size)", docs(recv_sizes=[[1, 1], [-2, 1]]), sim.InvalidArgumentError,
     r"device 1, slice 0: recv_sizes\[0\]=-2 must be >= 0"),
    ("ragged(send != all_to_all(recv))", docs(recv_sizes=[[1, 1], [1, 1]]), sim.InvalidArgumentError,
     r"device 1, slice 0: recv_sizes\[0\]=1 but device 0 sends send_sizes\[1\]=2; "
     r"send_sizes must equal the all_to_all of recv_sizes"),
    ("ragged(overlapping receives)", docs(output_offsets=[[0, 1], [1, 2]]), sim.InvalidArgumentError,
     r"device 1: slice 0 \(from device 0, output rows \[1, 3\)\) and slice 1 \(from device 1, output rows "
     r"\[2, 3\)\) overlap in rows \[2, 3\)"),
    ("ragged(operand/output dtypes)", docs(outputs=[np.zeros(4, np.float32)] * 2), sim.InvalidTypeError,
     r"operand is int64\[3\] and output is float32\[4\]; they must share the dtype"),
    ("ragged(scalar operand)", docs(operands=[1, 2]), sim.InvalidArgumentError,
     r"operand and output must have rank >= 1"),
    ("collective outside shard_map", lambda: collectives.all_gather(np.zeros(2), "x"), sim.MeshError,
     r"collectives must be called inside a program run by sim.shard_map"),
    ("shard_map(dim not divisible)", shard(lambda x: x, {"x": 4}, P("x"), P("x"), np.zeros(6)),
     sim.InvalidArgumentError, r"args\[0\]: dimension 0 of size 6 must be divisible by the 4 devices of 'x'"),
    ("shard_map(unknown axis in spec)", shard(lambda x: x, {"x": 2}, P("y"), P("x"), np.zeros(2)),
     sim.InvalidArgumentError, r"unknown axis 'y'"),
    ("shard_map(spec longer than rank)", shard(lambda x: x, {"x": 2}, P("x", None), P("x"), np.zeros(2)),
     sim.InvalidArgumentError, r"spec P\('x', None\) has 2 entries but the array has rank 1"),
    ("shard_map(false replication)", shard(lambda x: x, {"x": 2}, P("x"), P(), np.arange(4)),
     sim.InvalidArgumentError,
     r"out: out_specs entry P\(\) claims the output is replicated along mesh axis 'x', but on device 0 its type "
     r"varies along \['x'\] \(a:i64\[2\]\{V:x\}\); reduce it over 'x'"),
    ("shard_map(false replication, check_vma=False)",
     shard(lambda x: x, {"x": 2}, P("x"), P(), np.arange(4), check_vma=False), sim.InvalidArgumentError,
     r"out: out_specs entry P\(\) claims the output is replicated along mesh axis 'x', but device 1 and device 0 "
     r"hold different values"),
    ("shard_map(in_specs mismatch)", shard(lambda x, y: x, {"x": 2}, (P("x"),) * 3, P("x"), np.zeros(2), np.zeros(2)),
     sim.InvalidArgumentError, r"in_specs=.* does not match the values"),
    ("psum(algorithm='in_network') on fully_connected",
     lambda: per_device({"i": 4}, lambda x: collectives.psum(x, "i", algorithm="in_network"), FOUR),
     sim.InvalidArgumentError, r"device 0: psum: algorithm='in_network' needs a switch that reduces, and the network "
     r"\(fully_connected\) has switch_reduces=False: use a switch or hierarchical network with switch_reduces=True"),
    ("psum_scatter(algorithm='in_network') on a switch that does not reduce",
     lambda: sim.shard_map(lambda x: collectives.psum_scatter(x, "i", tiled=True, algorithm="in_network"),
                           mesh=sim.Mesh({"i": 4}, network=sim.Network.switch()), in_specs=P("i"),
                           out_specs=P("i"))(np.arange(16)),
     sim.InvalidArgumentError, r"device 0: psum_scatter: algorithm='in_network' needs a switch that reduces, and the "
     r"network \(switch\) has switch_reduces=False"),
    ("deadlock", lambda: per_device({"x": 2}, lambda x: collectives.all_gather(x, "x") if x[0] == 0 else x, [[0], [1]]),
     sim.ProtocolError, r"deadlock.*\n  device 0 waits in all_gather \(call #0 over devices \[0, 1\]\)\n  device 1 "),
    ("pscatter(varying operand)", shard(lambda x: collectives.pscatter(x, "i"), {"i": 2}, P("i"), P("i"), np.zeros(4)),
     sim.InvalidTypeError, r"device 0: pscatter: the operand already varies along \['i'\]; pscatter takes a value "
     r"invariant along \['i'\]"),
    ("pvary(varying operand)",
     shard(lambda x: collectives.pvary(x, "i"), {"i": 2}, P("i"), P("i"), np.zeros(4)),
     sim.InvalidTypeError, r"device 0: pvary: the operand already varies along \['i'\]"),
    ("all_gather to P() (check_vma)",
     shard(lambda x: collectives.all_gather(x, "i"), {"i": 2}, P("i"), P(), np.zeros(4)),
     sim.InvalidArgumentError, r"out: out_specs entry P\(\) claims the output is replicated along mesh axis 'i', but "
     r"on device 0 its type varies along \['i'\] \(b:f64\[2,2\]\{V:i\}\)"),
    ("mismatched collectives",
     lambda: per_device({"x": 2}, lambda x: collectives.all_gather(x, "x")[0] if x[0] == 0
                        else collectives.all_to_all(x, "x", 0, 0), [[0, 0], [1, 1]]),
     sim.ProtocolError, r"mismatched collectives: call #0 over devices \[0, 1\]: device 0 called all_gather"),
    ("psum(algorithm='butterfly')",
     lambda: per_device({"i": 4}, lambda x: collectives.psum(x, "i", algorithm="butterfly"), FOUR),
     sim.InvalidArgumentError,
     r"device 0: psum: algorithm='butterfly' must be one of \('direct', 'ring', 'recursive_doubling', "
     r"'bidirectional_ring', 'rabenseifner', 'per_axis', 'multi_axis', 'hierarchical', 'tree', 'in_network', "
     r"'auto'\)"),
    ("psum(recursive_doubling, 3 devices)",
     lambda: per_device({"i": 3}, lambda x: collectives.psum(x, "i", algorithm="recursive_doubling"), FOUR[:3]),
     sim.InvalidArgumentError, r"algorithm='recursive_doubling' needs a group size that is a power of two, got 3"),
    ("pmax(complex)", lambda: per_device({"i": 2}, lambda x: collectives.pmax(x, "i"), [[1j], [2j]]),
     sim.InvalidTypeError, r"device 0: pmax: x has dtype complex128; complex numbers have no max or min"),
    ("pmean(strings)", lambda: per_device({"i": 2}, lambda x: collectives.pmean(x, "i"), [["a"], ["b"]]),
     sim.InvalidTypeError, r"device 0: pmean: x has dtype <U1; it must be numeric"),
    ("psum(shapes differ)",
     lambda: per_device({"i": 2}, lambda x: collectives.psum(x if x[0] == 0 else x[:1], "i")[:1], [[0, 0], [1, 1]]),
     sim.InvalidArgumentError,
     r"device 1: psum: x is int64\[1\] but device 0 has int64\[2\]; every device in the group"),
    ("psum(Python scalars differ)",
     lambda: per_device({"i": 2}, lambda x: np.asarray(collectives.psum(int(x[0]), "i")) + x, [[0], [1]]),
     sim.InvalidArgumentError, r"device 1: psum: the Python scalar x is int 1 but device 0 has int 0"),
    ("pmin(groups=[[0,1],[1,2]])",
     lambda: per_device({"i": 4}, lambda x: collectives.pmin(x, "i", axis_index_groups=[[0, 1], [1, 2]]), FOUR),
     sim.InvalidArgumentError, r"device 0: pmin: axis_index_groups=.* must cover every axis index exactly once"),
    ("psum(groups='ab')",
     lambda: per_device({"i": 4}, lambda x: collectives.psum(x, "i", axis_index_groups="ab"), FOUR),
     sim.InvalidTypeError, r"device 0: psum: axis_index_groups='ab' must be a list of lists of ints: "
                           r"axis_index_groups\[0\]\[0\]='a' is not an int"),
    ("pmax(groups=[[0.5, 1], [2, 3]])",  # not truncated to [[0, 1], [2, 3]]
     lambda: per_device({"i": 4}, lambda x: collectives.pmax(x, "i", axis_index_groups=[[0.5, 1], [2, 3]]), FOUR),
     sim.InvalidTypeError, r"device 0: pmax: .*axis_index_groups\[0\]\[0\]=0.5 is not an int"),
    ("psum(groups=[[0.0, 3], [1, 2]]) after [[0, 3], [1, 2]]", grouped_after([[0.0, 3], [1, 2]], [[0, 3], [1, 2]]),
     sim.InvalidTypeError, r"device 0: psum: axis_index_groups=\[\[0.0, 3\], \[1, 2\]\] must be a list of lists of "
                           r"ints: axis_index_groups\[0\]\[0\]=0.0 is not an int"),
    ("psum(groups=float array) after [[0, 3], [1, 2]]",
     grouped_after(np.array([[0.0, 3.0], [1.0, 2.0]]), [[0, 3], [1, 2]]),
     sim.InvalidTypeError, r"(?s)device 0: psum: .*axis_index_groups\[0\]\[0\]=np.float64\(0.0\) is not an int"),
    ("psum(groups=[[True, False], [2, 3]]) after [[1, 0], [2, 3]]",
     grouped_after([[True, False], [2, 3]], [[1, 0], [2, 3]]),
     sim.InvalidTypeError, r"device 0: psum: .*axis_index_groups\[0\]\[0\]=True is not an int"),
    ("psum(groups=5)", lambda: per_device({"i": 4}, lambda x: collectives.psum(x, "i", axis_index_groups=5), FOUR),
     sim.InvalidTypeError, r"device 0: psum: axis_index_groups=5 must be a list of lists of ints"),
    ("psum_scatter(dim size != group)", lambda: per_device({"i": 4}, lambda x: collectives.psum_scatter(x, "i"),
                                                           [np.zeros(3)] * 4),
     sim.InvalidArgumentError, r"x.shape\[scatter_dimension=0\]=3 must equal the group size 4 when tiled=False"),
    ("psum_scatter(tiled, not divisible)",
     lambda: per_device({"i": 4}, lambda x: collectives.psum_scatter(x, "i", tiled=True), [np.zeros(6)] * 4),
     sim.InvalidArgumentError, r"x.shape\[scatter_dimension=0\]=6 must be divisible by the group size 4"),
    ("psum_scatter(scatter_dimension=-1)",
     lambda: per_device({"i": 2}, lambda x: collectives.psum_scatter(x, "i", scatter_dimension=-1), [np.zeros(2)] * 2),
     sim.InvalidArgumentError, r"scatter_dimension=-1 must be in \[0, 1\) for rank 1"),
    ("psum_scatter(bool)",
     lambda: per_device({"i": 2}, lambda x: collectives.psum_scatter(x, "i"), [[True, False]] * 2),
     sim.InvalidTypeError, r"device 0: psum_scatter: x has dtype bool; it must be a number type"),
    ("psum_scatter(scalar)", lambda: per_device({"i": 2}, lambda x: collectives.psum_scatter(x, "i")[None], [1, 2]),
     sim.InvalidArgumentError, r"psum_scatter: x must have rank >= 1, got a scalar"),
    ("ppermute(repeated destination)",
     lambda: per_device({"i": 4}, lambda x: collectives.ppermute(x, "i", [(0, 1), (2, 1)]), FOUR),
     sim.InvalidArgumentError, r"device 0: ppermute: perm\[1\]=\(2, 1\): destination 1 is already the destination of "
                               r"perm\[0\]=\(0, 1\)"),
    ("ppermute(repeated source via -1)",
     lambda: per_device({"i": 4}, lambda x: collectives.ppermute(x, "i", [(3, 0), (-1, 2)]), FOUR),
     sim.InvalidArgumentError, r"perm\[1\]=\(-1, 2\): source 3 is already the source of perm\[0\]=\(3, 0\)"),
    ("ppermute(index out of range)",
     lambda: per_device({"i": 4}, lambda x: collectives.ppermute(x, "i", [(0, 4)]), FOUR),
     sim.InvalidArgumentError, r"perm\[0\]=\(0, 4\): destination 4 must be in \[-4, 4\) for axis_name='i' of size 4"),
    ("ppermute(perm=[0, 1])", lambda: per_device({"i": 4}, lambda x: collectives.ppermute(x, "i", [0, 1]), FOUR),
     sim.InvalidTypeError, r"perm=\[0, 1\] must be a sequence of \(source, destination\) pairs of ints"),
    ("axis_index('z')", lambda: per_device({"i": 2}, lambda x: collectives.axis_index("z") + x, [0, 1]),
     sim.InvalidArgumentError, r"device 0: axis_index: axis_name='z': unknown axis 'z'"),
    ("axis_size('z')", lambda: per_device({"i": 2}, lambda x: collectives.axis_size("z") + x, [0, 1]),
     sim.InvalidArgumentError, r"device 0: axis_size: axis_name='z': unknown axis 'z'; the mesh has axes \('i',\)"),
    ("axis_size(('i', 'i'))", lambda: per_device({"i": 2}, lambda x: collectives.axis_size(("i", "i")) + x, [0, 1]),
     sim.InvalidArgumentError, r"device 0: axis_size: axis_name=\('i', 'i'\) must not repeat an axis; the mesh has "
     r"axes \('i',\)"),
    ("axis_size(algorithm='ring')",
     lambda: per_device({"i": 2}, lambda x: collectives.axis_size("i", algorithm="ring") + x, [0, 1]),
     sim.InvalidArgumentError, r"device 0: axis_size: algorithm='ring' must be one of \('direct', 'auto'\)"),
    ("axis_size outside shard_map", lambda: collectives.axis_size("x"), sim.MeshError,
     r"collectives must be called inside a program run by sim.shard_map"),
    ("pscatter(dim size != axis)",
     shard(lambda x: collectives.pscatter(x, "i"), {"i": 4}, P(), P("i"), np.zeros(3)),
     sim.InvalidArgumentError, r"device 0: pscatter: x.shape\[axis=0\]=3 must equal the axis size 4 when tiled=False"),
    ("pscatter(scalar)", shard(lambda x: collectives.pscatter(x, "i")[None], {"i": 2}, P(), P("i"), np.float32(1)),
     sim.InvalidArgumentError, r"pscatter: x must have rank >= 1, got a scalar"),
    ("all_gather_invariant(axis=3)",
     lambda: per_device({"i": 4}, lambda x: collectives.all_gather_invariant(x, "i", axis=3), FOUR),
     sim.InvalidArgumentError, r"device 0: all_gather_invariant: axis=3 must be in \[-2, 2\) for rank 2"),
    ("pvary(axis_name=('i','i'))",
     lambda: per_device({"i": 2}, lambda x: collectives.pvary(x, ("i", "i")), [[0], [0]]),
     sim.InvalidArgumentError, r"device 0: pvary: axis_name=\('i', 'i'\) must not repeat an axis"),
    ("psum_invariant(mismatched algorithm)",
     lambda: per_device({"i": 2}, lambda x: collectives.psum_invariant(x, "i", algorithm="ring" if x[0] else "direct"),
                        [[0], [1]]),
     sim.ProtocolError,
     r"mismatched collectives: call #0 over devices \[0, 1\]: device \d called psum_invariant.*'ring'"),
    ("pcast(to='unreduced')",
     shard(lambda x: collectives.pcast(x, "i", to="unreduced"), {"i": 2}, P(), P("i"), np.zeros(2)),
     sim.InvalidArgumentError, r"device 0: pcast: to='unreduced' must be 'varying', the only value meshsim's pcast "
     r"accepts \(pvary: invariant -> varying\)\. JAX's pcast also takes 'unreduced', but meshsim models no "
     r"reduced or unreduced types"),
    ("pcast(to='invariant')",  # not read as if 'reduced' or 'unreduced' were accepted here
     shard(lambda x: collectives.pcast(x, "i", to="invariant"), {"i": 2}, P(), P("i"), np.zeros(2)),
     sim.InvalidArgumentError, r"^device 0: pcast: to='invariant' must be 'varying', the only value meshsim's "
     r"pcast accepts .*'invariant' is not among JAX's casts either .*meshsim refuses 'reduced' and 'unreduced'.* "
     r"becomes invariant by a reduction \(psum, all_gather_invariant\)"),
    ("pcast(to='replicated')",
     shard(lambda x: collectives.pcast(x, "i", to="replicated"), {"i": 2}, P(), P("i"), np.zeros(2)),
     sim.InvalidArgumentError, r"pcast: to='replicated' must be 'varying', the only value meshsim's pcast accepts"),
    ("pbroadcast(source=4) on 4 devices",
     lambda: per_device({"i": 4}, lambda x: collectives.pbroadcast(x, "i", 4), FOUR),
     sim.InvalidArgumentError, r"device 0: pbroadcast: source=4 must be in \[0, 4\) for axis_name='i' of size 4"),
    ("pbroadcast(source=1.0)", lambda: per_device({"i": 2}, lambda x: collectives.pbroadcast(x, "i", 1.0), FOUR[:2]),
     sim.InvalidTypeError, r"device 0: pbroadcast: source=1.0 must be an int"),
    ("pbroadcast(algorithm='ring_of_fire')",
     lambda: per_device({"i": 2}, lambda x: collectives.pbroadcast(x, "i", 0, algorithm="ring_of_fire"), FOUR[:2]),
     sim.InvalidArgumentError, r"pbroadcast: algorithm='ring_of_fire' must be one of \('direct', 'tree', 'ring'"),
    ("psend with no precv", lambda: per_device({"i": 2}, lambda x: (collectives.psend(x, "i", [(0, 1)]), x)[1],
                                                FOUR[:2]),
     sim.ProtocolError, r"device 0 sent a message to device 1 in psend\(perm=\[\(0, 1\)\], axis_name='i'\) that "
                        r"no receive on device 1 took"),
    ("precv of create_token() with no psend",
     lambda: per_device({"i": 2}, lambda x: collectives.precv(collectives.create_token(),
                                                              sim.ShapeDtypeStruct(x.shape, x.dtype), "i", [(0, 1)]),
                        FOUR[:2]),
     sim.ProtocolError, r"device 1 waits for a message from device 0 on 'psend #0 from device 0 to device 1"),
    ("precv(out_shape=(3,)) of a (2,) psend",
     lambda: per_device({"i": 2}, lambda x: collectives.precv(collectives.psend(x, "i", [(0, 1)]),
                                                              sim.ShapeDtypeStruct((3,), x.dtype), "i", [(0, 1)]),
                        FOUR[:2]),
     sim.InvalidArgumentError, r"precv on device 1 \(receiver\) does not pair with the psend on device 0 "
                               r"\(sender\): out_shape.shape=\(3,\) but the psend sent"),
    ("precv(perm) other than its token's psend",
     lambda: per_device({"i": 2}, lambda x: collectives.precv(collectives.psend(x, "i", [(0, 1)]),
                                                              sim.ShapeDtypeStruct(x.shape, x.dtype), "i", [(1, 0)]),
                        FOUR[:2]),
     sim.InvalidArgumentError, r"device \d: precv: perm=\[\(1, 0\)\], axis_name='i' differ from those of the psend"),
    ("precv(token=x)",
     lambda: per_device({"i": 2}, lambda x: collectives.precv(x, sim.ShapeDtypeStruct(x.shape, x.dtype), "i",
                                                              [(0, 1)]), FOUR[:2]),
     sim.InvalidTypeError, r"device \d: precv: token=.* must be a Token"),
    ("psend(axis_name='z')", lambda: per_device({"i": 2}, lambda x: (collectives.psend(x, "z", [(0, 1)]), x)[1],
                                                FOUR[:2]),
     sim.InvalidArgumentError, r"device 0: psend: .*unknown axis 'z'"),
    ("pshuffle(perm=[0, 0, 1, 2])",
     lambda: per_device({"i": 4}, lambda x: collectives.pshuffle(x, "i", [0, 0, 1, 2]), FOUR),
     sim.InvalidArgumentError, r"device 0: pshuffle: perm=\[0, 0, 1, 2\] must be a permutation of range\(4\)"),
    ("pshuffle(perm=[1, 0]) on 4 devices",
     lambda: per_device({"i": 4}, lambda x: collectives.pshuffle(x, "i", [1, 0]), FOUR),
     sim.InvalidArgumentError, r"pshuffle: perm=\[1, 0\] must be a permutation of range\(4\)"),
    ("pshuffle(perm='01')", lambda: per_device({"i": 2}, lambda x: collectives.pshuffle(x, "i", "01"), FOUR[:2]),
     sim.InvalidTypeError, r"pshuffle: perm='01' must be a sequence of ints"),
    ("pswapaxes(x.shape[0]=2 on 4 devices)",
     lambda: per_device({"i": 4}, lambda x: collectives.pswapaxes(x, "i", 0), FOUR),
     sim.InvalidArgumentError, r"device 0: pswapaxes: x.shape\[axis=0\]=2 must equal the group size 4"),
    ("pswapaxes(axis=-1)", lambda: per_device({"i": 2}, lambda x: collectives.pswapaxes(x, "i", -1), FOUR[:2]),
     sim.InvalidArgumentError, r"pswapaxes: axis=-1 must be in \[0, 1\)"),
    ("pswapaxes(scalar)", lambda: per_device({"i": 2}, lambda x: collectives.pswapaxes(x[0], "i", 0)[None], FOUR[:2]),
     sim.InvalidArgumentError, r"pswapaxes: x must have rank >= 1, got a scalar"),
    ("pcast(varying operand)",
     shard(lambda x: collectives.pcast(x, "i", to="varying"), {"i": 2}, P("i"), P("i"), np.zeros(4)),
     sim.InvalidTypeError, r"device 0: pcast: the operand already varies along \['i'\]"),
]


@pytest.mark.parametrize("call, error, pattern", [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_input(call, error, pattern):
    """Each bad input raises its documented MeshError subclass with a message that names where and why."""
    with pytest.raises(error, match=pattern) as caught:
        call()
    assert isinstance(caught.value, sim.MeshError)


def test_all_ragged_violations_are_reported_at_once():
    """A call breaking several rules on several devices lists every violation in one error."""
    with pytest.raises(sim.InvalidArgumentError, match=r"3 invalid argument\(s\)") as caught:
        docs(input_offsets=[[0, 2], [0, 3]], recv_sizes=[[1, 1], [1, 1]])()
    message = str(caught.value)
    assert "device 0, slice 1: input_offsets[1]=2" in message
    assert "device 1, slice 1: input_offsets[1]=3" in message
    assert "device 1, slice 0: recv_sizes[0]=1 but device 0 sends send_sizes[1]=2" in message


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_random_ragged_arguments_either_run_or_raise_a_mesh_error(data):
    """Arbitrary small ragged arguments never crash the simulator's internals nor hang it."""
    n = data.draw(st.integers(1, 3), label="devices")
    k = n * data.draw(st.integers(1, 2), label="slices per device")
    ints = st.lists(st.integers(-2, 6), min_size=k, max_size=k)
    rows = data.draw(st.integers(1, 5), label="rows")
    args = [[data.draw(ints) for _ in range(n)] for _ in range(4)]
    operands = [np.arange(rows) + 10 * d for d in range(n)]
    with contextlib.suppress(sim.InvalidArgumentError):
        ragged(operands, [np.zeros(rows, int)] * n, *args)
