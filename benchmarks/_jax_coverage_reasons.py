"""Why lines of a JAX rule function stay unreached by the rules campaign, judged by reading each one.

`reason("_pbroadcast_lowering")` is the text for that function's unreached lines; a function not judged
here reads "not judged". The reasons name the line ranges they speak of where a function has several.
"""

from __future__ import annotations

_GPU = "registered for platform='gpu' only"
_CPU_LOWERED = ("XLA:CPU cannot run it: the campaign runs the op through oracles.install_cpu_lowerings(), "
                "which registers its own CPU lowering")
_UNMODELLED = "the primitive is outside meshsim's model (no campaign program binds it)"
_TPU = "TPU-only check (ctx.module_context.platforms holds 'tpu')"

REASONS: dict[str, str] = {
    # ---- lowering: platforms and replaced rules
    "_pbroadcast_lowering": f"{_GPU}; {_CPU_LOWERED}",
    "_ragged_all_to_all_lowering": _CPU_LOWERED,
    "_psend_lowering_gpu": f"{_GPU}; XLA:CPU has no Send/Recv, the campaign runs JAX's equivalent ppermute",
    "_precv_lowering_gpu": f"{_GPU}; XLA:CPU has no Send/Recv, the campaign runs JAX's equivalent ppermute",
    "_psend_lowering": "raises on every platform but GPU; the campaign lowers no psend",
    "_precv_lowering": "raises on every platform but GPU; the campaign lowers no precv",
}


def reason(function: str, modelled: bool = True) -> str:
    """Why `function`'s unreached lines are unreached ("not judged" when no one has said); a function of a
    primitive outside meshsim's model (`modelled` False) needs no other reason."""
    if function in REASONS:
        return REASONS[function]
    return "not judged" if modelled else _UNMODELLED
