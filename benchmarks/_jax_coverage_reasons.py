"""Why lines of a JAX rule function stay unreached by the rules campaign, judged by reading each one.

`reason("_pbroadcast_batcher", {1261})` is the text for that function's unreached lines (a lambda is
named with its line, `"<lambda>:1056"`): where a function has several kinds of unreached lines, its text
is parts that start with the lines they speak of ("1261: ...; 1266: ..."), and only the parts about lines
still unreached are given, so one table serves every profile. A function not judged here reads "not
judged"; one of a primitive outside meshsim's model needs no other reason. Line numbers are jax 0.10.2's.
"""

from __future__ import annotations

import re

_GPU = "registered for platform='gpu' only"
_CPU_LOWERED = ("XLA:CPU cannot run it: the campaign runs the op through oracles.install_cpu_lowerings(), "
                "which registers its own CPU lowering")
_UNMODELLED = "the primitive is outside meshsim's model (no campaign program binds it)"
_TPU = "the TPU-only check of unequal groups (ctx.module_context.platforms holds 'tpu')"
_NOT_TUPLE = "axis_name not a tuple (the public function always binds a tuple)"
_PMAP = "the lowering outside SPMD (a pmap axis context); shard_map lowers in SPMD"
_ASYNC = "the asynchronous *_start primitive's lowering, outside meshsim's model"
_POSITIONAL = "integer (positional) axes, which meshsim's collectives do not take: they name mesh axes only"
_GSPMD = ("the GSPMD lowering: JAX 0.10.2 lowers shard_map through Shardy (jax_use_shardy_partitioner), "
          "_shard_map_lowering_shardy, which runs whole")
_EAGER = "eager shard_map (outside jit): the named vmap programs run eagerly one draw in two"
_CHECKS = "runs only under jax_enable_checks (core.check_jaxpr), which the campaign leaves off"
_REMAT = ("partial evaluation with a policy: jax.checkpoint / remat around a shard_map, which the "
          "control_flow kind runs")
_HIJAX = "high-level (hijax) types lowered to their low-level parts: outside meshsim's model"
_SPMD_NAME = ("vmap with spmd_axis_name or an explicit mesh axis (the batch spread over a mesh axis the "
              "shard_map leaves automatic): a partial-manual program, the partial_manual kind's")
_IF_UNMAPPED = ("dead code: `if_unmapped` runs only for an unbatched operand in "
                "_reduction_with_positional_batcher, and both callers hand it a batched one (an unbatched "
                "operand returns earlier, through _constant_reduction)")

REASONS: dict[str, str] = {
    # ---- the collectives' rules (parallel.py)
    "_allreduce_effectful_abstract_eval": f"952: the error for axis_index_groups with {_POSITIONAL}",
    "_psum_transpose_rule": f"1037-1042: {_POSITIONAL}",
    "_batched_reduction_collective": ("the unbatched branches (898: over the vmap axis, 900-902: over other "
                                      "axes) are drawn rarely: the named vmap's unbatched draws and the "
                                      "positional vmap with every argument unbatched"),
    "<lambda>:1056": _IF_UNMAPPED, "<lambda>:1065": _IF_UNMAPPED, "<lambda>:1074": _IF_UNMAPPED,
    "_allreduce_lowering": f"980-983: {_TPU}",
    "_ppermute_batcher": f"1126: {_NOT_TUPLE}; 1128: an unbatched operand not over the vmap axis, drawn rarely",
    "_pbroadcast_batcher": ("1261: an unbatched operand not over the vmap axis, drawn rarely; 1266: a tuple "
                            "with the vmap axis, refused (NotImplementedError); 1270: dead code (1266 has "
                            "raised whenever remaining_axes is not empty); 1272: an unbatched operand over the "
                            "vmap axis, drawn rarely"),
    "_pbroadcast_lowering": f"{_GPU}; {_CPU_LOWERED}",
    "_ragged_all_to_all_lowering": _CPU_LOWERED,
    "_psend_lowering_gpu": f"{_GPU}; XLA:CPU has no Send/Recv, the campaign runs JAX's equivalent ppermute",
    "_precv_lowering_gpu": f"{_GPU}; XLA:CPU has no Send/Recv, the campaign runs JAX's equivalent ppermute",
    "_psend_lowering": "raises on every platform but GPU; the campaign lowers no psend",
    "_precv_lowering": "raises on every platform but GPU; the campaign lowers no precv",
    "_all_to_all_effectful_abstract_eval": f"1480: {_NOT_TUPLE}",
    "_all_to_all_batched_collective": ("1413-1416: an unbatched operand not over the vmap axis, drawn rarely; "
                                       "1426-1427: an unbatched operand over the vmap axis (FINDINGS.md 21), drawn "
                                       "rarely; 1442-1443: split_axis != concat_axis over the vmap axis alone, "
                                       "drawn rarely; 1449-1455: the vmap axis after another in the tuple (major "
                                       "axes) and 1461: before another (minor axes), each drawn rarely (and "
                                       "typed programs stop at FINDINGS.md 17 first); both at once needs three "
                                       "mesh axes, the campaign's meshes have two"),
    "_all_to_all_lowering": f"1334: the error for unequal groups (the docs require equal ones); 1347: {_PMAP}; "
                            f"1359-1375: {_ASYNC}",
    "_ragged_all_to_all_effectful_abstract_eval": ("the errors for arguments the docs forbid (non-integer offsets "
                                                   "or sizes, wrong ranks or lengths): the campaign draws valid "
                                                   "calls only"),
    "_ragged_all_to_all_jvp": ("1589: both tangents symbolic zeros (neither operand nor output depends on the "
                               "differentiated input): every campaign program differentiates them"),
    "_ragged_all_to_all_transpose": ("1601-1602: a symbolic-zero cotangent (the result unused): every campaign "
                                     "program returns it"),
    "_ragged_all_to_all_batched_collective": ("1621-1623: every argument unbatched, not over the vmap axis, "
                                              "drawn rarely; 1625: ragged_all_to_all over the vmap axis, refused "
                                              "(NotImplementedError)"),
    "_all_gather_effectful_abstract_eval": f"1852: {_NOT_TUPLE}",
    "_all_gather_batched_collective": (f"1898: {_NOT_TUPLE}; 1915: a tuple with the vmap axis is refused "
                                       "(NotImplementedError), but the assertion of 1913 refuses it first "
                                       "unless the other axes have size 1"),
    "_all_gather_lowering": f"1789, 1820-1832: {_ASYNC}; 1810: {_PMAP}",
    "_reduce_scatter_effectful_abstract_eval": (f"2087: {_NOT_TUPLE}; 2094, 2100: the errors for a scatter "
                                                "dimension the axis size does not divide (tiled) or equal "
                                                "(untiled), which the docs forbid"),
    "_reduce_scatter_collective": (f"2138: {_NOT_TUPLE}; 2156: a tuple with the vmap axis, refused as in "
                                   "_all_gather_batched_collective; 2159: an unbatched operand over the vmap "
                                   "axis, drawn rarely"),
    "_reduce_scatter_lowering": f"2058: {_PMAP}",
    "_axis_index_batcher": ("2367: axis_index over the vmap axis: axis_index takes no array, and the vmap kind "
                            "vmaps the collectives of arrays"),
    "_psum_invariant_abstract_eval": ("2397, 2403: the errors for an operand invariant along the axes and for "
                                      "integer axes (jax.lax.psum binds psum_invariant for neither)"),
    "_pvary_abstract_eval": "2443: the error for an operand already varying (pcast binds nothing for it)",
    "_pvary_batcher": ("2460: pvary over the vmap axis (NotImplementedError): pvary takes an invariant operand, "
                       "which the named vmap does not draw"),
    "_check_axis_names": "973: the error for an unbound axis name (the campaign names bound axes only)",
    "_constant_reduction": ("846-847, 849-853, 856: an unbatched reduction over the vmap axis under jit "
                            "(eager programs take psum's constant path instead), drawn rarely; 848: over the vmap "
                            "axis and other axes too, drawn rarely; 855: raised for psum_invariant (an unbatched "
                            "operand over the vmap axis in a typed program), which FINDINGS.md 17's assertion "
                            "stops first"),
    "_reduction_batcher": f"881-888: {_POSITIONAL}",
    "_reduction_with_positional_batcher": ("861: groups, refused (the named vmap's grouped calls refuse "
                                           "earlier); 865-866: dead code, both callers hand it a batched "
                                           "operand"),
    "_pcollectives_lowering_common": f"1105: {_PMAP}",
    "_all_gather_batcher": "1875->1880: dead branch, its caller handles an unbatched operand first",
    "_reduce_scatter_batcher": "2122->2124: dead branch, its caller handles an unbatched operand first",
    "_build_axis_index_lowering_hlo": ("2301-2305: a tuple of names; 2312-2313: outside shard_map; 2316: an "
                                       "unbound name; 2323-2327: a partial-manual shard_map (the partial_manual "
                                       f"kind's); 2341: {_PMAP}"),
    # ---- shard_map's rules (shard_map.py)
    "_shard_map_lowering": f"1096-1112: {_GSPMD}",
    "_xla_shard": _GSPMD, "_xla_unshard": _GSPMD, "_pspec_mhlo_attrs": _GSPMD,
    "_shard_map_typecheck": _CHECKS, "_valid_repeats": f"950: {_CHECKS}",
    "_partial_eval_jaxpr_custom_rule": _REMAT, "_add_reshapes": _REMAT, "_pe_custom_params": _REMAT,
    "_all_newly_manual_mesh_names": f"1992-1993: {_REMAT}",
    "_shard_map_dce": ("2008: no output used and no effects (every campaign program uses its shard_map's "
                       "result); 2016: the same after DCE"),
    "_shard_map_impl": ("1205-1207: a shard_map over an abstract mesh, the devices found from the arguments: "
                        f"the campaign names concrete devices; 1217-1218: an eager typed program, drawn rarely "
                        f"(typed eager programs stop at FINDINGS.md 21 or 23 first); {_EAGER}"),
    "_run_shmap": _EAGER, "_unmatch_spec": _EAGER,
    "_match_spec": f"1317: a partial-manual shard_map (the partial_manual kind's); {_EAGER}",
    "_mat_to_spec": _EAGER, "_check_names": f"1296: the error for out_specs naming too few axes; {_EAGER}",
    "_check_mats": f"1305: the error for an output typed unlike its out_specs; {_EAGER}",
    "_shard_map_staging": f"815-837: {_HIJAX}",
    "_shard_map_partial_eval": ("1699, 1701: a residual forwarded from a known input or output: the "
                                "collectives' linearizations make fresh residuals"),
    "_shard_map_jvp": ("jax.jvp of a shard_map, which the jvp kind runs (jax.vjp and jax.grad linearize: "
                       "_shard_map_linearize, whole)"),
    "_shard_map_batch": f"1543-1561: {_SPMD_NAME}", "_batch_out_specs": _SPMD_NAME,
    "_shard_map_to_lojax": _HIJAX,
    "_shard_shaped_array": "851, 856: the errors for in_specs whose unreduced or reduced axes differ from the "
                           "argument's: meshsim models no reduced types",
    "_unshard_shaped_array": "878, 883: the same errors for out_specs; 892-906: out_specs on an output that is "
                             "itself sharded over mesh axes (explicit sharding): outside meshsim's model",
    "_shard_map_discharge": "discharging Ref effects (mutable arrays) in a shard_map: outside meshsim's model",
    "_get_spmdaxis_ctx_mesh": "978-979: a shard_map over an abstract mesh: the campaign's name concrete devices",
    "_repspec": ("a shard_map body closing over arrays (constants, environment values): the campaign's bodies "
                 "take every array as an argument"),
}


def parts(text: str) -> list[tuple[set[int], str]]:
    """A reason's parts with the lines each speaks of: '1126: a; 1128-1130, 1133: b' -> [({1126}, '1126: a'),
    ({1128, 1129, 1130, 1133}, '1128-1130, 1133: b')]; a part without leading line numbers speaks of all."""
    found = []
    for part in re.split(r"; (?=\d)", text):
        head = re.match(r"^([\d\-, >]+): ", part)
        lines: set[int] = set()
        for first, _, last in re.findall(r"(\d+)(-(?:>)?(\d+))?", head.group(1)) if head else ():
            lines.update(range(int(first), int(last or first) + 1))
        found.append((lines, part))
    return found


def reason(function: str, unreached: set[int] | None = None, modelled: bool = True) -> str:
    """Why `function`'s `unreached` lines are unreached: the parts of its reason that speak of them (every
    part when `unreached` is None), "not judged" when no one has said; a function of a primitive outside
    meshsim's model (`modelled` False) needs no other reason."""
    if function not in REASONS:
        return "not judged" if modelled else _UNMODELLED
    chosen = [text for lines, text in parts(REASONS[function])
              if unreached is None or not lines or lines & unreached]
    return "; ".join(chosen) or "not judged"
